import type { CheckInput } from "./types.ts";

/**
 * Turns a decoded CheckRequest into a CheckInput. Pure and total: whatever the peer sent,
 * missing or mistyped attributes become empty values — never a throw — and the caller decides
 * whether the result is complete enough to ask for a decision.
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

// Object.fromEntries defines own properties, so a hostile `__proto__` key stays a plain key.
function headersOf(http: Bag | undefined): Record<string, string> {
  const merged = new Map<string, string>();
  const map = bag(http?.headers);
  if (map !== undefined) {
    for (const [name, value] of Object.entries(map)) {
      if (name !== "" && typeof value === "string") appendHeader(merged, name, value);
    }
  }
  // Envoy sends header_map instead of headers when encode_raw_headers is on.
  const raw = bag(http?.header_map)?.headers;
  if (merged.size === 0 && Array.isArray(raw)) {
    for (const entry of raw) {
      const header = bag(entry);
      const name = text(header?.key);
      if (name === "") continue;
      const value = text(header?.value) || bytesText(header?.raw_value);
      appendHeader(merged, name, value);
    }
  }
  return Object.fromEntries(merged);
}

function stringMap(value: unknown): Record<string, string> {
  const source = bag(value);
  if (source === undefined) return {};
  const entries: [string, string][] = [];
  for (const [key, entry] of Object.entries(source)) {
    if (typeof entry === "string") entries.push([key, entry]);
  }
  return Object.fromEntries(entries);
}

const printableId = /^[\x21-\x7e]{1,128}$/;

export function parseCheckRequest(message: unknown): ParsedCheckRequest {
  const attributes = bag(bag(message)?.attributes);
  const http = bag(bag(attributes?.request)?.http);
  const headers = headersOf(http);

  const method = text(http?.method) || (headers[":method"] ?? "");
  const path = text(http?.path) || (headers[":path"] ?? "");
  const host = text(http?.host) || (headers[":authority"] ?? headers.host ?? "");
  const scheme = text(http?.scheme) || (headers[":scheme"] ?? "");
  const candidateId = text(http?.id) || headers["x-request-id"] || "";
  // Echoed in deny bodies and logs: only a short printable id is kept.
  const requestId = printableId.test(candidateId) ? candidateId : "";
  const sourcePrincipal = text(bag(attributes?.source)?.principal);

  const input: CheckInput = {
    method,
    path,
    host,
    scheme,
    headers,
    contextExtensions: stringMap(attributes?.context_extensions),
    ...(requestId === "" ? {} : { requestId }),
    ...(sourcePrincipal === "" ? {} : { sourcePrincipal }),
  };
  return { input, complete: method !== "" && path !== "" };
}
