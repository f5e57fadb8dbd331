import { MAX_REFERENCE_NAME, namedReference } from "./html-references.ts";

/**
 * The decoded views of a text: what a client could read out of an upstream's answer by
 * undoing the encodings text commonly goes through (docs/decisions/2505-decoded-views.md).
 * The scrubber looks for injected secrets in every view (secret-scrub.ts) and the redaction
 * stage for JSON members a client could read out of what is not plain JSON
 * (embedded-members.ts), so neither depends on one spelling of one encoding.
 *
 * From a text, the views are:
 * - the text itself;
 * - its **escape rounds**: one pass decodes, wherever they appear, percent-encoding (`%XX`,
 *   `%uXXXX`), HTML references (decimal, hex in either case, with or without `;`, and the
 *   named references of ASCII and Latin-1 characters, html-references.ts), JavaScript/JSON
 *   escapes (`\uXXXX`, `\u{…}`, `\xHH`, `\n`, `\/`, `\"`, `\\`, …) and quoted-printable (`=XX`,
 *   soft line breaks); the next round decodes the result again (nested encodings), up to
 *   MAX_ESCAPE_ROUNDS, until nothing changes; when a text mixes these families, each is
 *   also decoded alone (a client reading HTML does not percent-decode what the HTML holds);
 * - the **binary decodings** of every round: each run of base64/base64url characters with
 *   any whitespace or line breaks between them (MIME lines, spaced blobs), decoded starting
 *   at each of its first four characters (a secret at any alignment inside a longer blob),
 *   and each run of hex digits (either case) at both alignments — read as Latin-1, and
 *   decoded again as above, up to MAX_BINARY_DEPTH levels (base64 of an escaped text). Runs
 *   too short to decode to what the caller looks for are skipped.
 * Percent-, `\x`- and quoted-printable escapes and decoded bytes give one Latin-1 character
 * per byte (the UTF-8 bytes of a character, as in a byte view of the body); references and
 * `\u` escapes give the character itself. Callers look for both spellings.
 *
 * Every view maps its characters back to the source text (`source`), so a match can be
 * overwritten where it came from. The work is linear in the text: each round and each
 * decoding is one pass, their number is bounded, and a budget of VIEW_BUDGET_FACTOR times
 * the text's length (plus a constant) stops a body built to multiply views (ViewBudgetError).
 */

/** One reading of the source text. */
export interface DecodedView {
  readonly text: string;
  /** Source offsets `[start, end)` of this view's characters `[from, to)` (`to > from`). */
  source(from: number, to: number): readonly [number, number];
  /**
   * An escape round's: whether characters `[from, to)` hold one it decoded. Text that holds
   * none reads as in the view it came from, where its runs were already decoded.
   */
  readonly decodedWithin?: (from: number, to: number) => boolean;
}

export const MAX_ESCAPE_ROUNDS = 3;
export const MAX_BINARY_DEPTH = 2;
/** Characters of views read per character of the text, at most (plus VIEW_BUDGET_BASE). */
export const VIEW_BUDGET_FACTOR = 64;
const VIEW_BUDGET_BASE = 1 << 16;
/** Shorter runs cannot hold a credential (8 bytes take 11 base64 or 16 hex characters). */
const MIN_BASE64_RUN = 11;
const MIN_HEX_RUN = 16;

/** A body built to multiply decoded views past the budget: the caller refuses it. */
export class ViewBudgetError extends Error {
  constructor() {
    super("the response has too many nested encodings to be read");
    this.name = "ViewBudgetError";
  }
}

/** A view of the source text itself, or of text that `source` maps to some other source. */
export function baseView(text: string, source?: DecodedView["source"]): DecodedView {
  return { text, source: source ?? ((from, to) => [from, to]) };
}

/**
 * A decoding of `parent` as segments: output characters `[out[i], out[i+1])` come from parent
 * characters `[src[i], src[i] + srcLength[i])`, one to one when `literal[i]`, else as a unit.
 */
