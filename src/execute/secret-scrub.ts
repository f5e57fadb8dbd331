import { isRecord, setOwn } from "../core/own-property.ts";
import { baseView, type DecodedView, forEachView, ViewBudgetError } from "./decoded-views.ts";

/**
 * Removes the credentials the pipeline injected from what an upstream sends back, so that
 * an upstream that echoes its request (a debug endpoint, an error page quoting headers, a
 * JSON field named `received`) cannot hand the agent a credential it could use to call the
 * upstream directly, outside all policy. One module for every path that returns upstream
 * responses: the executor (invoke, broker, MCP) and the sidecar's forward proxy.
 *
 * What is looked for (docs/decisions/0402-injected-secret-scrubbing.md):
 * - every injected header and query value, and every other secret of the auth profile
 *   (client secret, access and refresh token), plus derived forms: the credential after an
 *   auth scheme (`Bearer x` → `x`), and for `Basic` the decoded `user:pass` and the password;
 * - in every decoded view of the body (decoded-views.ts, decision 2505): the text itself and
 *   what percent-encoding, HTML references, JavaScript/JSON escapes, quoted-printable,
 *   base64/base64url (any whitespace, any alignment) and hex decode to, nested; the body's
 *   bytes read as Latin-1 and, when they hold NUL bytes, as UTF-16 (both orders, both
 *   alignments); raw UTF-32 too.
 *
 * Every occurrence is overwritten in place with `*` where it came from — the escapes or the
 * base64 characters that spell it (NUL bytes of wide encodings stay) — so lengths are
 * preserved and nothing else of the body changes. Headers that carry a secret in their name
 * or value are dropped. A body whose views exceed their budget, or in which a secret keeps
 * reappearing, is refused (ScrubError). Transformations beyond decoding (case changes,
 * hashing, reversal, encryption) are outside what a scrubber can know.
 */

/** Shorter secrets are refused before anything is sent: scrubbing them would garble bodies. */
export const MIN_SECRET_LENGTH = 8;

const FILL_CHAR = "*";
const FILL_BYTE = 0x2a;
/**
 * A scrubbed body is read again: overwriting could unmask an escape (`\\u…` losing its first
 * backslash) or meet a secret made of `*`. One that still shows a secret after this many
 * rounds is refused.
 */
const MAX_ROUNDS = 3;

/** A secret below MIN_SECRET_LENGTH: the message says which kind, never the value. */
export class SecretTooShortError extends Error {
  constructor(what: string) {
    super(`${what} is shorter than ${MIN_SECRET_LENGTH} characters`);
    this.name = "SecretTooShortError";
  }
}

/** The body could not be scrubbed (a pattern kept reappearing); the response must be refused. */
export class ScrubError extends Error {
  constructor(message = "the response could not be scrubbed") {
    super(message);
    this.name = "ScrubError";
  }
}

/** Credentials as the pipeline injects them (header and query values). */
export interface InjectedValues {
  readonly headers: Readonly<Record<string, string>>;
  readonly query: Readonly<Record<string, string>>;
}

const AUTH_SCHEME = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+) +(\S(?:.*\S)?)$/s;
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;
const CREDENTIAL_SCHEMES: ReadonlySet<string> = new Set(["basic", "bearer", "token", "dpop", "mac"]);

function requireLength(value: string, what: string): void {
  if (value.length < MIN_SECRET_LENGTH) throw new SecretTooShortError(what);
}

/** `user:pass` from a Basic credential, or undefined when it is not one. */
function basicPair(credential: string): string | undefined {
  if (!BASE64.test(credential)) return undefined;
  const decoded = Buffer.from(credential, "base64");
  if (decoded.toString("base64").replace(/=+$/, "") !== credential.replace(/=+$/, "")) return undefined;
  const text = decoded.toString("utf8");
  return text.includes(":") ? text : undefined;
}

function percentDecoded(value: string): string | undefined {
  if (!value.includes("%") && !value.includes("+")) return undefined;
  try {
    return decodeURIComponent(value.replaceAll("+", " "));
  } catch {
    return undefined;
  }
}

/**
 * The plain forms of one secret value: itself, and what an auth-scheme header value holds
 * (the credential; for Basic also `user:pass` and the password, form-decoded too).
 * Throws SecretTooShortError when the value, a credential after a scheme, or a Basic
 * password is shorter than MIN_SECRET_LENGTH.
 */
