/**
 * How the crypto client sends one POST: over node:http(s) with a keep-alive agent (the
 * default: about 2.5x less CPU per call than fetch, which matters at thousands of calls a
 * second), or over an injected fetch. Either way a failure is only "timed out" or
 * "unavailable"; the client decides what an answer means.
 */

import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";

export interface TransportAnswer {
  readonly status: number;
  readonly requestId: string | undefined;
  readonly body: string;
}

export interface TransportRequest {
  /** Default POST; a GET sends no body. */
  readonly method?: "GET" | "POST" | "DELETE";
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
  readonly timeoutMs: number;
}

export type Transport = (url: URL, request: TransportRequest) => Promise<TransportAnswer>;

export class TransportError extends Error {
  readonly kind: "timeout" | "unavailable";
  /** The request never reached a live connection, so sending it again is safe. */
  readonly retryable: boolean;

  constructor(kind: "timeout" | "unavailable", options?: { cause?: unknown; retryable?: boolean }) {
    super(kind === "timeout" ? "request timed out" : "request failed", { cause: options?.cause });
    this.name = "TransportError";
    this.kind = kind;
    this.retryable = options?.retryable ?? false;
  }
}

/** Answers larger than this are refused rather than buffered. */
export const MAX_ANSWER_BYTES = 32 * 1024 * 1024;

function isTimeout(error: unknown): boolean {
  return error instanceof Error && (error.name === "TimeoutError" || error.name === "AbortError");
}

export function fetchTransport(doFetch: typeof globalThis.fetch): Transport {
  return async (url, request) => {
    const signal = AbortSignal.timeout(request.timeoutMs);
    try {
      const response = await doFetch(url, {
        method: request.method ?? "POST",
        headers: request.headers,
        ...(request.method === "GET" ? {} : { body: request.body }),
        redirect: "error",
        signal,
      });
      const body = await response.text();
      return { status: response.status, requestId: response.headers.get("x-request-id") ?? undefined, body };
    } catch (cause) {
      throw new TransportError(isTimeout(cause) ? "timeout" : "unavailable", { cause });
    }
  };
}

function hasCode(error: unknown, codes: readonly string[]): boolean {
  return typeof error === "object" && error !== null && "code" in error && codes.includes(String(error.code));
}

export interface NodeHttpTransportOptions {
  readonly maxSockets?: number;
  /** PEM certificate(s) trusted for https, instead of the system store (a private CA). */
  readonly ca?: string | Buffer;
}

export function nodeHttpTransport(options: NodeHttpTransportOptions = {}): Transport {
  const agentOptions = {
    keepAlive: true,
    maxSockets: options.maxSockets ?? 256,
    scheduling: "lifo" as const,
  };
  // Kept-alive connections: a TLS handshake per call would cost more than the crypto itself.
  const agents = {
    "http:": new HttpAgent(agentOptions),
    "https:": new HttpsAgent({ ...agentOptions, ...(options.ca === undefined ? {} : { ca: options.ca }) }),
  };

  const once = (url: URL, request: TransportRequest, deadline: number) =>
    new Promise<TransportAnswer>((resolve, reject) => {
      const remaining = deadline - Date.now();
      if (remaining <= 0) {
        reject(new TransportError("timeout"));
        return;
      }
      const send = url.protocol === "https:" ? httpsRequest : httpRequest;
      const req = send(url, {
        method: request.method ?? "POST",
        agent: url.protocol === "https:" ? agents["https:"] : agents["http:"],
        headers:
          request.method === "GET"
            ? request.headers
            : { ...request.headers, "content-length": String(Buffer.byteLength(request.body)) },
      });
      const timer = setTimeout(() => req.destroy(new TransportError("timeout")), remaining);
      const fail = (error: unknown) => {
        clearTimeout(timer);
        // A kept-alive socket the server closed just before we wrote: safe to send again once.
        const retryable = req.reusedSocket && hasCode(error, ["ECONNRESET", "EPIPE"]);
        reject(
          error instanceof TransportError
            ? error
            : new TransportError("unavailable", { cause: error, retryable }),
        );
      };
      req.on("error", fail);
      req.on("response", (response: IncomingMessage) => {
        const chunks: Buffer[] = [];
        let size = 0;
        response.on("data", (chunk: Buffer) => {
          size += chunk.length;
          if (size > MAX_ANSWER_BYTES) {
            req.destroy(new TransportError("unavailable"));
            return;
          }
          chunks.push(chunk);
        });
        response.on("error", fail);
        response.on("end", () => {
          clearTimeout(timer);
          const id = response.headers["x-request-id"];
          resolve({
            status: response.statusCode ?? 0,
            requestId: typeof id === "string" ? id : undefined,
            body: Buffer.concat(chunks).toString("utf8"),
          });
        });
      });
      req.end(request.method === "GET" ? undefined : request.body);
    });

  return async (url, request) => {
    const deadline = Date.now() + request.timeoutMs;
    try {
      return await once(url, request, deadline);
    } catch (error) {
      if (error instanceof TransportError && error.retryable) {
        return once(url, request, deadline);
      }
      throw error;
    }
  };
}