interface Segments {
  readonly out: number[];
  readonly src: number[];
  readonly srcLength: number[];
  readonly literal: boolean[];
}

function segmentAt(segments: Segments, position: number): number {
  let low = 0;
  let high = segments.out.length - 1;
  while (low < high) {
    const mid = (low + high + 1) >> 1;
    if ((segments.out[mid] ?? 0) <= position) low = mid;
    else high = mid - 1;
  }
  return low;
}

function segmentedView(parent: DecodedView, text: string, segments: Segments): DecodedView {
  const start = (position: number): number => {
    const i = segmentAt(segments, position);
    const src = segments.src[i] ?? 0;
    return segments.literal[i] ? src + position - (segments.out[i] ?? 0) : src;
  };
  const end = (position: number): number => {
    const i = segmentAt(segments, position);
    const src = segments.src[i] ?? 0;
    return segments.literal[i]
      ? src + position - (segments.out[i] ?? 0) + 1
      : src + (segments.srcLength[i] ?? 0);
  };
  const decodedWithin = (from: number, to: number): boolean => {
    for (let i = segmentAt(segments, from); i < segments.out.length && (segments.out[i] ?? 0) < to; i++)
      if (!segments.literal[i]) return true;
    return false;
  };
  return { text, source: (from, to) => parent.source(start(from), end(to - 1)), decodedWithin };
}

/** Escapes JSON and JavaScript give a meaning (a backslash before any other character is kept). */
const JS_SIMPLE_ESCAPES: Readonly<Record<string, string>> = {
  n: "\n",
  r: "\r",
  t: "\t",
  b: "\b",
  f: "\f",
  v: "\v",
  "0": "\0",
  "\\": "\\",
  "/": "/",
  '"': '"',
  "'": "'",
};

/** The value of a hex digit's character code, or -1. */
function hexDigit(code: number): number {
  if (code >= 0x30 && code <= 0x39) return code - 0x30;
  const lower = code | 0x20;
  return lower >= 0x61 && lower <= 0x66 ? lower - 0x57 : -1;
}

function hexAt(text: string, at: number, length: number): number | undefined {
  if (at + length > text.length) return undefined;
  let value = 0;
  for (let i = at; i < at + length; i++) {
    const digit = hexDigit(text.charCodeAt(i));
    if (digit < 0) return undefined;
    value = value * 16 + digit;
  }
  return value;
}

function codePoint(value: number): string | undefined {
  return value > 0 && value <= 0x10ffff ? String.fromCodePoint(value) : undefined;
}

/** `[decoded, consumed]` for an escape starting at `at`, or undefined when there is none. */
type Escape = readonly [string, number] | undefined;

function percentEscape(text: string, at: number): Escape {
  if (text[at + 1] === "u" || text[at + 1] === "U") {
    const unit = hexAt(text, at + 2, 4);
    if (unit !== undefined) return [String.fromCharCode(unit), 6];
  }
  const byte = hexAt(text, at + 1, 2);
  return byte === undefined ? undefined : [String.fromCharCode(byte), 3];
}

const NUMERIC_REFERENCE = /^&#(?:[xX]([0-9A-Fa-f]{1,8})|([0-9]{1,9}));?/;
const NAMED_REFERENCE = /^&([A-Za-z][A-Za-z0-9]*)(;?)/;

function htmlReference(text: string, at: number): Escape {
  const head = text.slice(at, at + MAX_REFERENCE_NAME + 3);
  const numeric = NUMERIC_REFERENCE.exec(head);
  if (numeric !== null) {
    const decoded = codePoint(
      Number.parseInt(numeric[1] ?? numeric[2] ?? "", numeric[1] === undefined ? 10 : 16),
    );
    return decoded === undefined ? undefined : [decoded, numeric[0].length];
  }
  const named = NAMED_REFERENCE.exec(head);
  if (named === null) return undefined;
  const name = named[1] ?? "";
  const withSemicolon = named[2] === ";";
  const decoded = namedReference(name, withSemicolon);
  if (decoded !== undefined) return [decoded, named[0].length];
  // A legacy name followed directly by other letters (`&ampx`): the longest legacy prefix.
  for (let length = name.length - 1; length >= 2; length--) {
    const prefix = namedReference(name.slice(0, length), false);
    if (prefix !== undefined) return [prefix, length + 1];
  }
  return undefined;
}