export function secretForms(value: string, what = "an injected secret"): string[] {
  requireLength(value, what);
  const forms = new Set<string>([value]);
  const match = AUTH_SCHEME.exec(value);
  if (match !== null) {
    const scheme = (match[1] ?? "").toLowerCase();
    const credential = match[2] ?? "";
    if (CREDENTIAL_SCHEMES.has(scheme)) requireLength(credential, `the credential of ${what}`);
    if (credential.length >= MIN_SECRET_LENGTH) forms.add(credential);
    const pair = scheme === "basic" ? basicPair(credential) : undefined;
    if (pair !== undefined) {
      forms.add(pair);
      const password = pair.slice(pair.indexOf(":") + 1);
      requireLength(password, `the password of ${what}`);
      forms.add(password);
      const decoded = percentDecoded(password);
      if (decoded !== undefined && decoded.length >= MIN_SECRET_LENGTH) forms.add(decoded);
    }
  }
  return [...forms];
}

/** Every value to scrub for one execution: the injected header and query values and the profile's other secrets. */
export function injectedSecrets(
  credentials: InjectedValues | undefined,
  profileSecrets: readonly string[] = [],
): string[] {
  const out = new Set<string>();
  for (const value of Object.values(credentials?.headers ?? {}))
    for (const form of secretForms(value, "an injected header value")) out.add(form);
  for (const value of Object.values(credentials?.query ?? {}))
    for (const form of secretForms(value, "an injected query value")) out.add(form);
  for (const value of profileSecrets)
    for (const form of secretForms(value, "an auth profile secret")) out.add(form);
  return [...out];
}

const HTML_ENTITIES: Readonly<Record<string, string>> = {
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
  '"': "&quot;",
};

/**
 * The spellings of one form looked for in every decoded view, besides the form itself: the
 * ones common escapers write (percent in both cases, RFC 3986 strict and form encoding, JSON,
 * HTML). The views decode these, but from left to right: an escape character just before the
 * spelling (`%` + `00%21…`, `\` + `b\/…`) takes part of it into another escape, and the
 * spelling itself still shows. Other encodings (numeric references, every byte
 * percent-encoded, base64, hex, quoted-printable, nested) are what the views decode.
 */
