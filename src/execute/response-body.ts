import { JsonLimitError, parseBoundedJson } from "../core/bounded-json.ts";

/**
 * Reads an upstream body for redaction, failing closed (docs/execution.md, "Response
 * redaction"; docs/decisions/0401-redaction-fails-closed.md). Redaction applies when the
 * operation or policy has rules, when the body is declared JSON (`application/json`,
 * `*+json`, NDJSON types), or when it looks like JSON (its first significant character,
 * after a byte-order mark and whitespace, in UTF-8 or UTF-16, is `{` or `[`). Then the
 * body is decoded honouring a leading BOM (UTF-8, UTF-16LE/BE), else the charset parameter,
 * else UTF-16 detected by its NUL pattern, else UTF-8 — strictly (invalid bytes fail) — and
 * parsed as one JSON document (NDJSON types: one document per non-empty line), within the
 * JSON limits (core/bounded-json.ts). Anything else (trailing bytes, NaN, JSONP, an unknown
 * charset, nesting past the limits) is RedactionDecodeError: the response is refused, never
 * passed through; so is a body the operation's or policy's rules apply to that is not
 * declared (ND)JSON. Bodies to which redaction does not apply (no rules, not JSON by type or
 * content) are `other`: scrub-redact.ts still refuses one from which a client could read a
 * sensitive member (embedded-members.ts).
 */

export type RedactionInput =
  | { readonly kind: "empty" }
  /**
   * `text`: the decoded JSON text; `plainUtf8`: the bytes were UTF-8 without a BOM
   * (re-serializing changes no encoding).
   */
  | { readonly kind: "json"; readonly value: unknown; readonly text: string; readonly plainUtf8: boolean }
  | { readonly kind: "ndjson"; readonly values: unknown[]; readonly text: string }
  | { readonly kind: "other" };

/**
 * `charset`: undecodable bytes or an unknown charset; `not_json`: not one JSON document;
 * `too_complex`: past the JSON limits; `content_type`: rules apply and the declared type is
 * not (ND)JSON; `embedded_member`: a client could read a member that must be masked out of it
 * (embedded-members.ts).
 */
export type RedactionDecodeIssue =
  | "charset"
  | "not_json"
  | "too_complex"
  | "content_type"
  | "embedded_member";

const ISSUE_MESSAGES: Readonly<Record<RedactionDecodeIssue, string>> = {
  charset: "the body cannot be decoded",
  not_json: "the body is not JSON",
  too_complex: "the body exceeds the JSON limits",
  content_type: "the body is not declared JSON",
  embedded_member: "the body holds JSON that cannot be redacted in place",
};

/** The body must be redacted but cannot be read as JSON; the message names no content. */
export class RedactionDecodeError extends Error {
  readonly issue: RedactionDecodeIssue;

  constructor(issue: RedactionDecodeIssue) {
    super(ISSUE_MESSAGES[issue]);
    this.name = "RedactionDecodeError";
    this.issue = issue;
  }
}

const NDJSON_TYPES: ReadonlySet<string> = new Set([
  "application/x-ndjson",
  "application/ndjson",
  "application/jsonl",
  "application/x-jsonlines",
  "application/jsonlines",
]);

export interface ParsedContentType {
  /** Lower-case `type/subtype`, "" when absent. */
  readonly mediaType: string;
  /** Lower-case charset parameter, when given. */
  readonly charset: string | undefined;
}

export function parseContentType(header: string | null | undefined): ParsedContentType {
  if (header === null || header === undefined) return { mediaType: "", charset: undefined };
  const [type = "", ...params] = header.split(";");
  let charset: string | undefined;
  for (const param of params) {
    const eq = param.indexOf("=");
    if (eq === -1 || param.slice(0, eq).trim().toLowerCase() !== "charset") continue;
    charset = param
      .slice(eq + 1)
      .trim()
      .replace(/^"(.*)"$/, "$1")
      .toLowerCase();
  }
  return { mediaType: type.trim().toLowerCase(), charset };
}

export function isJsonMediaType(mediaType: string): boolean {
  return mediaType === "application/json" || mediaType === "text/json" || mediaType.endsWith("+json");
}

export function isNdjsonMediaType(mediaType: string): boolean {
  return NDJSON_TYPES.has(mediaType);
}

type Encoding = "utf-8" | "utf-16le" | "utf-16be" | string;

interface Sniffed {
  readonly encoding: Encoding;
  /** Bytes of the byte-order mark to skip. */
  readonly bomLength: number;
}