function jsEscape(text: string, at: number): Escape {
  const next = text[at + 1];
  if (next === undefined) return undefined;
  if (next === "u") {
    if (text[at + 2] === "{") {
      const close = text.indexOf("}", at + 3);
      const value = close > at + 3 && close <= at + 11 ? hexAt(text, at + 3, close - at - 3) : undefined;
      const decoded = value === undefined ? undefined : codePoint(value);
      return decoded === undefined ? undefined : [decoded, close - at + 1];
    }
    const unit = hexAt(text, at + 2, 4);
    return unit === undefined ? undefined : [String.fromCharCode(unit), 6];
  }
  if (next === "x") {
    const byte = hexAt(text, at + 2, 2);
    return byte === undefined ? undefined : [String.fromCharCode(byte), 4];
  }
  const simple = JS_SIMPLE_ESCAPES[next];
  return simple === undefined ? undefined : [simple, 2];
}

function quotedPrintable(text: string, at: number): Escape {
  if (text[at + 1] === "\n") return ["", 2];
  if (text[at + 1] === "\r" && text[at + 2] === "\n") return ["", 3];
  const byte = hexAt(text, at + 1, 2);
  return byte === undefined ? undefined : [String.fromCharCode(byte), 3];
}

/** The escape families, by the character that starts them: percent, HTML, JavaScript, quoted-printable. */
const FAMILIES = ["%", "&", "\\", "="] as const;
const ALL_FAMILIES = (1 << FAMILIES.length) - 1;
/** One global pattern per set of families (a bit mask of FAMILIES). */
const ESCAPE_STARTS: readonly RegExp[] = Array.from({ length: ALL_FAMILIES + 1 }, (_, mask) => {
  const chars = FAMILIES.filter((_c, i) => (mask & (1 << i)) !== 0).map((c) => (c === "\\" ? "\\\\" : c));
  return new RegExp(`[${chars.join("") || "^\\s\\S"}]`, "g");
});

function escapeAt(text: string, at: number): Escape {
  switch (text[at]) {
    case "%":
      return percentEscape(text, at);
    case "&":
      return htmlReference(text, at);
    case "\\":
      return jsEscape(text, at);
    default:
      return quotedPrintable(text, at);
  }
}

interface EscapeRound {
  readonly view: DecodedView;
  /** The families it decoded (a bit mask of FAMILIES). */
  readonly families: number;
}

/** Between the windows of a sparse escape round: a control character no needle or member holds. */
const WINDOW_SEPARATOR = "\u0000";

/**
 * One escape round of `view`, decoding the `families` given (all by default), or undefined
 * when it holds none of their escapes. Only the text within `radius` characters of an escape
 * is kept (windows joined by WINDOW_SEPARATOR): what lies further away shows in `view` as it
 * is, so a body with a few escapes does not cost a whole copy per round. `radius` must cover
 * the longest thing the caller looks for, encoded.
 */
