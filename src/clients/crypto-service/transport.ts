/**
 * How the crypto client sends one POST: over kept-alive connections of an undici Agent (the
 * default: several times less CPU per call than fetch, which matters at thousands of calls a
 * second), or over an injected fetch. Either way a failure is only "timed out" or
 * "unavailable"; the client decides what an answer means.
 */

import { createRequire } from "node:module";

export interface TransportAnswer {
  readonly status: number;
  readonly requestId: string | undefined;
  /** The answer as text; empty when it came as `bytes`. */
  readonly body: string;
  /** The answer's bytes, when its content type was the request's `bytesOf`. */
  readonly bytes?: Buffer;
}

export interface TransportRequest {
  /** Default POST; a GET sends no body. */
  readonly method?: "GET" | "POST" | "DELETE";
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string | Uint8Array;
  readonly timeoutMs: number;
  /** An answer of this content type is read as bytes (`TransportAnswer.bytes`), not as text. */
  readonly bytesOf?: string;
}

/** Whether a content-type header names `type` (parameters such as charset aside). */
function isType(header: string | null | undefined, type: string | undefined): boolean {
  return type !== undefined && typeof header === "string" && header.split(";")[0]?.trim() === type;
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
      const requestId = response.headers.get("x-request-id") ?? undefined;
      if (isType(response.headers.get("content-type"), request.bytesOf)) {
        const bytes = Buffer.from(await response.arrayBuffer());
        return { status: response.status, requestId, body: "", bytes };
      }
      return { status: response.status, requestId, body: await response.text() };
    } catch (cause) {
      throw new TransportError(isTimeout(cause) ? "timeout" : "unavailable", { cause });
    }
  };
}

/** undici is loaded by the first keep-alive transport, so a process that makes none does not load it. */
const requireModule = createRequire(import.meta.url);
const loadUndici = (): typeof import("undici") => requireModule("undici") as typeof import("undici");

function hasCode(error: unknown, codes: readonly string[]): boolean {
  return typeof error === "object" && error !== null && "code" in error && codes.includes(String(error.code));
}

/**
 * A connection that had already carried an answer (undici's SocketError says how many bytes
 * it read) and closed before this request's: the server dropped an idle kept-alive
 * connection as we wrote, so the request never reached it.
 */
function closedKeptAliveConnection(error: unknown): boolean {
  if (!hasCode(error, ["UND_ERR_SOCKET", "ECONNRESET", "EPIPE"])) return false;
  const socket = (error as { socket?: { bytesRead?: unknown } }).socket;
  return typeof socket?.bytesRead === "number" && socket.bytesRead > 0;
}

export interface KeepAliveTransportOptions {
  readonly maxSockets?: number;
  /** PEM certificate(s) trusted for https, instead of the system store (a private CA). */
  readonly ca?: string | Buffer;
}

/**
 * POSTs over kept-alive connections from an undici Agent: a TLS handshake per call would cost
 * more than the crypto itself, and undici's client costs about a third less CPU per call than
 * node:http's (decision 2851). An answer over MAX_ANSWER_BYTES is refused, not buffered.
 */
export function keepAliveTransport(options: KeepAliveTransportOptions = {}): Transport {
  const { Agent } = loadUndici();
  const agent = new Agent({
    connections: options.maxSockets ?? 256,
    pipelining: 1,
    maxResponseSize: MAX_ANSWER_BYTES,
    ...(options.ca === undefined ? {} : { connect: { ca: options.ca } }),
  });

  const once = async (url: URL, request: TransportRequest, deadline: number): Promise<TransportAnswer> => {
    const remaining = deadline - Date.now();
    if (remaining <= 0) throw new TransportError("timeout");
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), remaining);
    /** The answer began: the server acted on this request, so a failure now is never sent again. */
    let answered = false;
    try {
      const response = await agent.request({
        origin: url.origin,
        path: `${url.pathname}${url.search}`,
        method: request.method ?? "POST",
        headers: request.headers,
        ...(request.method === "GET" ? {} : { body: request.body }),
        signal: abort.signal,
      });
      answered = true;
      const id = response.headers["x-request-id"];
      const requestId = typeof id === "string" ? id : undefined;
      const type = response.headers["content-type"];
      if (isType(typeof type === "string" ? type : undefined, request.bytesOf)) {
        const bytes = Buffer.from(await response.body.arrayBuffer());
        return { status: response.statusCode, requestId, body: "", bytes };
      }
      return { status: response.statusCode, requestId, body: await response.body.text() };
    } catch (cause) {
      if (abort.signal.aborted) throw new TransportError("timeout", { cause });
      const retryable = !answered && closedKeptAliveConnection(cause);
      throw new TransportError("unavailable", { cause, retryable });
    } finally {
      clearTimeout(timer);
    }
  };

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
