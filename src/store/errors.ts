/**
 * Store failures and the input rules every backend enforces the same way, so a caller
 * gets the same error for the same mistake whichever backend is configured.
 */
import { AuthorityError, type ErrorCode } from "../errors.ts";
import type { FieldMatch, ListOptions, ReadLogOptions, WriteOptions } from "./store.ts";

export type StoreErrorCode =
  | "store_error"
  | "store_unavailable"
  | "store_invalid_name"
  | "store_invalid_argument"
  | "store_closed";

/** Any store failure. `message` is safe to log: it never holds a value, a password or a URL. */
export class StoreError extends Error {
  readonly code: StoreErrorCode;

  constructor(message: string, options?: { cause?: unknown; code?: StoreErrorCode }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "StoreError";
    this.code = options?.code ?? "store_error";
  }

  /** The code from the one error table that this failure becomes when it reaches a caller. */
  get authorityCode(): ErrorCode {
    switch (this.code) {
      case "store_unavailable":
      case "store_closed":
        return "upstream_unavailable";
      case "store_invalid_name":
      case "store_invalid_argument":
        return "invalid_request";
      default:
        return "internal";
    }
  }
}

/** The backend cannot be reached (Redis down, connection lost, command timed out, SQLite busy). */
export class StoreUnavailableError extends StoreError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, { ...options, code: "store_unavailable" });
    this.name = "StoreUnavailableError";
  }
}

/** A collection, log or counter-set name, an id or a counter key breaks the naming rules. */
export class StoreInvalidNameError extends StoreError {
  constructor(message: string) {
    super(message, { code: "store_invalid_name" });
    this.name = "StoreInvalidNameError";
  }
}

/** A value, TTL, limit, increment, option or URL is not acceptable. */
export class StoreInvalidArgumentError extends StoreError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, { ...options, code: "store_invalid_argument" });
    this.name = "StoreInvalidArgumentError";
  }
}

/** Fails a store option check (positiveIntegerOption's `fail`). */
export function invalidArgument(message: string): never {
  throw new StoreInvalidArgumentError(message);
}

/** The store was closed by its owner; no further calls are served. */
export class StoreClosedError extends StoreError {
  constructor(backend: string) {
    super(`The ${backend} store is closed.`, { code: "store_closed" });
    this.name = "StoreClosedError";
  }
}

export function isStoreError(error: unknown): error is StoreError {
  return error instanceof StoreError;
}

/** Turns a store failure into the public error; the store error stays as the (never serialized) cause. */
export function storeErrorToAuthority(error: StoreError): AuthorityError {
  return new AuthorityError(error.authorityCode, undefined, { cause: error });
}

// ---------------------------------------------------------------------------------------
// Input rules

const NAME_PATTERN = /^[a-z][a-z0-9_.-]{0,63}$/;
const MAX_ID_LENGTH = 512;
export const DEFAULT_LIMIT = 100;
export const MAX_LIMIT = 1000;

/** Collection, log and counter-set names: they become parts of keys and table values. */
export function checkName(kind: "collection" | "log" | "counters", name: unknown): string {
  if (typeof name !== "string" || !NAME_PATTERN.test(name)) {
    throw new StoreInvalidNameError(`Invalid ${kind} name: must match ${NAME_PATTERN.source}.`);
  }
  return name;
}

/**
 * Document ids and counter keys: 1–512 characters, no NUL, well-formed Unicode. A lone
 * surrogate would be replaced when encoded as UTF-8, so two ids could collide.
 */
export function checkId(kind: "id" | "counter key", id: unknown): string {
  if (
    typeof id !== "string" ||
    id.length === 0 ||
    id.length > MAX_ID_LENGTH ||
    id.includes("\u0000") ||
    !id.isWellFormed()
  ) {
    throw new StoreInvalidNameError(
      `Invalid ${kind}: must be 1-${MAX_ID_LENGTH} characters of well-formed Unicode without NUL.`,
    );
  }
  return id;
}

const MATCH_FIELD_PATTERN = /^[a-z_][a-z0-9_]{0,63}$/;

/** A compare-and-set condition: a plain field name (it becomes part of a JSON path) and a string. */
export function checkMatch(match: unknown): FieldMatch {
  const { field, equals } = (match ?? {}) as Partial<FieldMatch>;
  if (typeof field !== "string" || !MATCH_FIELD_PATTERN.test(field) || typeof equals !== "string") {
    throw new StoreInvalidArgumentError(
      `A match is a field matching ${MATCH_FIELD_PATTERN.source} and a string to compare it with.`,
    );
  }
  return { field, equals };
}

