import { acceptedRequestId } from "../../../core/request-id.ts";
import type { CheckInput } from "./types.ts";

/**
 * Turns a CheckRequest into a CheckInput. Pure and total: whatever the peer sent, missing or
 * mistyped attributes become empty values — never a throw — and the caller decides whether
 * the result is complete enough to ask for a decision.
 */

export interface ParsedCheckRequest {
  readonly input: CheckInput;
  /** False when the request has no HTTP method or path: nothing can be authorized. */
  readonly complete: boolean;
}

type Bag = Readonly<Record<string, unknown>>;

function bag(value: unknown): Bag | undefined {
  return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Bag) : undefined;
}

function text(value: unknown): string {
  return typeof value === "string" ? value : "";
}

const utf8 = new TextDecoder("utf-8", { fatal: false });

function bytesText(value: unknown): string {
  return value instanceof Uint8Array ? utf8.decode(value) : "";
}

/** Headers join with `, ` (RFC 9110 §5.3), except cookie, whose pairs join with `; `. */
function appendHeader(target: Map<string, string>, name: string, value: string): void {
  const key = name.toLowerCase();
  const previous = target.get(key);
  if (previous === undefined) target.set(key, value);
  else target.set(key, `${previous}${key === "cookie" ? "; " : ", "}${value}`);
}

/** The few CheckRequest fields a decision needs, however they were decoded. */
export interface RawCheckRequest {
  readonly id: string;
  readonly method: string;
  readonly path: string;
  readonly host: string;
  readonly scheme: string;
  /** `HttpRequest.headers` entries, as received. */
  readonly headers: Iterable<readonly [string, string]>;
  /** `HttpRequest.header_map` entries (value, else raw_value as text), used when `headers` is empty. */
  readonly headerMap: Iterable<readonly [string, string]>;
  readonly contextExtensions: Iterable<readonly [string, string]>;
  /** `source.principal`. */
  readonly principal: string;
  /** `HttpRequest.body` (with_request_body), "" when absent. */
  readonly body?: string;
  /** `HttpRequest.raw_body` (with_request_body and pack_as_bytes), empty when absent. */
  readonly rawBody?: Uint8Array;
}

/**
 * The CheckInput of a request, from the few fields `parseCheckRequest` reads out of a
 * decoded message.
 */
export function buildCheckInput(raw: RawCheckRequest): ParsedCheckRequest {
  const merged = new Map<string, string>();
  for (const [name, value] of raw.headers) {
    if (name !== "") appendHeader(merged, name, value);
  }
  // Envoy sends header_map instead of headers when encode_raw_headers is on.
  if (merged.size === 0) {
    for (const [name, value] of raw.headerMap) {
      if (name !== "") appendHeader(merged, name, value);
    }
  }
  // Object.fromEntries defines own properties, so a hostile `__proto__` key stays a plain key.
  const headers: Record<string, string> = Object.fromEntries(merged);

  const method = raw.method || (headers[":method"] ?? "");
  const path = raw.path || (headers[":path"] ?? "");
  const host = raw.host || (headers[":authority"] ?? headers.host ?? "");
  const scheme = raw.scheme || (headers[":scheme"] ?? "");
  // The caller's X-Request-Id (Envoy's, as it forwards it) names the decision, so Envoy's
  // access log, the deny and the audit record match; HttpRequest.id is Envoy's stream id, the
  // fallback. Neither acceptable: the server mints one.
  const requestId = acceptedRequestId(headers["x-request-id"]) ?? acceptedRequestId(raw.id) ?? "";
  const sourcePrincipal = raw.principal;
  // Envoy sends one of the two; raw bytes when it packs them (no UTF-8 replacement).
  const body = raw.rawBody !== undefined && raw.rawBody.byteLength > 0 ? raw.rawBody : raw.body || undefined;

  const input: CheckInput = {
    method,
    path,
    host,
    scheme,
    headers,
    contextExtensions: Object.fromEntries(raw.contextExtensions),
    ...(requestId === "" ? {} : { requestId }),
    ...(sourcePrincipal === "" ? {} : { sourcePrincipal }),
    ...(body === undefined ? {} : { body }),
  };
  return { input, complete: method !== "" && path !== "" };
}

function stringEntries(value: unknown): Array<[string, string]> {
  const source = bag(value);
  if (source === undefined) return [];
  const entries: Array<[string, string]> = [];
  for (const [key, entry] of Object.entries(source)) {
    if (typeof entry === "string") entries.push([key, entry]);
  }
  return entries;
}

function headerMapEntries(http: Bag | undefined): Array<[string, string]> {
  const raw = bag(http?.header_map)?.headers;
  if (!Array.isArray(raw)) return [];
  const entries: Array<[string, string]> = [];
  for (const entry of raw) {
    const header = bag(entry);
    entries.push([text(header?.key), text(header?.value) || bytesText(header?.raw_value)]);
  }
  return entries;
}

/** Turns a decoded CheckRequest (proto-loader's object form) into a CheckInput. */
export function parseCheckRequest(message: unknown): ParsedCheckRequest {
  const attributes = bag(bag(message)?.attributes);
  const http = bag(bag(attributes?.request)?.http);
  return buildCheckInput({
    id: text(http?.id),
    method: text(http?.method),
    path: text(http?.path),
    host: text(http?.host),
    scheme: text(http?.scheme),
    headers: stringEntries(http?.headers),
    headerMap: headerMapEntries(http),
    contextExtensions: stringEntries(attributes?.context_extensions),
    principal: text(bag(attributes?.source)?.principal),
    body: text(http?.body),
    rawBody: http?.raw_body instanceof Uint8Array ? http.raw_body : undefined,
  });
}
