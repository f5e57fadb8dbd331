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
  return { text, source: (from, to) => parent.source(start(from), end(to - 1)) };
}

const HEX = /^[0-9A-Fa-f]+$/;
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

function hexAt(text: string, at: number, length: number): number | undefined {
  const digits = text.slice(at, at + length);
  return digits.length === length && HEX.test(digits) ? Number.parseInt(digits, 16) : undefined;
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

export interface EscapeRound {
  readonly view: DecodedView;
  /** The families it decoded (a bit mask of FAMILIES). */
  readonly families: number;
}

/**
 * One escape round of `view`, decoding the `families` given (all by default), or undefined
 * when it holds none of their escapes.
 */
export function decodeEscapes(view: DecodedView, families = ALL_FAMILIES): EscapeRound | undefined {
  const { text } = view;
  const segments: Segments = { out: [], src: [], srcLength: [], literal: [] };
  const parts: string[] = [];
  let length = 0;
  let literalFrom = 0;
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
  // The module's own global pattern; decodeEscapes is never re-entered while it runs.
  const pattern = ESCAPE_STARTS[families] ?? (ESCAPE_STARTS[ALL_FAMILIES] as RegExp);
  pattern.lastIndex = 0;
  for (let match = pattern.exec(text); match !== null; match = pattern.exec(text)) {
    const at = match.index;
    const found = escapeAt(text, at);
    if (found === undefined) continue;
    decoded |= 1 << FAMILIES.indexOf(match[0] as (typeof FAMILIES)[number]);
    push(text.slice(literalFrom, at), literalFrom, at - literalFrom, true);
    push(found[0], at, found[1], false);
    literalFrom = at + found[1];
    pattern.lastIndex = literalFrom;
  }
  if (decoded === 0) return undefined;
  push(text.slice(literalFrom), literalFrom, text.length - literalFrom, true);
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

interface Run {
  /** The run without whitespace. */
  readonly text: string;
  /** The offset in the view's text of each character kept. */
  readonly positions: Int32Array;
}

/**
 * Runs of characters of `kind` with any whitespace between them, holding at least `min` of
 * them, between `from` and `to`: one pass, and nothing allocated for a shorter run.
 */
function runsOf(text: string, kind: number, min: number, from = 0, to = text.length): Run[] {
  const runs: Run[] = [];
  let start = -1;
  let end = 0;
  let kept = 0;
  for (let i = from; i <= to; i++) {
    const code = i < to ? text.charCodeAt(i) : 0;
    const cls = code < 128 ? (CLASSES[code] ?? 0) : 0;
    if ((cls & kind) !== 0) {
      if (start < 0) {
        start = i;
        kept = 0;
      }
      kept++;
      end = i + 1;
    } else if ((cls & SPACE_CHAR) === 0 && start >= 0) {
      if (kept >= min) runs.push(compact(text, start, end, kind, kept));
      start = -1;
    }
  }
  return runs;
}

function compact(text: string, start: number, end: number, kind: number, kept: number): Run {
  const positions = new Int32Array(kept);
  const pieces: string[] = [];
  let k = 0;
  let from = start;
  for (let i = start; i <= end; i++) {
    const code = i < end ? text.charCodeAt(i) : 0;
    if (code < 128 && ((CLASSES[code] ?? 0) & kind) !== 0) {
      positions[k++] = i;
      continue;
    }
    if (i > from) pieces.push(text.slice(from, i));
    from = i + 1;
  }
  return { text: pieces.join(""), positions };
}

/**
 * A binary decoding of part of `view`: byte k comes from compact characters
 * `[first(k), last(k)]`, which sit at `positions` in the view's text.
 */
function bytesView(
  view: DecodedView,
  bytes: Buffer,
  positions: Int32Array,
  first: (k: number) => number,
  last: (k: number) => number,
): DecodedView {
  const at = (index: number) => positions[Math.min(index, positions.length - 1)] ?? 0;
  return {
    text: bytes.toString("latin1"),
    source: (from, to) => view.source(at(first(from)), at(last(to - 1)) + 1),
  };
}

/**
 * Base64 and hex decodings of every run of `view` long enough to decode to `minLength`
 * characters (at least 8), at every alignment.
 */
export function binaryDecodings(view: DecodedView, minLength = 0): DecodedView[] {
  const out: DecodedView[] = [];
  const minBase64 = Math.max(MIN_BASE64_RUN, Math.ceil((4 * minLength) / 3));
  const minHex = Math.max(MIN_HEX_RUN, 2 * minLength);
  for (const run of runsOf(view.text, BASE64_CHAR, minBase64)) {
    for (let phase = 0; phase < 4 && run.text.length - phase >= minBase64; phase++) {
      // Node decodes base64 and base64url alike; 3 bytes come from 4 characters.
      const bytes = Buffer.from(run.text.slice(phase), "base64");
      const offset = (k: number) => phase + 4 * Math.floor(k / 3) + (k % 3);
      out.push(bytesView(view, bytes, run.positions, offset, (k) => offset(k) + 1));
    }
    // Hex digits are base64 characters: hex runs lie inside base64 runs.
    const first = run.positions[0] ?? 0;
    const last = (run.positions[run.positions.length - 1] ?? 0) + 1;
    for (const hex of runsOf(view.text, HEX_CHAR, minHex, first, last)) {
      for (let phase = 0; phase < 2 && hex.text.length - phase >= minHex; phase++) {
        const pairs = Math.floor((hex.text.length - phase) / 2);
        const bytes = Buffer.from(hex.text.slice(phase, phase + 2 * pairs), "hex");
        out.push(
          bytesView(
            view,
            bytes,
            hex.positions,
            (k) => phase + 2 * k,
            (k) => phase + 2 * k + 1,
          ),
        );
      }
    }
  }
  return out;
}

/**
 * Calls `visit` with every decoded view of `root` (the root first), until it returns true.
 * `minLength`: what the caller looks for is at least this long, so runs that decode to less
 * are skipped. Throws ViewBudgetError when the views would read more than `budgetChars`.
 */
export function forEachView(
  root: DecodedView,
  visit: (view: DecodedView) => boolean | undefined,
  minLength = 0,
  budgetChars = VIEW_BUDGET_FACTOR * root.text.length + VIEW_BUDGET_BASE,
): void {
  let budget = budgetChars;
  /** A view, its binary depth, and the escape rounds that made it. */
  const pending: Array<readonly [DecodedView, number, number]> = [[root, 0, 0]];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [start, depth, startRound] = next;
    let view: DecodedView | undefined = start;
    for (let round = startRound; view !== undefined; round++) {
      budget -= view.text.length;
      if (budget < 0) throw new ViewBudgetError();
      if (visit(view) === true) return;
      if (depth < MAX_BINARY_DEPTH)
        for (const decoded of binaryDecodings(view, minLength)) pending.push([decoded, depth + 1, 0]);
      if (round === MAX_ESCAPE_ROUNDS) break;
      const decoded = decodeEscapes(view);
      // A client decodes one family at a time: when the text mixes several, each alone too
      // (an HTML-escaped `%41` is not percent-decoded by the client that reads the HTML).
      if (decoded !== undefined && round === 0 && (decoded.families & (decoded.families - 1)) !== 0) {
        for (let family = 1; family <= decoded.families; family <<= 1) {
          const alone = (decoded.families & family) === 0 ? undefined : decodeEscapes(view, family);
          if (alone !== undefined) pending.push([alone.view, depth, round + 1]);
        }
      }
      view = decoded?.view;
    }
  }
}