/** JSON text of a value; undefined, functions, symbols, bigints and cycles are refused. */
export function encodeValue(value: unknown): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (error) {
    throw new StoreInvalidArgumentError("Value is not JSON-serializable.", { cause: error });
  }
  if (typeof text !== "string") throw new StoreInvalidArgumentError("Value is not JSON-serializable.");
  return text;
}

/** A count, seq or counter a server returned (a number, or its decimal text), as a safe integer. */
export function returnedInteger(value: unknown, server: string, what: string): number {
  const number = typeof value === "string" ? Number(value) : value;
  if (typeof number !== "number" || !Number.isSafeInteger(number)) {
    throw new StoreError(`${server} returned a non-integer ${what}.`);
  }
  return number;
}

export function decodeValue<T>(text: string): T {
  try {
    return JSON.parse(text) as T;
  } catch (error) {
    throw new StoreError("Stored value is not valid JSON.", { cause: error });
  }
}

/** Whole milliseconds (rounded up so a TTL never shortens), or undefined for no expiry. */
export function checkTtl(options: WriteOptions | undefined): number | undefined {
  const ttl = options?.ttlMs;
  if (ttl === undefined) return undefined;
  if (typeof ttl !== "number" || !Number.isFinite(ttl) || ttl <= 0 || ttl > Number.MAX_SAFE_INTEGER / 2) {
    throw new StoreInvalidArgumentError("ttlMs must be a positive finite number of milliseconds.");
  }
  return Math.ceil(ttl);
}

/** Page size: default 100; above 1000 is capped rather than refused, so callers can pass user input. */
export function checkLimit(limit: number | undefined): number {
  if (limit === undefined) return DEFAULT_LIMIT;
  if (!Number.isSafeInteger(limit) || limit < 1) {
    throw new StoreInvalidArgumentError("limit must be a positive integer.");
  }
  return Math.min(limit, MAX_LIMIT);
}

export function checkIncrement(by: number | undefined): number {
  if (by === undefined) return 1;
  if (!Number.isSafeInteger(by)) throw new StoreInvalidArgumentError("Increment must be a safe integer.");
  return by;
}

export function checkAfterSeq(options: ReadLogOptions | undefined): number {
  const after = options?.afterSeq;
  if (after === undefined) return 0;
  if (!Number.isSafeInteger(after) || after < 0) {
    throw new StoreInvalidArgumentError("afterSeq must be a non-negative integer.");
  }
  return after;
}

/**
 * The smallest string greater than every string that starts with `prefix`, in code-point
 * order (which is UTF-8 byte order, the order both SQLite's BINARY collation and Redis's
 * ZRANGEBYLEX use). Undefined when no such string exists (prefix of only U+10FFFF).
 * This avoids LIKE and its wildcards entirely.
 */
export function prefixUpperBound(prefix: string): string | undefined {
  const points = Array.from(prefix, (char) => char.codePointAt(0) ?? 0);
  while (points.length > 0) {
    const last = points.pop() ?? 0;
    if (last < 0x10ffff) {
      // Skip the surrogate range: those code points never occur in a well-formed string.
      points.push(last + 1 === 0xd800 ? 0xe000 : last + 1);
      return String.fromCodePoint(...points);
    }
  }
  return undefined;
}

/** A validated list request: ids in [lower, upper) (lower exclusive when `lowerExclusive`). */
export interface ListRange {
  readonly lower: string | undefined;
  readonly lowerExclusive: boolean;
  readonly upper: string | undefined;
  readonly prefix: string | undefined;
  readonly limit: number;
}

export function checkListOptions(options: ListOptions | undefined): ListRange {
  const limit = checkLimit(options?.limit);
  const prefix = options?.prefix;
  const after = options?.after;
  if (prefix !== undefined && (typeof prefix !== "string" || !prefix.isWellFormed() || prefix.length > 512)) {
    throw new StoreInvalidArgumentError("prefix must be well-formed Unicode of at most 512 characters.");
  }
  if (after !== undefined) checkId("id", after);
  const usePrefix = prefix === undefined || prefix === "" ? undefined : prefix;
  const upper = usePrefix === undefined ? undefined : prefixUpperBound(usePrefix);
  if (after !== undefined && (usePrefix === undefined || compareCodePoints(after, usePrefix) >= 0)) {
    return { lower: after, lowerExclusive: true, upper, prefix: usePrefix, limit };
  }
  return { lower: usePrefix, lowerExclusive: false, upper, prefix: usePrefix, limit };
}

/** Code-point order (JavaScript's `<` compares UTF-16 units, which differs above U+FFFF). */
export function compareCodePoints(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8"));
}
