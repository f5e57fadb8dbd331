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

function serialize(value: unknown, pointer: string, ancestors: Set<object>, depth: number): string {
  switch (typeof value) {
    case "string":
      return JSON.stringify(value);
    case "boolean":
      return value ? "true" : "false";
    case "number":
      if (!Number.isFinite(value)) throw new CanonicalJsonError(pointer, "non-finite number");
      // JSON.stringify turns -0 into "0" and uses the shortest round-trip form.
      return JSON.stringify(value);
    case "undefined":
      throw new CanonicalJsonError(pointer, "undefined is not JSON");
    case "bigint":
      throw new CanonicalJsonError(pointer, "BigInt is not JSON");
    case "function":
      throw new CanonicalJsonError(pointer, "function is not JSON");
    case "symbol":
      throw new CanonicalJsonError(pointer, "symbol is not JSON");
    case "object":
      break;
  }
  if (value === null) return "null";
  if (depth > CANONICAL_JSON_MAX_DEPTH) throw new CanonicalJsonError(pointer, "nesting too deep");
  if (ancestors.has(value)) throw new CanonicalJsonError(pointer, "cycle");
  ancestors.add(value);
  try {
    if (Array.isArray(value)) {
      if (Object.getPrototypeOf(value) !== Array.prototype) {
        throw new CanonicalJsonError(pointer, "not a plain array");
      }
      const parts: string[] = [];
      for (let i = 0; i < value.length; i++) {
        // Holes of sparse arrays would silently become null: refuse them like undefined.
        if (!Object.hasOwn(value, i)) throw new CanonicalJsonError(`${pointer}/${i}`, "array hole");
        parts.push(serialize(value[i], `${pointer}/${i}`, ancestors, depth + 1));
      }
      return `[${parts.join(",")}]`;
    }
    if (!isPlainObject(value)) throw new CanonicalJsonError(pointer, "not a plain object");
    if (Object.getOwnPropertySymbols(value).length > 0) {
      throw new CanonicalJsonError(pointer, "symbol-keyed property");
    }
    const record = value as Record<string, unknown>;
    const keys = Object.keys(record).sort(compareCodePoints);
    const parts: string[] = [];
    for (const key of keys) {
      const child = `${pointer}/${escapePointerToken(key)}`;
      parts.push(`${JSON.stringify(key)}:${serialize(record[key], child, ancestors, depth + 1)}`);
    }
    return `{${parts.join(",")}}`;
  } finally {
    ancestors.delete(value);
  }
}

/**
 * The one canonical form used before hashing and before protection: object keys sorted
 * by code point, separators "," and ":" with no whitespace, strings escaped as
 * JSON.stringify does, numbers in their shortest round-trip form (-0 becomes 0).
 * Anything JSON cannot hold exactly is refused rather than dropped or coerced.
 */
export function canonicalJson(value: unknown): string {
  return serialize(value, "", new Set(), 0);
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
