import { parseBoundedJson } from "../core/bounded-json.ts";
import type { OperationSnapshot } from "../core/operation-snapshot.ts";
import { ownValue, setOwn } from "../core/own-property.ts";
import { AuthorityError } from "../errors.ts";
import { constrainsBody } from "../execute/input.ts";
import { ROUTING_OVERRIDE_HEADERS } from "../execute/routing-overrides.ts";

/**
 * A caller's HTTP request as operation arguments (path parameters, query, declared headers,
 * JSON body): the input stage of the pipeline on the sidecar's transports (ext_authz and the
 * forward proxy) — the same values the authority's paths pass as `args`. Which headers may
 * reach the upstream is the transports' (src/servers/sidecar/request-input.ts);
 * docs/decisions/0501-sidecar-request-enforcement.md says why.
 */

export type HeaderBag = Readonly<Record<string, string | readonly string[] | undefined>>;

/**
 * The body as the transport has it. Absent means the transport did not see one: the engine
 * then decides from the framing headers whether there can be a body (see `bodyArgument`).
 */
export type RequestBody =
  | { readonly state: "complete"; readonly bytes: Uint8Array | string }
  /** Cut short by the transport (Envoy's `x-envoy-auth-partial-body: true`). */
  | { readonly state: "partial" };

const declaredByOperation = new WeakMap<object, ReadonlySet<string>>();

/** The header names the snapshot's input schema declares (lower case). */
export function declaredHeaders(operation: OperationSnapshot): ReadonlySet<string> {
  const schema = operation.input_schema.headers;
  const known = declaredByOperation.get(schema);
  if (known !== undefined) return known;
  const properties = (schema as { properties?: unknown }).properties;
  const names = new Set<string>(
    typeof properties === "object" && properties !== null
      ? Object.keys(properties).map((name) => name.toLowerCase())
      : [],
  );
  declaredByOperation.set(schema, names);
  return names;
}

function first(value: string | readonly string[] | undefined): string | undefined {
  return typeof value === "string" ? value : value?.[0];
}

/** What the form parser would decode (escapes, `+`); lone surrogates are checked apart. */
const FORM_DECODED = /[%+]/;

/** Adds one query pair: a repeated name becomes an array (ours, appended to), in order. */
function addPair(out: Record<string, string | string[]>, name: string, value: string): void {
  const previous = ownValue(out, name) as string | string[] | undefined;
  if (previous === undefined) setOwn(out, name, value);
  else if (Array.isArray(previous)) previous.push(value);
  else setOwn(out, name, [previous, value]);
}

/**
 * Adds the name/value pairs of a form-encoded query exactly as an upstream's URL parser reads
 * them: a leading `?` is part of the first name, `+` is a space. A query with nothing to
 * decode is split in place, without the parser's objects (this runs on every Check that has a
 * query). Linear in the query's length, however its pairs are spelled: the caller chooses it.
 */
function addFormPairs(out: Record<string, string | string[]>, query: string): void {
  if (FORM_DECODED.test(query) || !query.isWellFormed()) {
    // "?"-prefixed: the constructor strips one leading "?", which to the upstream's URL parser
    // is part of the query (and of its first name).
    for (const [name, value] of new URLSearchParams(`?${query}`)) addPair(out, name, value);
    return;
  }
  let equals = query.indexOf("=");
  for (let from = 0; from < query.length; ) {
    const amp = query.indexOf("&", from);
    const to = amp < 0 ? query.length : amp;
    if (equals >= 0 && equals < from) equals = query.indexOf("=", from);
    if (to > from) {
      if (equals < 0 || equals > to) addPair(out, query.slice(from, to), "");
      else addPair(out, query.slice(from, equals), query.slice(equals + 1, to));
    }
    from = to + 1;
  }
}

/** The query string's parameters, repeated names as arrays, decoded as form data (`+` is a space). */
export function queryArguments(path: string): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  // A "?" after a "#" is the fragment's, not a query (as normalizeRequestPath and URL read it).
  const hash = path.indexOf("#");
  const at = path.indexOf("?");
  if (at < 0 || (hash >= 0 && hash < at) || at === path.length - 1) return out;
  addFormPairs(out, path.slice(at + 1, hash < 0 ? undefined : hash));
  return out;
}

/**
 * The declared headers' values, as the schema sees them (lower-case names). Ordinary objects,
 * like the query's: the validators enumerate them several times faster than dictionaries.
 */
export function headerArguments(headers: HeaderBag, declared: ReadonlySet<string>): Record<string, string> {
  const out: Record<string, string> = {};
  // No shortcut for an operation that declares no header: its routing overrides must still
  // reach the enforcement step and be refused, as on invoke, broker and MCP.
  for (const raw in headers) {
    if (!Object.hasOwn(headers, raw)) continue;
    const name = raw.toLowerCase();
    const value = headers[raw];
    // A routing override is an argument too, so that the enforcement step refuses it.
    if (value === undefined || !(declared.has(name) || ROUTING_OVERRIDE_HEADERS.has(name))) continue;
    setOwn(out, name, typeof value === "string" ? value : value.join(", "));
  }
  return out;
}

/** RFC 9112 §6.3: without Content-Length or Transfer-Encoding there is no body. */
function framingSaysNoBody(headers: HeaderBag): boolean {
  const length = first(headers["content-length"]);
  if (length !== undefined) return length.trim() === "0";
  return first(headers["transfer-encoding"]) === undefined;
}

