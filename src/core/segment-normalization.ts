/**
 * What an upstream server plausibly reduces a path segment to before it compares the segment
 * with a route's literal: the documented list the path rule (path-values.ts) checks a value
 * against (docs/core.md, "Path-parameter values"; docs/decisions/0301).
 *
 * Equivalences, applied to values and to sibling literals alike (`canonicalKeys`):
 * - Unicode compatibility forms (NFKC: "ａｄｍｉｎ", "ℯ", "ª", "ſ", the Kelvin sign);
 * - default-ignorable code points removed (U+00AD, U+200B–U+200F, U+2060–U+206F, U+FEFF,
 *   variation selectors, tags…);
 * - case folding: the whole string's lower case of its upper case ("ı", "ſ", the Kelvin sign,
 *   "ß" = "ss"), and where a per-character comparison (Java's equalsIgnoreCase) is looser,
 *   per character too ("İ" = "i", "ς" = "σ").
 *
 * Reductions, applied to values (`claimedBy`):
 * - everything from a ":" (an NTFS alternate data stream: "admin::$DATA");
 * - trailing whitespace, dots and "~" (Windows and IIS trim the first two; "~" marks a backup);
 * - extension suffixes, any number ("admin.json.bak": Spring suffix patterns, Rails formats,
 *   content negotiation);
 * - an 8.3 short name ("ADMINI~1" for "administrators").
 *
 * Decoding once more (`decodedAgain`): leniently (overlong UTF-8, CESU-8 surrogates, IIS
 * `%uXXXX`, stray bytes as Latin-1) and as Latin-1. `;…` (matrix and session parameters) is no
 * reduction here: a value with `;` is refused outright.
 */
import type { TemplateSegment } from "./path-template.ts";
import { matchesMixedSegment } from "./path-template.ts";

export type MixedSegment = TemplateSegment & { kind: "mixed" };

/** The literals and mixed segments sibling templates have at one position, as values are compared with them. */
export interface SiblingSegments {
  /** Canonical keys of the sibling literals, trailing dots, spaces and "~" trimmed too. */
  readonly literals: ReadonlySet<string>;
  /** The longest key: no longer reduction of a value can equal one. */
  readonly longestLiteral: number;
  /** The keys without spaces and dots: what an 8.3 short name abbreviates. */
  readonly shortNameBases: readonly string[];
  /** Mixed segments ("{name}.pdf"), their literal parts folded. */
  readonly mixed: readonly MixedSegment[];
}

const NON_ASCII = /[^\p{ASCII}]/u;
const IGNORABLE = /\p{Default_Ignorable_Code_Point}/gu;

/** NFKC without default-ignorable code points. ASCII is its own form. */
export function compatibilityForm(value: string): string {
  if (!NON_ASCII.test(value)) return value;
  const compat = value.normalize("NFKC");
  const visible = compat.replace(IGNORABLE, "");
  return visible === compat ? compat : visible.normalize("NFKC");
}

/** Lower case of the upper case of the lower case, as a whole string ("ẞ", "ß" → "ss"; "K" → "k"). */
function fullFold(form: string): string {
  return form.toLowerCase().toUpperCase().toLowerCase().normalize("NFKC");
}

/**
 * Where a per-character comparison (Java's equalsIgnoreCase) is looser than whole-string
 * folding: "İ" is the one code point whose lower case is two ("i" + U+0307; per character
 * it is "i"), and sigma lowers to "ς" or "σ" by context as a whole string only.
 */
const PER_CHARACTER = /[\u0130\u03a3\u03c2]/;

/** The folded keys of a compatibility form: whole-string, and per character when that differs. */
export function caseKeys(form: string): string[] {
  if (!NON_ASCII.test(form)) return [form.toLowerCase()];
  const full = fullFold(form);
  if (!PER_CHARACTER.test(form)) return [full];
  const perCharacter = fullFold(form.replaceAll("\u0130", "i")).replaceAll("\u03c2", "\u03c3");
  return perCharacter === full ? [full] : [full, perCharacter];
}

/** What a value or literal is compared as: its compatibility form, case-folded (one or two keys). */
export function canonicalKeys(value: string): string[] {
  return caseKeys(compatibilityForm(value));
}

