/**
 * The sidecar's transport to the platform's own services (the authority, the token endpoint, its
 * trusted issuers' JWKS): node:http(s) over kept-alive agents, the answer read whole under a byte limit. Not
 * undici, which fetch (and anything touching `Headers`) loads: ≈ 25–30 ms of CPU at start that
 * the start-up snapshot cannot hold (decisions 2811, 3021, 3081); http and https are loaded for
 * the sidecar's own ports and gRPC anyway. TLS: Node's defaults (system store and
 * NODE_EXTRA_CA_CERTS), as fetch.
 */
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import type { JsonAnswer, JsonFetch, JsonFetchInit } from "../../core/json-fetch.ts";
import { positiveIntegerOption } from "../../core/positive-integer.ts";

/** An answer larger than the transport's limit: refused rather than buffered. */
export class AnswerTooLargeError extends Error {
  constructor(limit: number) {
    super(`the answer exceeds ${limit} bytes`);
    this.name = "AnswerTooLargeError";
  }
}

/** fetch's redirect statuses (a 304 is an answer, not a redirect). */
const REDIRECTS: ReadonlySet<number> = new Set([301, 302, 303, 307, 308]);

export interface NodeJsonFetchOptions {
  /** Largest answer body read (bytes). */
  readonly maxAnswerBytes: number;
}

/** An answer read whole: its JSON, or its bytes for a caller that parses them itself. */
export function answerOf(status: number, bytes: Buffer): JsonAnswer {
  return {
    status,
    json: async () => JSON.parse(bytes.toString("utf8")) as unknown,
    bytes: async () => bytes,
  };
}

/** Idle kept-alive sockets are unreferenced by Node's agents: they never hold the process open. */
export function createNodeJsonFetch(options: NodeJsonFetchOptions): JsonFetch {
  const limit = positiveIntegerOption(options.maxAnswerBytes, undefined, "maxAnswerBytes");
  // Made on first use: in the start-up snapshot node:http(s) are stand-ins loaded after start.
  let agents: { readonly http: HttpAgent; readonly https: HttpsAgent } | undefined;
  const agentsNow = () =>
    (agents ??= { http: new HttpAgent({ keepAlive: true }), https: new HttpsAgent({ keepAlive: true }) });

  /**
   * One exchange. `onStale`: the request failed on a reused kept-alive connection before any
   * answer (most likely the server had closed it as idle meanwhile); called instead of failing.
   */
  const exchange = (url: string, init: JsonFetchInit, onStale?: () => Promise<JsonAnswer>) =>
    new Promise<JsonAnswer>((resolve, reject) => {
      const target = new URL(url);
      const secure = target.protocol === "https:";
      if (!secure && target.protocol !== "http:")
        return reject(new TypeError("only http(s) URLs are fetched"));
      // Refused as fetch refuses it: node:http would send a URL's user-info as Basic credentials.
      if (target.username !== "" || target.password !== "")
        return reject(new TypeError("a URL with credentials is not fetched"));
      init.signal.throwIfAborted();
      let settled = false;
      const fail = (error: unknown) => {
        if (settled) return;
        settled = true;
        // As fetch: an aborted request rejects with the signal's reason (a TimeoutError for a deadline).
        reject(init.signal.aborted ? init.signal.reason : error);
      };
      let answered = false;
      const read = (response: IncomingMessage) => {
        answered = true;
        const status = response.statusCode ?? 0;
        if (init.redirect === "error" && REDIRECTS.has(status)) {
          fail(new Error(`redirect refused (${status})`));
          request.destroy();
          return;
        }
        const chunks: Buffer[] = [];
        let size = 0;
        response.on("data", (chunk: Buffer) => {
          size += chunk.length;
          if (size > limit) {
            fail(new AnswerTooLargeError(limit));
            request.destroy();
            return;
          }
          chunks.push(chunk);
        });
        response.on("error", fail);
        response.on("close", () => {
          if (!response.complete) fail(new Error("the answer was cut off"));
        });
        response.on("end", () => {
          if (settled) return;
          settled = true;
          resolve(answerOf(status, Buffer.concat(chunks, size)));
        });
      };
      const body = init.body;
      const request = (secure ? httpsRequest : httpRequest)(
        target,
        {
          method: init.method ?? "GET",
          headers:
            body === undefined ? init.headers : { ...init.headers, "content-length": String(body.length) },
          agent: secure ? agentsNow().https : agentsNow().http,
          // Aborts the request, and the answer's reading after it came (the socket is destroyed).
          signal: init.signal,
        },
        read,
      );
      request.on("error", (error) => {
        if (onStale !== undefined && !answered && request.reusedSocket && !init.signal.aborted) {
          settled = true;
          onStale().then(resolve, reject);
          return;
        }
        fail(error);
      });
      // Whatever else ended the exchange before an answer (a 101 upgrade nobody asked for: Node
      // drops the socket and says nothing), the call settles: one that never does would hold its
      // caller, and a key-set reload every token shares, forever (3121). An answer settles by its own end.
      request.on("close", () => {
        if (!answered) fail(new Error("the connection closed without an answer"));
      });
      request.end(body);
    });

  // Only a GET is sent again: the authority's reads; a POST (decision records) is retried by its sender.
  return (url, init) =>
    exchange(url, init, (init.method ?? "GET") === "GET" ? () => exchange(url, init) : undefined);
}
