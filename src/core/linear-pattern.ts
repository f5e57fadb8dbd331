/**
 * Patterns that come from partners (OpenAPI `pattern` and `patternProperties`, signed
 * parameter constraints) run here, on re2js: RE2 semantics, matching in time linear in the
 * input, never on the backtracking engine. Reasons and limits: docs/decisions/2502.
 *
 * A pattern is written in ECMAScript syntax (JSON Schema says so) and must mean the same here
 * as there: it must first be a valid ECMAScript pattern (`u` flag, as ajv compiles it), then
 * it is rewritten into RE2 syntax construct by construct — `.`, `\s` and `\S` spelt out with
 * ECMAScript's characters, escapes as code points — and compiled by RE2. What RE2 cannot run
 * in linear time (backreferences, lookaround) and what has no exact rewrite (inline
 * modifiers) is refused with a reason, never approximated.
 */
import { RE2JS } from "re2js";

/** The most RE2 instructions one pattern may compile to: the worst per-character cost grows with it. */
export const MAX_PATTERN_PROGRAM_SIZE = 1000;
/** Memory one pattern's lazy DFA may hold before it starts over (re2js's own default is 8 MiB). */
const PATTERN_DFA_MEMORY_BYTES = 256 * 1024;
/** Compiled patterns kept at once: with their DFAs, the only memory patterns hold. */
const MAX_COMPILED_PATTERNS = 256;

/** The matching half of a RegExp: what ajv (`code.regExp`) and the constraint checks call. */
export interface LinearPattern {
  /** Whether the pattern matches somewhere in `value` (unanchored, like RegExp.prototype.test). */
  test(value: string): boolean;
  /** Distinct per source: ajv keys its compiled patterns by it. */
  toString(): string;
}

/** The pattern cannot run on the linear-time engine; the message says why, safe to show its author. */
export class UnsupportedPatternError extends Error {
  override readonly name = "UnsupportedPatternError";
}

const refuse = (why: string): never => {
  throw new UnsupportedPatternError(why);
};

/* ---------- ECMAScript → RE2 syntax ---------- */

/** ECMAScript's WhiteSpace and LineTerminator code points (`\s`), as sorted inclusive ranges. */
const SPACE_RANGES: readonly (readonly [number, number])[] = [
  [0x09, 0x0d],
  [0x20, 0x20],
  [0xa0, 0xa0],
  [0x1680, 0x1680],
  [0x2000, 0x200a],
  [0x2028, 0x2029],
  [0x202f, 0x202f],
  [0x205f, 0x205f],
  [0x3000, 0x3000],
  [0xfeff, 0xfeff],
];
const MAX_CODE_POINT = 0x10ffff;

function complement(ranges: readonly (readonly [number, number])[]): [number, number][] {
  const out: [number, number][] = [];
  let next = 0;
  for (const [lo, hi] of ranges) {
    if (lo > next) out.push([next, lo - 1]);
    next = hi + 1;
  }
  if (next <= MAX_CODE_POINT) out.push([next, MAX_CODE_POINT]);
  return out;
}

const hex = (cp: number): string => `\\x{${cp.toString(16)}}`;
const rangesText = (ranges: readonly (readonly [number, number])[]): string =>
  ranges.map(([lo, hi]) => (lo === hi ? hex(lo) : `${hex(lo)}-${hex(hi)}`)).join("");

/** Class bodies (without brackets) for ECMAScript's `\s` and `\S`. */
const SPACE = rangesText(SPACE_RANGES);
const NOT_SPACE = rangesText(complement(SPACE_RANGES));
/** ECMAScript's `.` without the `s` flag: anything but a line terminator. */
const DOT = `[^${rangesText([
  [0x0a, 0x0a],
  [0x0d, 0x0d],
  [0x2028, 0x2029],
])}]`;
const NOTHING = `[^${hex(0)}-${hex(MAX_CODE_POINT)}]`;
const ANYTHING = `[${hex(0)}-${hex(MAX_CODE_POINT)}]`;

const CONTROL_ESCAPES: Readonly<Record<string, number>> = { t: 0x09, n: 0x0a, v: 0x0b, f: 0x0c, r: 0x0d };
const SYNTAX_CHARACTERS = "^$\\.*+?()[]{}|/";
const PROPERTY_PREFIXES = ["General_Category=", "gc=", "Script=", "sc="];

/** One piece of a pattern: a single code point (may bound a range) or a class of them. */
type Atom =
  | { readonly kind: "char"; readonly cp: number }
  | { readonly kind: "class"; readonly text: string };

/**
 * A reader over a pattern already known to be valid ECMAScript (`u` flag): it only has to
 * tell constructs apart, the syntax errors were refused by the ECMAScript parser.
 */
class Translator {
  readonly #source: string;
  #at = 0;

  constructor(source: string) {
    this.#source = source;
  }

  translate(): string {
    let out = "";
    while (this.#at < this.#source.length) out += this.#outsideClass();
    return out;
  }

  #peek(offset = 0): string {
    return this.#source[this.#at + offset] ?? "";
  }