/* ---------- decoding once more ---------- */

function hexDigit(code: number): number {
  if (code >= 0x30 && code <= 0x39) return code - 0x30;
  const letter = code | 0x20;
  return letter >= 0x61 && letter <= 0x66 ? letter - 0x57 : -1;
}

/** The number spelled by `length` hex digits at `at`, or -1. */
function hexAt(value: string, at: number, length: number): number {
  if (at + length > value.length) return -1;
  let n = 0;
  for (let i = at; i < at + length; i++) {
    const digit = hexDigit(value.charCodeAt(i));
    if (digit < 0) return -1;
    n = n * 16 + digit;
  }
  return n;
}

/**
 * UTF-8 without the checks a strict decoder makes: overlong forms ("%C1%A1" is "a"), 5- and
 * 6-byte forms and encoded surrogates decode; a byte that starts no sequence is Latin-1.
 */
function utf8Leniently(bytes: readonly number[]): string {
  let out = "";
  for (let i = 0; i < bytes.length; ) {
    const lead = bytes[i] ?? 0;
    const length =
      lead >= 0xfc ? 6 : lead >= 0xf8 ? 5 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
    let code = lead & ((1 << (7 - length)) - 1);
    let complete = length > 1 && i + length <= bytes.length;
    for (let k = 1; complete && k < length; k++) {
      const next = bytes[i + k] ?? 0;
      if ((next & 0xc0) !== 0x80) complete = false;
      code = code * 64 + (next & 0x3f);
    }
    if (!complete) {
      out += String.fromCharCode(lead);
      i += 1;
      continue;
    }
    // A surrogate stays a code unit: two of them (CESU-8) make one character again.
    out +=
      code > 0x10ffff ? "\uFFFD" : code <= 0xffff ? String.fromCharCode(code) : String.fromCodePoint(code);
    i += length;
  }
  return out;
}

function latin1(bytes: readonly number[]): string {
  let out = "";
  for (const byte of bytes) out += String.fromCharCode(byte);
  return out;
}

/** `%XX` runs decoded with `bytesToText`, IIS `%uXXXX` as one code unit, anything else kept. */
function percentDecoded(value: string, bytesToText: (bytes: readonly number[]) => string): string {
  let out = "";
  let bytes: number[] = [];
  const flush = () => {
    if (bytes.length === 0) return;
    out += bytesToText(bytes);
    bytes = [];
  };
  for (let i = 0; i < value.length; ) {
    if (value.charCodeAt(i) === 0x25) {
      const byte = hexAt(value, i + 1, 2);
      if (byte >= 0) {
        bytes.push(byte);
        i += 3;
        continue;
      }
      const unit = (value.charCodeAt(i + 1) | 0x20) === 0x75 ? hexAt(value, i + 2, 4) : -1;
      if (unit >= 0) {
        flush();
        out += String.fromCharCode(unit);
        i += 6;
        continue;
      }
    }
    flush();
    out += value[i];
    i += 1;
  }
  flush();
  return out;
}

/**
 * The value as an upstream that decodes a second time may read it: leniently (which agrees
 * with a strict decoder wherever that one succeeds) or as Latin-1. Empty without a "%".
 */
export function decodedAgain(value: string): string[] {
  if (!value.includes("%")) return [];
  const out = new Set([percentDecoded(value, utf8Leniently), percentDecoded(value, latin1)]);
  out.delete(value);
  return [...out];
}

/* ---------- siblings and reductions ---------- */

const TRAILING = /[\s.~]+$/u;

/** What `\s` matches, by code unit. */
function isSpace(code: number): boolean {
  if (code <= 0x7f) return code === 0x20 || (code >= 0x09 && code <= 0x0d);
  return (
    code === 0xa0 ||
    code === 0x1680 ||
    (code >= 0x2000 && code <= 0x200a) ||
    code === 0x2028 ||
    code === 0x2029 ||
    code === 0x202f ||
    code === 0x205f ||
    code === 0x3000 ||
    code === 0xfeff
  );
}

const DOT = 0x2e;
const COLON = 0x3a;
const TILDE = 0x7e;

function isTrailing(code: number): boolean {
  return code === DOT || code === TILDE || isSpace(code);
}