function decodeEscapes(
  view: DecodedView,
  families = ALL_FAMILIES,
  radius = Number.POSITIVE_INFINITY,
): EscapeRound | undefined {
  const { text } = view;
  const segments: Segments = { out: [], src: [], srcLength: [], literal: [] };
  const parts: string[] = [];
  let length = 0;
  let decoded = 0;
  const push = (part: string, src: number, srcLength: number, literal: boolean) => {
    if (part.length === 0) return;
    segments.out.push(length);
    segments.src.push(src);
    segments.srcLength.push(srcLength);
    segments.literal.push(literal);
    parts.push(part);
    length += part.length;
  };
  /** Where the literal text still to be kept starts, and where the current window ends. */
  let literalFrom = 0;
  let windowEnd = -1;
  const closeWindow = () => {
    if (windowEnd < 0) return;
    const end = Math.min(text.length, windowEnd);
    push(text.slice(literalFrom, end), literalFrom, end - literalFrom, true);
    literalFrom = end;
    windowEnd = -1;
  };
  // The module's own global pattern; decodeEscapes is never re-entered while it runs.
  const pattern = ESCAPE_STARTS[families] ?? (ESCAPE_STARTS[ALL_FAMILIES] as RegExp);
  pattern.lastIndex = 0;
  for (let match = pattern.exec(text); match !== null; match = pattern.exec(text)) {
    const at = match.index;
    const found = escapeAt(text, at);
    if (found === undefined) continue;
    decoded |= 1 << FAMILIES.indexOf(match[0] as (typeof FAMILIES)[number]);
    if (windowEnd >= 0 && at > windowEnd + radius) closeWindow();
    if (windowEnd < 0) {
      const start = Math.max(literalFrom, at - radius);
      if (length > 0) push(WINDOW_SEPARATOR, start, 0, false);
      literalFrom = start;
    }
    push(text.slice(literalFrom, at), literalFrom, at - literalFrom, true);
    push(found[0], at, found[1], false);
    literalFrom = at + found[1];
    windowEnd = literalFrom + radius;
    pattern.lastIndex = literalFrom;
  }
  if (decoded === 0) return undefined;
  closeWindow();
  const out = segments.out.length === 0 ? baseView("") : segmentedView(view, parts.join(""), segments);
  return { view: out, families: decoded };
}

/** Character classes of the runs: base64/base64url characters, hex digits, ASCII whitespace. */
const BASE64_CHAR = 1;
const HEX_CHAR = 2;
const SPACE_CHAR = 4;
const CLASSES = (() => {
  const table = new Uint8Array(128);
  for (const c of "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_")
    table[c.charCodeAt(0)] = BASE64_CHAR;
  for (const c of "0123456789ABCDEFabcdef") table[c.charCodeAt(0)] = BASE64_CHAR | HEX_CHAR;
  for (const c of " \t\n\f\r") table[c.charCodeAt(0)] = SPACE_CHAR;
  return table;
})();

/**
 * The runs of a view, compacted: `text` holds every run without its whitespace, one after the
 * other; run i is `text[starts[i], ends[i])` and starts at `sources[i]` in the view's text.
 */
interface Runs {
  readonly text: string;
  readonly starts: number[];
  readonly ends: number[];
  readonly sources: number[];
}

const RUN_WHITESPACE = /[\t\n\f\r ]+/g;

/**
 * Runs of characters of `kind` with any whitespace between them, holding at least `min` of
 * them: one pass over the text, and nothing kept of a shorter run.
 */
function runsOf(text: string, kind: number, min: number, keep?: (from: number, to: number) => boolean): Runs {
  const pieces: string[] = [];
  const starts: number[] = [];
  const ends: number[] = [];
  const sources: number[] = [];
  let kept = 0;
  let runStart = -1;
  let runEnd = 0;
  let count = 0;
  for (let i = 0; i <= text.length; i++) {
    const code = i < text.length ? text.charCodeAt(i) : 0;
    const cls = code < 128 ? (CLASSES[code] ?? 0) : 0;
    if ((cls & kind) !== 0) {
      if (runStart < 0) {
        runStart = i;
        count = 0;
      }
      count++;
      runEnd = i + 1;
    } else if ((cls & SPACE_CHAR) === 0 || i === text.length) {
      if (runStart >= 0 && count >= min && (keep === undefined || keep(runStart, runEnd))) {
        const piece = text.slice(runStart, runEnd);
        pieces.push(count === piece.length ? piece : piece.replace(RUN_WHITESPACE, ""));
        starts.push(kept);
        kept += count;
        ends.push(kept);
        sources.push(runStart);
      }
      runStart = -1;
    }
  }
  return { text: pieces.join(""), starts, ends, sources };
}

