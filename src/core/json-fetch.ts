/**
 * The part of fetch the sidecar's clients of the platform's own services use (the authority
 * client, a verifier's remote JWKS): one request, its status, its body as JSON. The global
 * fetch fits it as it is; so does the sidecar's node:http transport
 * (src/servers/sidecar/node-json-fetch.ts), which spares the sidecar's start-up loading undici.
 */

export interface JsonFetchInit {
  readonly method?: "GET" | "POST";
  readonly headers: Readonly<Record<string, string>>;
  readonly body?: Buffer;
  /** Aborts the request and the reading of its answer. */
  readonly signal: AbortSignal;
  /** A redirect is never followed: "manual" answers it as it came, "error" fails. */
  readonly redirect: "manual" | "error";
}

export interface JsonAnswer {
  readonly status: number;
  /** The body parsed as JSON; rejects when it is not JSON. */
  json(): Promise<unknown>;
  /** The body's bytes, when the transport read it whole (the sidecar's does; decision 3131). */
  bytes?(): Promise<Uint8Array>;
  /** The unread body (fetch's), to be released; absent when the answer was read whole. */
  readonly body?: { cancel(): Promise<void> } | null;
}

export type JsonFetch = (url: string, init: JsonFetchInit) => Promise<JsonAnswer>;