/** Canonical keys of the sibling literals at one position, with what the scan below needs. */
export function siblingSegments(
  literals: Iterable<string>,
  mixed: readonly MixedSegment[] = [],
): SiblingSegments {
  const keys = new Set<string>();
  for (const literal of literals) {
    for (const key of canonicalKeys(literal)) {
      keys.add(key);
      const trimmed = key.replace(TRAILING, "");
      if (trimmed.length > 0) keys.add(trimmed);
    }
  }
  let longestLiteral = 0;
  for (const key of keys) longestLiteral = Math.max(longestLiteral, key.length);
  const shortNameBases = [...keys].map((key) => key.replace(/[\s.]/gu, "")).filter((base) => base.length > 0);
  return { literals: keys, longestLiteral, shortNameBases, mixed: mixed.map(foldMixed) };
}

/** A mixed segment with its literal parts folded as values are. */
function foldMixed(segment: MixedSegment): MixedSegment {
  const parts = segment.parts.map((p) =>
    "literal" in p ? { literal: canonicalKeys(p.literal)[0] ?? "" } : p,
  );
  let literalLength = 0;
  for (const part of parts) if ("literal" in part) literalLength += part.literal.length;
  return { kind: "mixed", parts, literalLength };
}

/**
 * "ADMINI~1" (up to six characters of the long name) or "AD3F2A~1" (two and a hash), folded;
 * the stem may be longer than six once in compatibility form ("Ǆ" is "DŽ").
 */
const SHORT_NAME = /^([^~]{1,12})~[0-9]{1,6}$/;
/** Long enough for any short name: no longer candidate needs the 8.3 check. */
const SHORT_NAME_MAX = 19;
const HASHED_STEM = /^..[0-9a-f]{4}$/;

function shortNameClaims(candidate: string, bases: readonly string[]): boolean {
  const stem = SHORT_NAME.exec(candidate)?.[1];
  if (stem === undefined) return false;
  const hashedHead = HASHED_STEM.test(stem) ? stem.slice(0, 2) : undefined;
  return bases.some(
    (base) => base.startsWith(stem) || (hashedHead !== undefined && base.startsWith(hashedHead)),
  );
}

function literalClaims(candidate: string, siblings: SiblingSegments): boolean {
  return siblings.literals.has(candidate) || shortNameClaims(candidate, siblings.shortNameBases);
}

/** Mixed segments are checked against the whole value and the last few extension cuts only. */
const MIXED_CUTS = 4;

export function mixedClaims(candidate: string, mixed: readonly MixedSegment[]): boolean {
  for (const segment of mixed) if (matchesMixedSegment(segment, candidate)) return true;
  return false;
}

/**
 * Whether a canonical key, or a reduction of it — cut at any "." or ":", trailing
 * whitespace, dots and "~" trimmed, leading whitespace trimmed — equals a sibling literal,
 * abbreviates one as an 8.3 short name, or matches a mixed sibling. Linear in the key: one
 * scan, and only candidates no longer than the longest literal are compared with literals.
 */
export function claimedBy(key: string, siblings: SiblingSegments): boolean {
  if (siblings.literals.has(key)) return true;
  const { mixed } = siblings;
  if (mixed.length > 0 && mixedClaims(key, mixed)) return true;
  const bound = Math.max(siblings.longestLiteral, SHORT_NAME_MAX);
  let start = 0;
  while (start < key.length && isSpace(key.charCodeAt(start))) start++;
  const recentCuts: number[] = [];
  let end = start;
  for (let i = start; i <= key.length; i++) {
    // The end of the key is one more cut.
    const code = i < key.length ? key.charCodeAt(i) : DOT;
    if ((code === DOT || code === COLON) && end > start && recentCuts.at(-1) !== end) {
      if (end - start <= bound && literalClaims(key.slice(start, end), siblings)) return true;
      if (mixed.length === 0 && end - start > bound) return false;
      if (recentCuts.push(end) > MIXED_CUTS) recentCuts.shift();
    }
    if (!isTrailing(code)) end = i + 1;
  }
  for (const cut of recentCuts) if (mixedClaims(key.slice(start, cut), mixed)) return true;
  return false;
}