/** BOM first (it overrides a declared charset, as browsers do), then charset, then RFC 4627 NUL pattern. */
function sniffEncoding(bytes: Uint8Array, charset: string | undefined): Sniffed {
  const [b0, b1, b2, b3] = bytes;
  if (b0 === 0xef && b1 === 0xbb && b2 === 0xbf) return { encoding: "utf-8", bomLength: 3 };
  if (b0 === 0xff && b1 === 0xfe) return { encoding: "utf-16le", bomLength: 2 };
  if (b0 === 0xfe && b1 === 0xff) return { encoding: "utf-16be", bomLength: 2 };
  if (charset !== undefined) return { encoding: charset === "utf-16" ? "utf-16le" : charset, bomLength: 0 };
  if (bytes.length >= 4) {
    if (b0 === 0 && b1 !== 0 && b2 === 0 && b3 !== 0) return { encoding: "utf-16be", bomLength: 0 };
    if (b0 !== 0 && b1 === 0 && b2 !== 0 && b3 === 0) return { encoding: "utf-16le", bomLength: 0 };
  }
  return { encoding: "utf-8", bomLength: 0 };
}

const WHITESPACE: ReadonlySet<number> = new Set([0x20, 0x09, 0x0a, 0x0d, 0x00, 0xfe, 0xff, 0xef, 0xbb, 0xbf]);

/**
 * Whether the first significant byte is `{` or `[` ("unknown" while only whitespace has been
 * seen). NULs and BOM bytes are skipped with whitespace, so UTF-16 in either order (with or
 * without BOM) is seen too.
 */
export function looksLikeJson(bytes: Uint8Array): "yes" | "no" | "unknown" {
  const limit = Math.min(bytes.length, 4096);
  for (let i = 0; i < limit; i++) {
    const byte = bytes[i] ?? 0;
    if (WHITESPACE.has(byte)) continue;
    return byte === 0x7b || byte === 0x5b ? "yes" : "no";
  }
  return "unknown";
}

function decodeStrict(bytes: Uint8Array, sniffed: Sniffed): string {
  let decoder: InstanceType<typeof TextDecoder>;
  try {
    decoder = new TextDecoder(sniffed.encoding, { fatal: true, ignoreBOM: true });
  } catch {
    throw new RedactionDecodeError("charset");
  }
  try {
    return decoder.decode(bytes.subarray(sniffed.bomLength));
  } catch {
    throw new RedactionDecodeError("charset");
  }
}

/** The upstream is partner-controlled: its JSON is bounded like a caller's (core/bounded-json.ts). */
function parseJson(text: string): unknown {
  try {
    return parseBoundedJson(text, "response body");
  } catch (error) {
    throw new RedactionDecodeError(error instanceof JsonLimitError ? "too_complex" : "not_json");
  }
}

/** Whether redaction applies to a body of this type and content (see the module comment). */
export function redactionApplies(bytes: Uint8Array, mediaType: string, hasRules: boolean): boolean {
  return (
    hasRules || isJsonMediaType(mediaType) || isNdjsonMediaType(mediaType) || looksLikeJson(bytes) === "yes"
  );
}

/**
 * The body as redaction needs it. `hasRules`: the operation or policy has response rules.
 * Throws RedactionDecodeError when redaction applies and the body is not (ND)JSON.
 */
export function readForRedaction(
  bytes: Uint8Array,
  contentType: string | null | undefined,
  hasRules: boolean,
): RedactionInput {
  if (bytes.byteLength === 0) return { kind: "empty" };
  const { mediaType, charset } = parseContentType(contentType);
  if (!redactionApplies(bytes, mediaType, hasRules)) return { kind: "other" };
  // Rules say how to read JSON: an answer not declared JSON is not read as JSON (decision 2505).
  if (hasRules && !isJsonMediaType(mediaType) && !isNdjsonMediaType(mediaType))
    throw new RedactionDecodeError("content_type");
  const sniffed = sniffEncoding(bytes, charset);
  const text = decodeStrict(bytes, sniffed);
  if (isNdjsonMediaType(mediaType)) {
    const values: unknown[] = [];
    for (const line of text.split("\n")) {
      const trimmed = line.endsWith("\r") ? line.slice(0, -1) : line;
      if (trimmed.trim() === "") continue;
      values.push(parseJson(trimmed));
    }
    return { kind: "ndjson", values, text };
  }
  const plainUtf8 = sniffed.bomLength === 0 && sniffed.encoding.replace("utf8", "utf-8") === "utf-8";
  return { kind: "json", value: parseJson(text), text, plainUtf8 };
}

/**
 * Text of a body redaction does not apply to (returned as a string by the executor):
 * BOM, then charset, else UTF-8; lenient (invalid bytes become U+FFFD), as before.
 */
export function decodeTextLeniently(bytes: Uint8Array, contentType: string | null | undefined): string {
  const sniffed = sniffEncoding(bytes, parseContentType(contentType).charset);
  try {
    return new TextDecoder(sniffed.encoding, { ignoreBOM: true }).decode(bytes.subarray(sniffed.bomLength));
  } catch {
    return new TextDecoder("utf-8").decode(bytes);
  }
}
