import { createHash } from "node:crypto";
import { CoreError } from "./core-error.ts";

/** Raised when a value has no exact JSON form; the message names where, never what. */
export class CanonicalJsonError extends CoreError<"canonical_json_invalid"> {
  readonly pointer: string;

  constructor(pointer: string, problem: string) {
    super("canonical_json_invalid", `${pointer === "" ? "(root)" : pointer}: ${problem}`);
    this.pointer = pointer;
  }
}

/** Deeper documents are refused instead of overflowing the stack. */
export const CANONICAL_JSON_MAX_DEPTH = 1000;

/**
 * Compares by Unicode code point, not by UTF-16 code unit (Array#sort's default), so the
 * order matches code-point sorting in other languages for keys outside the BMP.
 */
export function compareCodePoints(a: string, b: string): number {
  const length = Math.min(a.length, b.length);
  for (let i = 0; i < length; i++) {
    const ca = a.codePointAt(i) ?? 0;
    const cb = b.codePointAt(i) ?? 0;
    if (ca !== cb) return ca < cb ? -1 : 1;
    // A surrogate pair was compared as one code point: skip its low half.
    if (ca > 0xffff) i++;
  }
  return a.length === b.length ? 0 : a.length < b.length ? -1 : 1;
}

const escapePointerToken = (token: string): string => token.replaceAll("~", "~0").replaceAll("/", "~1");