/** Where compact character `index` of run `run` sits in the view's text (a scan of that run only). */
function positionOf(view: string, runs: Runs, run: number, index: number): number {
  let remaining = index - (runs.starts[run] ?? 0);
  for (let i = runs.sources[run] ?? 0; i < view.length; i++) {
    const code = view.charCodeAt(i);
    if (code === 0x20 || code === 0x09 || code === 0x0a || code === 0x0c || code === 0x0d) continue;
    if (remaining === 0) return i;
    remaining--;
  }
  return view.length - 1;
}

/** How runs decode: groups of `chars` characters give `bytes` bytes; byte k comes from characters `first(k)` and `first(k) + 1`. */
interface Encoding {
  readonly name: BufferEncoding;
  readonly chars: number;
  readonly bytes: number;
  /** Fills a last, partial group; decodes to extra bytes after the run's own. */
  readonly pad: string;
  readonly first: (k: number) => number;
}

// Node decodes base64 and base64url alike; byte j of a group comes from characters j and j + 1.
const BASE64: Encoding = {
  name: "base64",
  chars: 4,
  bytes: 3,
  pad: "A",
  first: (k) => 4 * Math.floor(k / 3) + (k % 3),
};
const HEX_DIGITS: Encoding = { name: "hex", chars: 2, bytes: 1, pad: "0", first: (k) => 2 * k };

/**
 * One alignment of every run decoded at once: each run's characters from `phase` on, padded to
 * whole groups and decoded as one string (no allocation per run).
 */
function alignedView(
  view: DecodedView,
  runs: Runs,
  phase: number,
  encoding: Encoding,
  min: number,
): DecodedView | undefined {
  const { chars: group, bytes: bytesPer, pad } = encoding;
  const parts: string[] = [];
  /** Per decoded run: its first byte in the output, and its first compact character. */
  const byteStarts: number[] = [];
  const charStarts: number[] = [];
  const charEnds: number[] = [];
  let bytes = 0;
  const runIndex: number[] = [];
  runs.starts.forEach((start, i) => {
    const end = runs.ends[i] ?? start;
    if (end - start - phase < min) return;
    const chars = runs.text.slice(start + phase, end);
    const groups = Math.ceil(chars.length / group);
    parts.push(chars.padEnd(groups * group, pad));
    byteStarts.push(bytes);
    charStarts.push(start + phase);
    charEnds.push(end);
    runIndex.push(i);
    bytes += groups * bytesPer;
  });
  if (parts.length === 0) return undefined;
  const decoded = Buffer.from(parts.join(""), encoding.name);
  const at = (k: number, last: boolean): number => {
    let low = 0;
    let high = byteStarts.length - 1;
    while (low < high) {
      const mid = (low + high + 1) >> 1;
      if ((byteStarts[mid] ?? 0) <= k) low = mid;
      else high = mid - 1;
    }
    const index = encoding.first(k - (byteStarts[low] ?? 0)) + (last ? 1 : 0);
    const char = Math.min((charStarts[low] ?? 0) + index, (charEnds[low] ?? 1) - 1);
    return positionOf(view.text, runs, runIndex[low] ?? 0, char);
  };
  return {
    text: decoded.toString("latin1"),
    source: (from, to) => view.source(at(from, false), at(to - 1, true) + 1),
  };
}

/**
 * Base64 (four alignments) and hex (two) decodings of the runs of `view` long enough to decode
 * to `minLength` characters (at least 8) — in an escape round, of the runs that hold a decoded
 * character: at most six views, each holding every run.
 */