const needsBodyByOperation = new WeakMap<object, boolean>();

/** The snapshot takes a body or constrains one: the body must be seen to enforce it. */
export function operationNeedsBody(operation: OperationSnapshot): boolean {
  let needs = needsBodyByOperation.get(operation);
  if (needs === undefined) {
    needs = operation.input_schema.body !== null || constrainsBody(operation);
    needsBodyByOperation.set(operation, needs);
  }
  return needs;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

function invalidBody(keyword: string): AuthorityError {
  return new AuthorityError("invalid_input", `Invalid input at body: ${keyword}.`, {
    details: { reason: "invalid_input", issues: [{ location: "body", pointer: "", keyword }] },
  });
}

function isJsonMediaType(contentType: string | undefined): boolean {
  const type = (contentType?.split(";")[0] ?? "").trim().toLowerCase();
  return type === "application/json" || type.endsWith("+json");
}

/**
 * Whether an object of this (already valid) JSON text names a member twice. Parsers differ
 * on which one counts (JSON.parse keeps the last, others the first), and on ext_authz the
 * upstream parses the very bytes that were checked: a duplicate could pass the check with
 * one value and reach the upstream with the other. Keys compare decoded ("\u0061" is "a").
 */
export function hasDuplicateKey(text: string): boolean {
  const frames: Array<Set<string> | undefined> = [];
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      let end = i + 1;
      while (end < text.length && text.charCodeAt(end) !== 0x22) end += text.charCodeAt(end) === 0x5c ? 2 : 1;
      const keys = frames.at(-1);
      if (expectKey && keys !== undefined) {
        const key = JSON.parse(text.slice(i, end + 1)) as string;
        if (keys.has(key)) return true;
        keys.add(key);
        expectKey = false;
      }
      i = end;
    } else if (c === 0x7b /* { */) {
      frames.push(new Set());
      expectKey = true;
    } else if (c === 0x5b /* [ */) {
      frames.push(undefined);
      expectKey = false;
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      frames.pop();
      expectKey = false;
    } else if (c === 0x2c /* , */) {
      expectKey = frames.at(-1) !== undefined;
    }
  }
  return false;
}

/** Marks a body the operation does not take: enforcement answers `invalid_input` (notAccepted). */
const UNACCEPTED_BODY: unknown = Object.freeze({});

/**
 * The body as an argument: `undefined` when there is none; the parsed JSON when the
 * operation takes or constrains a body. Throws `request_body_required` when a needed body
 * was not seen whole — an unseen body is never treated as an absent one, whatever the
 * framing headers claim —,
 * `invalid_input` / `unsupported_media_type` for a body that is not JSON, and
 * `input_too_complex` for one beyond the JSON limits (core/bounded-json.ts).
 */
export function bodyArgument(
  operation: OperationSnapshot,
  headers: HeaderBag,
  body: RequestBody | undefined,
): unknown {
  if (body?.state === "partial") {
    if (operationNeedsBody(operation)) throw new AuthorityError("request_body_required");
    return UNACCEPTED_BODY;
  }
  if (body === undefined) {
    // What the framing headers say is the caller's word, not the body: `Content-Length: 0`
    // can sit beside `Transfer-Encoding: chunked`, and over HTTP/2 a body needs neither. An
    // empty body Envoy sent looks like none in a CheckRequest, so only bytes seen count.
    if (operationNeedsBody(operation)) throw new AuthorityError("request_body_required");
    if (framingSaysNoBody(headers)) return undefined;
    // A body the operation does not take, and that nothing could check: refused like MCP's.
    return UNACCEPTED_BODY;
  }
  const size = typeof body.bytes === "string" ? body.bytes.length : body.bytes.byteLength;
  if (size === 0) return undefined;
  if (!operationNeedsBody(operation)) return UNACCEPTED_BODY;
  if (!isJsonMediaType(first(headers["content-type"]))) throw new AuthorityError("unsupported_media_type");
  const encoding = first(headers["content-encoding"])?.trim().toLowerCase();
  if (encoding !== undefined && encoding !== "" && encoding !== "identity")
    throw new AuthorityError("unsupported_media_type");
  let text: string;
  try {
    text = typeof body.bytes === "string" ? body.bytes : utf8.decode(body.bytes);
  } catch {
    throw invalidBody("json");
  }
  let value: unknown;
  try {
    // Bounded (nesting, members, path length) before anything walks or re-serializes it.
    value = parseBoundedJson(text);
  } catch (error) {
    if (error instanceof SyntaxError) throw invalidBody("json");
    throw error;
  }
  if (hasDuplicateKey(text)) throw invalidBody("duplicateKey");
  return value;
}

/** The request as operation arguments for the shared enforcement step. */
export function operationArguments(
  operation: OperationSnapshot,
  params: Readonly<Record<string, string>>,
  path: string,
  headers: HeaderBag,
  body: RequestBody | undefined,
): {
  path: Record<string, string>;
  query: Record<string, string | string[]>;
  headers: Record<string, string>;
  body?: unknown;
} {
  const value = bodyArgument(operation, headers, body);
  const args = {
    path: { ...params },
    query: queryArguments(path),
    headers: headerArguments(headers, declaredHeaders(operation)),
  };
  return value === undefined ? args : { ...args, body: value };
}