function isPlainObject(value: object): boolean {
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/**
 * Where the serializer is, as a linked list from the current node to the root. The JSON
 * pointer is only built when an error needs it: building it for every node was most of
 * the cost of canonicalizing a large policy.
 */
interface Location {
  readonly parent: Location | undefined;
  readonly token: string | number;
}

function pointerOf(location: Location | undefined): string {
  const tokens: string[] = [];
  for (let at = location; at !== undefined; at = at.parent) {
    tokens.push(typeof at.token === "number" ? String(at.token) : escapePointerToken(at.token));
  }
  return tokens.length === 0 ? "" : `/${tokens.reverse().join("/")}`;
}

const SURROGATE = /[\uD800-\uDFFF]/;

/**
 * Code-point order. Without surrogates in any key, UTF-16 order (the default sort) is
 * the same order, and much faster; only keys outside the BMP need compareCodePoints.
 */
function sortKeys(keys: string[]): string[] {
  for (const key of keys) if (SURROGATE.test(key)) return keys.sort(compareCodePoints);
  return keys.sort();
}

/** Throws for what JSON cannot hold as a scalar: non-finite numbers, undefined, BigInt, functions, symbols. */
function rejectNonJsonScalar(
  value: unknown,
  location: Location | undefined,
): asserts value is string | number | boolean | object | null {
  switch (typeof value) {
    case "number":
      if (!Number.isFinite(value)) throw new CanonicalJsonError(pointerOf(location), "non-finite number");
      return;
    case "undefined":
      throw new CanonicalJsonError(pointerOf(location), "undefined is not JSON");
    case "bigint":
      throw new CanonicalJsonError(pointerOf(location), "BigInt is not JSON");
    case "function":
      throw new CanonicalJsonError(pointerOf(location), "function is not JSON");
    case "symbol":
      throw new CanonicalJsonError(pointerOf(location), "symbol is not JSON");
  }
}

function serialize(
  value: unknown,
  location: Location | undefined,
  ancestors: Set<object>,
  depth: number,
): string {
  rejectNonJsonScalar(value, location);
  switch (typeof value) {
    case "string":
      return JSON.stringify(value);
    case "boolean":
      return value ? "true" : "false";
    case "number":
      // JSON.stringify turns -0 into "0" and uses the shortest round-trip form.
      return JSON.stringify(value);
  }
  if (value === null) return "null";
  if (depth > CANONICAL_JSON_MAX_DEPTH) throw new CanonicalJsonError(pointerOf(location), "nesting too deep");
  if (ancestors.has(value)) throw new CanonicalJsonError(pointerOf(location), "cycle");
  ancestors.add(value);
  try {
    if (Array.isArray(value)) {
      if (Object.getPrototypeOf(value) !== Array.prototype) {
        throw new CanonicalJsonError(pointerOf(location), "not a plain array");
      }
      let out = "[";
      for (let i = 0; i < value.length; i++) {
        // Holes of sparse arrays would silently become null: refuse them like undefined.
        if (!Object.hasOwn(value, i)) {
          throw new CanonicalJsonError(pointerOf({ parent: location, token: i }), "array hole");
        }
        if (i > 0) out += ",";
        out += serialize(value[i], { parent: location, token: i }, ancestors, depth + 1);
      }
      return `${out}]`;
    }
    const record = plainRecord(value, location);
    const keys = sortKeys(Object.keys(record));
    let out = "";
    for (const key of keys) {
      out += `,${JSON.stringify(key)}:${serialize(record[key], { parent: location, token: key }, ancestors, depth + 1)}`;
    }
    return `{${out.slice(1)}}`;
  } finally {
    ancestors.delete(value);
  }
}

/** Keys that JavaScript enumerates as array indexes (ascending, before all others). */
const INDEX_KEY = /^(?:0|[1-9][0-9]{0,9})$/;
const isIndexKey = (key: string): boolean => {
  const first = key.charCodeAt(0);
  return first >= 48 && first <= 57 && INDEX_KEY.test(key) && Number(key) < 4_294_967_295;
};

/** Returned by prepare() when native serialization cannot produce the canonical order. */
const SLOW = Symbol("slow");

const hasSurrogate = (keys: readonly string[]): boolean => keys.some((key) => SURROGATE.test(key));

/** Keys in code-point order: the same array when already ordered, else a sorted copy. */
function orderedKeys(keys: string[]): { keys: string[]; sorted: boolean } {
  const compare = hasSurrogate(keys) ? compareCodePoints : undefined;
  for (let i = 1; i < keys.length; i++) {
    const a = keys[i - 1] ?? "";
    const b = keys[i] ?? "";
    if (compare === undefined ? a >= b : compare(a, b) >= 0) {
      const copy = [...keys];
      return { keys: compare === undefined ? copy.sort() : copy.sort(compare), sorted: false };
    }
  }
  return { keys, sorted: true };
}

/** Primitives that are JSON as they are; everything else goes through prepare(). */
function isPlainLeaf(value: unknown): boolean {
  const type = typeof value;
  return (
    type === "string" || type === "boolean" || value === null || (type === "number" && Number.isFinite(value))
  );
}

/**
 * The fast path: checks everything serialize() checks, in the same order, and returns a
 * value whose JSON.stringify is the canonical text — the input itself when its keys are
 * already in code-point order (e.g. parsed canonical text), otherwise a copy with keys
 * inserted in that order. Objects with index-like keys ("0", "12") cannot be reordered
 * that way (they always enumerate first), so those documents take serialize() instead.
 */
function prepare(
  value: unknown,
  location: Location | undefined,
  ancestors: Set<object>,
  depth: number,
): unknown {
  rejectNonJsonScalar(value, location);
  if (typeof value !== "object") return value;
  if (value === null) return null;
  if (depth > CANONICAL_JSON_MAX_DEPTH) throw new CanonicalJsonError(pointerOf(location), "nesting too deep");
  if (ancestors.has(value)) throw new CanonicalJsonError(pointerOf(location), "cycle");
  ancestors.add(value);
  const result = Array.isArray(value)
    ? prepareArray(value, location, ancestors, depth)
    : prepareObject(value, location, ancestors, depth);
  ancestors.delete(value);
  return result;
}

function prepareArray(
  value: unknown[],
  location: Location | undefined,
  ancestors: Set<object>,
  depth: number,
): unknown {
  if (Object.getPrototypeOf(value) !== Array.prototype) {
    throw new CanonicalJsonError(pointerOf(location), "not a plain array");
  }
  let copy: unknown[] | undefined;
  for (let i = 0; i < value.length; i++) {
    if (!Object.hasOwn(value, i)) {
      throw new CanonicalJsonError(pointerOf({ parent: location, token: i }), "array hole");
    }
    const item: unknown = value[i];
    const prepared = isPlainLeaf(item)
      ? item
      : prepare(item, { parent: location, token: i }, ancestors, depth + 1);
    if (prepared === SLOW) return SLOW;
    if (copy === undefined && prepared !== item) copy = value.slice(0, i);
    copy?.push(prepared);
  }
  return copy ?? value;
}

/** The object as a record, refused unless it is a plain object without symbol keys. */
function plainRecord(value: object, location: Location | undefined): Record<string, unknown> {
  if (!isPlainObject(value)) throw new CanonicalJsonError(pointerOf(location), "not a plain object");
  if (Object.getOwnPropertySymbols(value).length > 0) {
    throw new CanonicalJsonError(pointerOf(location), "symbol-keyed property");
  }
  return value as Record<string, unknown>;
}

function prepareObject(
  value: object,
  location: Location | undefined,
  ancestors: Set<object>,
  depth: number,
): unknown {
  const record = plainRecord(value, location);
  const { keys, sorted } = orderedKeys(Object.keys(record));
  const prepared: unknown[] = [];
  let changed = !sorted;
  for (const key of keys) {
    if (isIndexKey(key)) return SLOW;
    const child = record[key];
    const result = isPlainLeaf(child)
      ? child
      : prepare(child, { parent: location, token: key }, ancestors, depth + 1);
    if (result === SLOW) return SLOW;
    if (result !== child) changed = true;
    prepared.push(result);
  }
  if (!changed) return value;
  // An ordinary object keeps V8's fast properties (and its fast JSON.stringify); only
  // "__proto__" needs defineProperty to be stored as the ordinary key it is.
  const copy: Record<string, unknown> = {};
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i] ?? "";
    if (key === "__proto__") {
      Object.defineProperty(copy, key, {
        value: prepared[i],
        enumerable: true,
        writable: true,
        configurable: true,
      });
    } else copy[key] = prepared[i];
  }
  return copy;
}

/**
 * The one canonical form used before hashing and before protection: object keys sorted
 * by code point, separators "," and ":" with no whitespace, strings escaped as
 * JSON.stringify does, numbers in their shortest round-trip form (-0 becomes 0).
 * Anything JSON cannot hold exactly is refused rather than dropped or coerced.
 */
export function canonicalJson(value: unknown): string {
  const prepared = prepare(value, undefined, new Set(), 0);
  // Native serialization of the prepared value writes exactly the canonical text.
  return prepared === SLOW ? serialize(value, undefined, new Set(), 0) : JSON.stringify(prepared);
}

/** Hex SHA-256 of a string (UTF-8) or bytes. */
export function sha256Hex(data: string | Uint8Array): string {
  return createHash("sha256").update(data).digest("hex");
}

export type Sha256Ref = `sha256:${string}`;

export const SHA256_REF_PATTERN = "^sha256:[0-9a-f]{64}$";

/** `sha256:<hex>` of the canonical JSON of a value. */
export function hashCanonical(value: unknown): Sha256Ref {
  return `sha256:${sha256Hex(canonicalJson(value))}`;
}