  #startsWith(text: string): boolean {
    return this.#source.startsWith(text, this.#at);
  }

  #codePoint(): number {
    const cp = this.#source.codePointAt(this.#at) ?? refuse("the pattern ends unexpectedly");
    this.#at += cp > 0xffff ? 2 : 1;
    return cp;
  }

  #outsideClass(): string {
    const c = this.#peek();
    switch (c) {
      case "\\":
        return this.#atomText(this.#escape(false));
      case "[":
        return this.#characterClass();
      case "(":
        return this.#groupOpening();
      case ".":
        this.#at++;
        return DOT;
      case ")":
      case "|":
      case "^":
      case "$":
      case "{":
      case "}":
      case ",":
      case "*":
      case "+":
      case "?":
        this.#at++;
        return c;
      default:
        return literal(this.#codePoint());
    }
  }

  #atomText(atom: Atom): string {
    return atom.kind === "char" ? literal(atom.cp) : atom.text;
  }

  #groupOpening(): string {
    if (this.#startsWith("(?:")) {
      this.#at += 3;
      return "(?:";
    }
    if (this.#startsWith("(?=") || this.#startsWith("(?!")) {
      return refuse("lookahead ((?= or (?!) is not supported: it cannot be matched in linear time");
    }
    if (this.#startsWith("(?<=") || this.#startsWith("(?<!")) {
      return refuse("lookbehind ((?<= or (?<!) is not supported: it cannot be matched in linear time");
    }
    if (this.#startsWith("(?<")) {
      // A named group: the name matters only to backreferences, which are refused.
      this.#at = this.#source.indexOf(">", this.#at) + 1;
      return "(";
    }
    if (this.#startsWith("(?")) return refuse("inline modifiers such as (?i:...) are not supported");
    this.#at++;
    return "(";
  }

  #characterClass(): string {
    this.#at++; // [
    const negated = this.#peek() === "^";
    if (negated) this.#at++;
    let body = "";
    while (this.#peek() !== "]") {
      const first = this.#classAtom();
      if (first.kind === "char" && this.#peek() === "-" && this.#peek(1) !== "]" && this.#peek(1) !== "") {
        this.#at++; // -
        const last = this.#classAtom();
        if (last.kind !== "char") return refuse("a class range must be bounded by characters");
        body += `${hex(first.cp)}-${hex(last.cp)}`;
      } else {
        body += first.kind === "char" ? hex(first.cp) : first.text;
      }
    }
    this.#at++; // ]
    // RE2 reads "[]" and "[^]" differently: spell out "nothing" and "anything".
    if (body === "") return negated ? ANYTHING : NOTHING;
    return negated ? `[^${body}]` : `[${body}]`;
  }

  #classAtom(): Atom {
    if (this.#peek() !== "\\") return { kind: "char", cp: this.#codePoint() };
    const atom = this.#escape(true);
    // A class inside a class is its body alone.
    return atom.kind === "class" && atom.text.startsWith("[")
      ? { kind: "class", text: atom.text.slice(1, -1) }
      : atom;
  }

  /** After a backslash; inside a class `\b` is a backspace and `\-` a hyphen. */
  #escape(inClass: boolean): Atom {
    this.#at++; // \
    const c = this.#peek();
    this.#at++;
    if (c === "d" || c === "D" || c === "w" || c === "W") return { kind: "class", text: `\\${c}` };
    if (c === "s") return { kind: "class", text: `[${SPACE}]` };
    if (c === "S") return { kind: "class", text: `[${NOT_SPACE}]` };
    if (c === "b" || c === "B")
      return inClass ? { kind: "char", cp: 0x08 } : { kind: "class", text: `\\${c}` };
    if (c >= "1" && c <= "9")
      return refuse(`backreferences (\\${c}) are not supported: they cannot be matched in linear time`);
    if (c === "k")
      return refuse("backreferences (\\k<name>) are not supported: they cannot be matched in linear time");
    if (c === "p" || c === "P") return { kind: "class", text: this.#property(c) };
    const control = CONTROL_ESCAPES[c];
    if (control !== undefined) return { kind: "char", cp: control };
    if (c === "0") return { kind: "char", cp: 0 };
    if (c === "c") return { kind: "char", cp: this.#codePoint() % 32 };
    if (c === "x") return { kind: "char", cp: this.#hexDigits(2) };
    if (c === "u") return { kind: "char", cp: this.#unicodeEscape() };
    if (SYNTAX_CHARACTERS.includes(c) || (inClass && c === "-"))
      return { kind: "char", cp: c.codePointAt(0) ?? 0 };
    return refuse(`the escape \\${c} is not supported`);
  }

  #hexDigits(count: number): number {
    const digits = this.#source.slice(this.#at, this.#at + count);
    this.#at += count;
    return Number.parseInt(digits, 16);
  }

  /** `\uXXXX` (a surrogate pair of two is one code point, as with the `u` flag) or `\u{X…}`. */
  #unicodeEscape(): number {
    if (this.#peek() === "{") {
      const end = this.#source.indexOf("}", this.#at);
      const cp = Number.parseInt(this.#source.slice(this.#at + 1, end), 16);
      this.#at = end + 1;
      return cp;
    }
    const high = this.#hexDigits(4);
    if (high >= 0xd800 && high <= 0xdbff && this.#startsWith("\\u") && this.#peek(2) !== "{") {
      const low = Number.parseInt(this.#source.slice(this.#at + 2, this.#at + 6), 16);
      if (low >= 0xdc00 && low <= 0xdfff) {
        this.#at += 6;
        return (high - 0xd800) * 0x400 + (low - 0xdc00) + 0x10000;
      }
    }
    return high;
  }

  /** `\p{…}`: RE2 knows categories and scripts by their short names alone. */
  #property(c: string): string {
    const end = this.#source.indexOf("}", this.#at);
    let name = this.#source.slice(this.#at + 1, end);
    this.#at = end + 1;
    const prefix = PROPERTY_PREFIXES.find((p) => name.startsWith(p));
    if (prefix !== undefined) name = name.slice(prefix.length);
    return `\\${c}{${name}}`;
  }
}

/** A code point outside a class: letters and digits as they are, anything else by number. */
function literal(cp: number): string {
  const isWord = (cp >= 0x30 && cp <= 0x39) || (cp >= 0x41 && cp <= 0x5a) || (cp >= 0x61 && cp <= 0x7a);
  return isWord ? String.fromCodePoint(cp) : hex(cp);
}

/* ---------- compile, with a cache ---------- */

function compileUncached(source: string): RE2JS {
  try {
    new RegExp(source, "u");
  } catch {
    refuse("it is not a valid ECMAScript regular expression");
  }
  const translated = new Translator(source).translate();
  let compiled: RE2JS;
  try {
    compiled = RE2JS.compile(translated);
  } catch (error) {
    const detail = error instanceof Error ? error.message.replace(/^error parsing regexp: /, "") : "";
    if (detail.startsWith("invalid repeat count")) {
      return refuse("a repeat count is above 1000 (nested repeats count multiplied)");
    }
    return refuse(`the linear-time engine cannot compile it (${detail.slice(0, 200)})`);
  }
  const size = compiled.programSize();
  if (size > MAX_PATTERN_PROGRAM_SIZE) {
    refuse(
      `it compiles to ${size} instructions, above the limit of ${MAX_PATTERN_PROGRAM_SIZE} (bound lengths with maxLength instead of long repeats)`,
    );
  }
  // Each pattern keeps a bounded DFA: a hostile input makes it start over, never grow.
  const dfa = compiled.re2().dfa;
  dfa.maxMem = PATTERN_DFA_MEMORY_BYTES;
  dfa.stateBudget = PATTERN_DFA_MEMORY_BYTES;
  dfa.memBudget = PATTERN_DFA_MEMORY_BYTES;
  return compiled;
}

/** Compiled patterns by source, and the reason of those refused (a bounded cache). */
const compiled = new Map<string, RE2JS | UnsupportedPatternError>();

function compiledFor(source: string): RE2JS {
  let entry = compiled.get(source);
  if (entry === undefined) {
    try {
      entry = compileUncached(source);
    } catch (error) {
      if (!(error instanceof UnsupportedPatternError)) throw error;
      entry = error;
    }
    if (compiled.size >= MAX_COMPILED_PATTERNS) compiled.clear();
    compiled.set(source, entry);
  }
  if (entry instanceof UnsupportedPatternError) throw entry;
  return entry;
}

/**
 * A checked pattern holds only its source: ajv keeps every pattern it ever compiled, so the
 * compiled program and its DFA live in the bounded cache instead (compiled again if evicted).
 */
class CheckedPattern implements LinearPattern {
  readonly #source: string;

  constructor(source: string) {
    this.#source = source;
  }

  test(value: string): boolean {
    return compiledFor(this.#source).test(value);
  }

  toString(): string {
    return `/${this.#source}/`;
  }
}

/**
 * The pattern, checked and compiled for linear-time matching (once per source while cached).
 * Throws UnsupportedPatternError when it is not valid ECMAScript or cannot run linearly.
 */
export function compileLinearPattern(source: string): LinearPattern {
  compiledFor(source);
  return new CheckedPattern(source);
}

/** Why the pattern cannot be used, or undefined when it can. */
export function linearPatternProblem(source: string): string | undefined {
  try {
    compileLinearPattern(source);
    return undefined;
  } catch (error) {
    if (error instanceof UnsupportedPatternError) return error.message;
    throw error;
  }
}

/**
 * ajv's `code.regExp`: every `pattern` and `patternProperties` key a validator checks runs
 * here. ajv passes the `u` flag (unicodeRegExp); no other flag is ever asked for.
 */
export const linearRegExp = Object.assign(
  (pattern: string, flags: string): LinearPattern => {
    if (flags !== "" && flags !== "u") refuse(`regular expression flags "${flags}" are not supported`);
    return compileLinearPattern(pattern);
  },
  // ajv prints this only into standalone code: the validators generated into
  // src/core/generated-validators/ (scripts/gen-schema-validators.ts) require the engine this way.
  { code: 'require("../linear-pattern.ts").linearRegExp' },
);
