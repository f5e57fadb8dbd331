import { ownValue, setOwn } from "../../../core/own-property.ts";
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
type Mutable<T> = { -readonly [K in keyof T]: T[K] };

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
function appendHeader(target: Record<string, string>, name: string, value: string): void {
  const key = name.toLowerCase();
  const previous = ownValue(target, key);
  setOwn(
    target,
    key,
    previous === undefined ? value : `${previous}${key === "cookie" ? "; " : ", "}${value}`,
  );
}

// The request is read straight into the objects a decision needs: no entry arrays, maps or
// copies in between (every Check allocates them, and a call that waits long enough promotes
// them to the old generation; see docs/decisions/2961).

/**
 * `HttpRequest.headers`, names lower-cased and repeated names joined; when it is empty,
 * `HttpRequest.header_map` (value, else raw_value as text), which Envoy sends instead when
 * encode_raw_headers is on. Own keys only, `__proto__` a plain key.
 */
function requestHeaders(http: Bag | undefined): Record<string, string> {
  const headers: Record<string, string> = {};
  let found = false;
  const source = bag(http?.headers);
  for (const name in source) {
    const value = source[name];
    if (name === "" || typeof value !== "string" || !Object.hasOwn(source, name)) continue;
    appendHeader(headers, name, value);
    found = true;
  }
  if (found) return headers;
  const raw = bag(http?.header_map)?.headers;
  if (!Array.isArray(raw)) return headers;
  for (const entry of raw) {
    const header = bag(entry);
    const name = text(header?.key);
    if (name !== "") appendHeader(headers, name, text(header?.value) || bytesText(header?.raw_value));
  }
  return headers;
}

/** The string members of a map field (context_extensions), as an object of own keys. */
function stringRecord(value: unknown): Record<string, string> {
  const record: Record<string, string> = {};
  const source = bag(value);
  for (const key in source) {
    const entry = source[key];
    if (typeof entry === "string" && Object.hasOwn(source, key)) setOwn(record, key, entry);
  }
  return record;
}

/** Turns a decoded CheckRequest (proto-loader's object form) into a CheckInput. */
export function parseCheckRequest(message: unknown): ParsedCheckRequest {
  const attributes = bag(bag(message)?.attributes);
  const http = bag(bag(attributes?.request)?.http);
  const headers = requestHeaders(http);
  const method = text(http?.method) || (headers[":method"] ?? "");
  const path = text(http?.path) || (headers[":path"] ?? "");
  const host = text(http?.host) || (headers[":authority"] ?? headers.host ?? "");
  const scheme = text(http?.scheme) || (headers[":scheme"] ?? "");
  // The caller's X-Request-Id (Envoy's, as it forwards it) names the decision, so Envoy's
  // access log, the deny and the audit record match; HttpRequest.id is Envoy's stream id, the
  // fallback. Neither acceptable: the server mints one.
  const requestId = acceptedRequestId(headers["x-request-id"]) ?? acceptedRequestId(text(http?.id));
  const sourcePrincipal = text(bag(attributes?.source)?.principal);
  // Envoy sends one of the two; raw bytes when it packs them (no UTF-8 replacement).
  const rawBody = http?.raw_body;
  const body =
    rawBody instanceof Uint8Array && rawBody.byteLength > 0 ? rawBody : text(http?.body) || undefined;

  const input: Mutable<CheckInput> = {
    method,
    path,
    host,
    scheme,
    headers,
    contextExtensions: stringRecord(attributes?.context_extensions),
  };
  if (requestId !== undefined) input.requestId = requestId;
  if (sourcePrincipal !== "") input.sourcePrincipal = sourcePrincipal;
  if (body !== undefined) input.body = body;
  return { input, complete: method !== "" && path !== "" };
}