function binaryDecodings(view: DecodedView, minLength = 0): DecodedView[] {
  const minBase64 = Math.max(MIN_BASE64_RUN, Math.ceil((4 * minLength) / 3));
  const minHex = Math.max(MIN_HEX_RUN, 2 * minLength);
  const base64 = runsOf(view.text, BASE64_CHAR, minBase64, view.decodedWithin);
  const hex = runsOf(view.text, HEX_CHAR, minHex, view.decodedWithin);
  const out: Array<DecodedView | undefined> = [];
  for (let phase = 0; phase < 4; phase++) out.push(alignedView(view, base64, phase, BASE64, minBase64));
  for (let phase = 0; phase < 2; phase++) out.push(alignedView(view, hex, phase, HEX_DIGITS, minHex));
  return out.filter((decoded) => decoded !== undefined);
}

/**
 * Calls `visit` with every decoded view of `root` (the root first), until it returns true.
 * What the caller looks for is `minLength` to `maxLength` characters long: runs that decode to
 * less are skipped, and escape rounds keep only the text near their escapes. Throws
 * ViewBudgetError when the views would read more than `budgetChars`.
 */
export function forEachView(
  root: DecodedView,
  visit: (view: DecodedView) => boolean | undefined,
  minLength = 0,
  maxLength = Number.POSITIVE_INFINITY,
  budgetChars = VIEW_BUDGET_FACTOR * root.text.length + VIEW_BUDGET_BASE,
): void {
  // Decoded text within this distance of an escape can take part in a match (base64 of it too).
  const radius = Math.ceil((4 * maxLength) / 3) + 16;
  let budget = budgetChars;
  const read = (view: DecodedView): boolean => {
    budget -= view.text.length;
    if (budget < 0) throw new ViewBudgetError();
    return visit(view) === true;
  };
  /** A view, its binary depth, the escape rounds that made it, and whether it is a whole binary decoding. */
  const pending: Array<readonly [DecodedView, number, number, boolean]> = [[root, 0, 0, false]];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [start, depth, startRound, binary] = next;
    if (binary) {
      // Decoded bytes are read whole; escapes and runs are ASCII text, so only the text inside
      // them is decoded further (random bytes of a wrong alignment hold little of it).
      if (read(start)) return;
      for (const text of textRuns(start, Math.max(minLength, MIN_TEXT_RUN)))
        pending.push([text, depth, 0, false]);
      continue;
    }
    let view: DecodedView | undefined = start;
    for (let round = startRound; view !== undefined; round++) {
      if (read(view)) return;
      if (depth < MAX_BINARY_DEPTH)
        for (const decoded of binaryDecodings(view, minLength)) pending.push([decoded, depth + 1, 0, true]);
      if (round === MAX_ESCAPE_ROUNDS) break;
      const decoded = decodeEscapes(view, ALL_FAMILIES, radius);
      // A client decodes one family at a time: when the text mixes several, each alone too
      // (an HTML-escaped `%41` is not percent-decoded by the client that reads the HTML).
      if (decoded !== undefined && round === 0 && (decoded.families & (decoded.families - 1)) !== 0) {
        for (let family = 1; family <= decoded.families; family <<= 1) {
          const alone = (decoded.families & family) === 0 ? undefined : decodeEscapes(view, family, radius);
          if (alone !== undefined) pending.push([alone.view, depth, round + 1, false]);
        }
      }
      view = decoded?.view;
    }
  }
}

const MIN_TEXT_RUN = 8;

/**
 * Text inside decoded bytes (read as Latin-1): printable ASCII, whitespace and valid UTF-8
 * sequences, at least MIN_TEXT_RUN characters (a native scan; the alternatives start with
 * disjoint characters, so it stays linear).
 */
const TEXT_RUN =
  /(?:[\t\n\f\r\x20-\x7e]|[\xc2-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3}){8,}/g;

/** The text runs inside decoded bytes that hold at least `min` characters, each a view mapped through `view`. */
function textRuns(view: DecodedView, min: number): DecodedView[] {
  const runs: DecodedView[] = [];
  for (const match of view.text.matchAll(TEXT_RUN)) {
    if (match[0].length < min) continue;
    const from = match.index;
    runs.push({ text: match[0], source: (a, b) => view.source(from + a, from + b) });
  }
  return runs;
}