function spellings(form: string): string[] {
  const out = new Set<string>([form]);
  try {
    const percent = encodeURIComponent(form);
    out.add(percent);
    out.add(percent.replace(/%[0-9A-F]{2}/g, (hex) => hex.toLowerCase()));
    out.add(percent.replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`));
    out.add(new URLSearchParams([["", form]]).toString().slice(1));
  } catch {
    // A lone surrogate has no percent-encoding: the other spellings still apply.
  }
  const json = JSON.stringify(form).slice(1, -1);
  out.add(json);
  out.add(json.replaceAll("/", "\\/"));
  // HTML escapers differ on the apostrophe: not at all, &#39; or &#x27;.
  const html = form.replace(/[&<>"]/g, (c) => HTML_ENTITIES[c] ?? c);
  out.add(html);
  out.add(html.replaceAll("'", "&#39;"));
  out.add(html.replaceAll("'", "&#x27;"));
  return [...out].filter((s) => s.length >= MIN_SECRET_LENGTH);
}

/**
 * What is looked for in every decoded view: each spelling, and the Latin-1 reading of its
 * UTF-8 bytes (byte views, percent- and `\x`-escapes, Node's reading of header values).
 */
function needlesOf(forms: Iterable<string>): string[] {
  const out = new Set<string>();
  for (const form of forms) {
    for (const spelling of spellings(form)) {
      out.add(spelling);
      out.add(Buffer.from(spelling, "utf8").toString("latin1"));
    }
  }
  return [...out];
}

function utf32(text: string, littleEndian: boolean): Buffer {
  const points = Array.from(text, (c) => c.codePointAt(0) ?? 0);
  const out = Buffer.alloc(points.length * 4);
  points.forEach((point, i) => {
    if (littleEndian) out.writeUInt32LE(point, i * 4);
    else out.writeUInt32BE(point, i * 4);
  });
  return out;
}

function wideForms(text: string): Buffer[] {
  const le = Buffer.from(text, "utf16le");
  const be = Buffer.from(le).swap16();
  return [le, be, utf32(text, true), utf32(text, false)];
}

type Range = readonly [start: number, end: number];

function rangesInBytes(haystack: Buffer, patterns: readonly Buffer[]): Range[] {
  const ranges: Range[] = [];
  for (const pattern of patterns) {
    for (let at = haystack.indexOf(pattern); at !== -1; at = haystack.indexOf(pattern, at + 1)) {
      ranges.push([at, at + pattern.length]);
    }
  }
  return ranges;
}

/** Where `needles` occur in any decoded view of `root`, as ranges of its source. */
function rangesInViews(
  root: DecodedView,
  needles: readonly string[],
  minLength: number,
  maxLength: number,
): Range[] {
  const ranges: Range[] = [];
  try {
    forEachView(
      root,
      (view) => {
        if (view.text.length < minLength) return;
        for (const needle of needles) {
          for (let at = view.text.indexOf(needle); at !== -1; at = view.text.indexOf(needle, at + 1)) {
            ranges.push(view.source(at, at + needle.length));
          }
        }
      },
      minLength,
      maxLength,
    );
  } catch (error) {
    if (error instanceof ViewBudgetError) throw new ScrubError("the response has too many nested encodings");
    throw error;
  }
  return ranges;
}

/**
 * The ASCII text inside the body's UTF-16 (both byte orders, both alignments): every run of
 * at least MIN_SECRET_LENGTH code units below U+0080, each a view mapped to its bytes. Every
 * escape and encoding the views decode is ASCII, so a secret spelled inside UTF-16 is found
 * there; a raw one, ASCII or not, by the wide patterns.
 */
function utf16Views(bytes: Buffer): DecodedView[] {
  const views: DecodedView[] = [];
  for (const offset of [0, 1]) {
    for (const littleEndian of [true, false]) {
      let start = -1;
      const close = (end: number) => {
        if (start >= 0 && (end - start) / 2 >= MIN_SECRET_LENGTH) {
          const units = Buffer.from(bytes.subarray(start, end));
          const text = (littleEndian ? units : units.swap16()).toString("utf16le");
          const from = start;
          views.push(baseView(text, (a, b) => [from + 2 * a, from + 2 * b]));
        }
        start = -1;
      };
      let at = offset;
      for (; at + 1 < bytes.length; at += 2) {
        const low = bytes[littleEndian ? at : at + 1] ?? 0;
        const high = bytes[littleEndian ? at + 1 : at] ?? 0;
        const ascii = high === 0 && low > 0 && low < 0x80;
        if (ascii && start < 0) start = at;
        else if (!ascii) close(at);
      }
      close(at);
    }
  }
  return views;
}

function fillBytes(bytes: Buffer, ranges: readonly Range[]): void {
  for (const [start, end] of ranges) {
    for (let i = start; i < end; i++) if (bytes[i] !== 0) bytes[i] = FILL_BYTE;
  }
}

function fillText(text: string, ranges: readonly Range[]): string {
  const sorted = [...ranges].sort((a, b) => a[0] - b[0]);
  let out = "";
  let at = 0;
  for (const [start, end] of sorted) {
    if (end <= at) continue;
    const from = Math.max(start, at);
    out += text.slice(at, from) + FILL_CHAR.repeat(end - from);
    at = end;
  }
  return out + text.slice(at);
}

/**
 * Whether a JSON text uses an optional escape (`\uXXXX` or `\/`). Without one, every parsed
 * string and key is its raw text (the mandatory escapes are a spelling the scan knows), so
 * scrubbing the text covers the parsed document and `scrubJson` can be skipped.
 */
export function hasOptionalJsonEscapes(text: string): boolean {
  return text.includes("\\u") || text.includes("\\/");
}

export interface ScrubResult<T> {
  readonly value: T;
  /** How many occurrences were overwritten (0: the input is returned unchanged). */
  readonly found: number;
}

export interface SecretScrubber {
  /** No secret to look for (a profile that injects nothing): every method returns its input. */
  readonly empty: boolean;
  /** Overwrites occurrences in a copy of `bytes` (the input itself when none is found). */
  scrubBytes(bytes: Buffer): ScrubResult<Buffer>;
  scrubText(text: string): ScrubResult<string>;
  /** Strings, object keys and numbers at any depth of a parsed JSON value (mutated in place). */
  scrubJson(value: unknown): ScrubResult<unknown>;
  /**
   * Whether the parsed form of this decoded (already scrubbed) JSON text may still hold a secret:
   * only when it uses an optional escape, and the text with those escapes decoded shows one.
   * When false, `scrubJson` has nothing to find.
   */
  jsonNeedsRescan(text: string): boolean;
  /** Whether a header name or value holds a secret. */
  headerHoldsSecret(name: string, value: string | readonly string[]): boolean;
}

/**
 * A scrubber for one execution's secrets (from `injectedSecrets`). The needles are built
 * once; callers that see the same credentials repeatedly (the sidecar) keep the scrubber.
 */
export function createSecretScrubber(secrets: Iterable<string>): SecretScrubber {
  const needles = needlesOf(new Set(secrets));
  // Raw UTF-16 and UTF-32 (both orders); escapes and encodings inside UTF-16 are read as views.
  const wide = needles.flatMap(wideForms);
  // ASCII in a wide encoding always has NUL bytes; other characters may have none.
  const widePatterns = wide.filter((p) => p.includes(0));
  const wideAlways = wide.filter((p) => !p.includes(0));
  const minLength = Math.min(...needles.map((needle) => needle.length));
  const maxLength = Math.max(0, ...needles.map((needle) => needle.length));
  const empty = needles.length === 0;

  const textRanges = (text: string): Range[] => rangesInViews(baseView(text), needles, minLength, maxLength);

  const byteRanges = (bytes: Buffer): Range[] => {
    const ranges = textRanges(bytes.toString("latin1"));
    if (wideAlways.length > 0) ranges.push(...rangesInBytes(bytes, wideAlways));
    // Wide encodings need NUL bytes: a body without any cannot hold one.
    if (bytes.includes(0)) {
      for (const view of utf16Views(bytes))
        ranges.push(...rangesInViews(view, needles, minLength, maxLength));
      ranges.push(...rangesInBytes(bytes, widePatterns));
    }
    return ranges;
  };

  const scrubBytes = (bytes: Buffer): ScrubResult<Buffer> => {
    if (empty || bytes.length < minLength) return { value: bytes, found: 0 };
    let ranges = byteRanges(bytes);
    if (ranges.length === 0) return { value: bytes, found: 0 };
    const out = Buffer.from(bytes);
    let found = 0;
    for (let round = 0; ranges.length > 0; round++) {
      if (round === MAX_ROUNDS) throw new ScrubError();
      fillBytes(out, ranges);
      found += ranges.length;
      ranges = byteRanges(out);
    }
    return { value: out, found };
  };

  const scrubText = (input: string): ScrubResult<string> => {
    if (empty || input.length < minLength) return { value: input, found: 0 };
    let out = input;
    let found = 0;
    let ranges = textRanges(out);
    for (let round = 0; ranges.length > 0; round++) {
      if (round === MAX_ROUNDS) throw new ScrubError();
      out = fillText(out, ranges);
      found += ranges.length;
      ranges = textRanges(out);
    }
    return { value: out, found };
  };

  const scrubJson = (root: unknown): ScrubResult<unknown> => {
    if (empty) return { value: root, found: 0 };
    let found = 0;
    const scrubLeaf = (value: unknown): unknown => {
      if (typeof value === "string") {
        const result = scrubText(value);
        found += result.found;
        return result.value;
      }
      if (typeof value === "number" || typeof value === "bigint") {
        const result = scrubText(String(value));
        found += result.found;
        return result.found === 0 ? value : result.value;
      }
      return value;
    };
    const top = scrubLeaf(root);
    if (typeof root !== "object" || root === null) return { value: top, found };
    // An explicit stack: a deeply nested body cannot overflow the call stack.
    const stack: unknown[] = [root];
    for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
      if (Array.isArray(node)) {
        for (let i = 0; i < node.length; i++) {
          const child: unknown = node[i];
          if (typeof child === "object" && child !== null) stack.push(child);
          else node[i] = scrubLeaf(child);
        }
      } else if (isRecord(node)) {
        const entries = Object.entries(node);
        const names = entries.map(([key]) => scrubText(key));
        const renamed = names.some((name) => name.found > 0);
        // Keys are redefined in their order; a renamed one needs all of them redefined.
        if (renamed) for (const [key] of entries) delete node[key];
        entries.forEach(([key, child], i) => {
          const name = names[i] ?? { value: key, found: 0 };
          found += name.found;
          const isNode = typeof child === "object" && child !== null;
          const value = isNode ? child : scrubLeaf(child);
          if (renamed || value !== child) setOwn(node, name.value, value);
          if (isNode) stack.push(child);
        });
      }
    }
    return { value: root, found };
  };

  const jsonNeedsRescan = (text: string): boolean => {
    if (empty || !hasOptionalJsonEscapes(text)) return false;
    // The decoded views see through the escapes: misreading one only adds matches.
    return textRanges(text).length > 0;
  };

  const headerHoldsSecret = (name: string, value: string | readonly string[]): boolean => {
    if (empty) return false;
    if (scrubText(name).found > 0) return true;
    const values: readonly string[] = typeof value === "string" ? [value] : value;
    return values.some((v) => scrubText(v).found > 0);
  };

  return { empty, scrubBytes, scrubText, scrubJson, jsonNeedsRescan, headerHoldsSecret };
}
