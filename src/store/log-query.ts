/**
 * What every backend shares for filtered log queries and retention: which entry fields are
 * indexed, how an entry's index values and time are derived (once, here, so the backends
 * and the migrations of existing data agree), and the validation of queries and trim rules.
 */
import {
  checkId,
  checkListOptions,
  compareCodePoints,
  decodeValue,
  prefixUpperBound,
  StoreInvalidArgumentError,
} from "./errors.ts";
import type { LogPosition, LogQuery, LogQueryPage, LogTrim } from "./store.ts";

/**
 * Top-level entry fields every backend keeps an index of (a column + index in SQL, a sorted
 * set per value in Redis). A query on one of them reads only the matching entries; any other
 * field in `where` is checked on the entries the index yields.
 */
export const LOG_INDEX_FIELDS = ["partner_id", "subject_id", "capability_id", "decision", "reason"] as const;
export type LogIndexField = (typeof LOG_INDEX_FIELDS)[number];

/** An indexed value longer than this is not indexed (PostgreSQL's B-tree entries are bounded). */
export const MAX_INDEXED_VALUE = 512;
/** Longest value of a condition on a field that is not indexed. */
const MAX_OTHER_VALUE = 4096;
/** Times are clamped to [0, MAX_TIME_MS] so every backend orders them the same (15 digits). */
export const MAX_TIME_MS = 999_999_999_999_999;
/**
 * Index entries one query examines at most when it has conditions no index answers: it then
 * returns the matches among them (a page may be short) and `next` to continue from.
 */
export const LOG_QUERY_BUDGET = 5000;
/** Most `where` conditions in one query. */
const MAX_CONDITIONS = 8;
const FIELD_PATTERN = /^[a-z][a-z0-9_]{0,63}$/;
/** Most entries one trim call removes. */
export const MAX_TRIM_BATCH = 10_000;

export interface LogIndexValues {
  /** The entry's `time` (ISO text) in ms, 0 when it has none. */
  readonly time: number;
  /** Per indexed field, its value when it is a string of at most MAX_INDEXED_VALUE characters. */
  readonly fields: Readonly<Record<LogIndexField, string | null>>;
  /**
   * The entry's top-level `id` (same bounds as an indexed value): unique within a log on every
   * backend, so an entry sent again (a retried write, a batch re-sent to another replica) is
   * stored once (decision 2751). Null: the entry is not id-checked.
   */
  readonly id: string | null;
}

const clampTime = (ms: number): number => Math.min(Math.max(Math.trunc(ms), 0), MAX_TIME_MS);

/** The time and index values of one entry (any JSON value; non-objects have none). */
export function logIndexValues(value: unknown): LogIndexValues {
  const row = typeof value === "object" && value !== null ? (value as Record<string, unknown>) : {};
  const parsed = typeof row.time === "string" ? Date.parse(row.time) : Number.NaN;
  const fields = {} as Record<LogIndexField, string | null>;
  for (const field of LOG_INDEX_FIELDS) fields[field] = indexable(row, field);
  return { time: Number.isFinite(parsed) ? clampTime(parsed) : 0, fields, id: indexable(row, "id") };
}

function indexable(row: Record<string, unknown>, field: string): string | null {
  const candidate = Object.hasOwn(row, field) ? row[field] : undefined;
  return typeof candidate === "string" &&
    candidate.length <= MAX_INDEXED_VALUE &&
    !candidate.includes("\u0000")
    ? candidate
    : null;
}

/** Most ids one `logIdsHeld` call looks up. */
export const MAX_ID_LOOKUP = 1000;

/** The ids of a `logIdsHeld` call: those an entry could hold (others are held by none). */
export function checkIdLookup(ids: readonly string[]): string[] {
  if (!Array.isArray(ids) || ids.length > MAX_ID_LOOKUP) {
    throw new StoreInvalidArgumentError(`ids must be an array of at most ${MAX_ID_LOOKUP} strings.`);
  }
  return ids.filter((id) => indexable({ id }, "id") !== null);
}

export const isIndexField = (field: string): field is LogIndexField =>
  (LOG_INDEX_FIELDS as readonly string[]).includes(field);

export interface CheckedLogQuery {
  readonly indexed: ReadonlyArray<readonly [LogIndexField, string]>;
  /** Conditions on other fields, checked on each candidate. */
  readonly other: ReadonlyArray<readonly [string, string]>;
  readonly since: number;
  readonly until: number;
  /** Position after which entries are returned (time, seq); [-1, 0] from the start. */
  readonly afterTime: number;
  readonly afterSeq: number;
  readonly limit: number;
}

function timeBound(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value)) throw new StoreInvalidArgumentError(`${name} must be an integer (ms).`);
  return clampTime(value);
}

/** Validates a query: field names, string values, bounds, cursor position and limit. */
export function checkLogQuery(
  query: LogQuery | undefined,
  defaultLimit = 100,
  maxLimit = 1000,
): CheckedLogQuery {
  const where = Object.entries(query?.where ?? {});
  if (where.length > MAX_CONDITIONS) {
    throw new StoreInvalidArgumentError(`At most ${MAX_CONDITIONS} conditions per log query.`);
  }
  const indexed: Array<readonly [LogIndexField, string]> = [];
  const other: Array<readonly [string, string]> = [];
  for (const [field, wanted] of where) {
    if (!FIELD_PATTERN.test(field)) throw new StoreInvalidArgumentError("Invalid log query field name.");
    const max = isIndexField(field) ? MAX_INDEXED_VALUE : MAX_OTHER_VALUE;
    if (typeof wanted !== "string" || wanted.length > max || !wanted.isWellFormed()) {
      throw new StoreInvalidArgumentError(
        `Log query values must be strings of at most ${MAX_INDEXED_VALUE} characters (${MAX_OTHER_VALUE} for fields that are not indexed).`,
      );
    }
    if (isIndexField(field)) indexed.push([field, wanted]);
    else other.push([field, wanted]);
  }
  const since = timeBound(query?.since, 0, "since");
  const until = timeBound(query?.until, MAX_TIME_MS, "until");
  const after = query?.after;
  let afterTime = -1;
  let afterSeq = 0;
  if (after !== undefined) {
    if (!Number.isSafeInteger(after.time) || after.time < 0 || after.time > MAX_TIME_MS) {
      throw new StoreInvalidArgumentError("after.time must be a time in ms.");
    }
    if (!Number.isSafeInteger(after.seq) || after.seq < 0) {
      throw new StoreInvalidArgumentError("after.seq must be a non-negative integer.");
    }
    afterTime = after.time;
    afterSeq = after.seq;
  }
  const limit = query?.limit ?? defaultLimit;
  if (!Number.isSafeInteger(limit) || limit < 1)
    throw new StoreInvalidArgumentError("limit must be a positive integer.");
  return { indexed, other, since, until, afterTime, afterSeq, limit: Math.min(limit, maxLimit) };
}

/** True when an entry satisfies every condition of a query (used to verify index candidates). */
export function entryMatches(value: unknown, time: number, query: CheckedLogQuery): boolean {
  if (time < query.since || time > query.until) return false;
  const row = typeof value === "object" && value !== null ? (value as Record<string, unknown>) : {};
  for (const [field, wanted] of [...query.indexed, ...query.other]) {
    if (!Object.hasOwn(row, field) || row[field] !== wanted) return false;
  }
  return true;
}

export interface CheckedTrim {
  readonly before: number | undefined;
  readonly keep: number | undefined;
  readonly max: number;
}

/** Validates a trim rule: at least one of `olderThan` (a time, ms) and `keepLast`. */
export function checkLogTrim(rule: LogTrim): CheckedTrim {
  const before = rule?.olderThan;
  const keep = rule?.keepLast;
  if (before === undefined && keep === undefined) {
    throw new StoreInvalidArgumentError("A trim needs olderThan, keepLast or both.");
  }
  if (before !== undefined && !Number.isSafeInteger(before)) {
    throw new StoreInvalidArgumentError("olderThan must be a time in ms.");
  }
  if (keep !== undefined && (!Number.isSafeInteger(keep) || keep < 1)) {
    throw new StoreInvalidArgumentError("keepLast must be a positive integer.");
  }
  const max = rule.max ?? 500;
  if (!Number.isSafeInteger(max) || max < 1 || max > MAX_TRIM_BATCH) {
    throw new StoreInvalidArgumentError(`max must be an integer from 1 to ${MAX_TRIM_BATCH}.`);
  }
  return { before: before === undefined ? undefined : clampTime(before), keep, max };
}

/**
 * How many of the oldest entries (given oldest first, at most `max` of them, out of `total`
 * entries in the log) a trim removes: those older than `before` or beyond the newest `keep`,
 * stopping at the first entry to keep, and never the newest entry of the log (its seq is
 * what the next append continues from on some backends).
 */
export function trimCount(oldestTimes: readonly number[], total: number, trim: CheckedTrim): number {
  const beyondCount = trim.keep === undefined ? 0 : Math.max(total - trim.keep, 0);
  let n = 0;
  for (const time of oldestTimes) {
    if (n >= trim.max || n >= total - 1) break;
    const old = trim.before !== undefined && time < trim.before;
    if (!(old || n < beyondCount)) break;
    n++;
  }
  return n;
}

export interface CounterRange {
  /** Keys at or after this (the prefix), none when the prefix is empty. */
  readonly lower: string | undefined;
  /** Keys before this. */
  readonly upper: string;
  readonly max: number;
}

/** Validates a counter deletion: keys starting with `prefix` and sorting before `before`. */
export function checkCounterRange(prefix: string, before: string, max: number | undefined): CounterRange {
  checkListOptions({ prefix });
  checkId("counter key", before);
  const limit = max ?? 500;
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_TRIM_BATCH) {
    throw new StoreInvalidArgumentError(`max must be an integer from 1 to ${MAX_TRIM_BATCH}.`);
  }
  const end = prefix === "" ? undefined : prefixUpperBound(prefix);
  const upper = end !== undefined && compareCodePoints(end, before) < 0 ? end : before;
  return { lower: prefix === "" ? undefined : prefix, upper, max: limit };
}

export interface QueryMatch {
  readonly seq: number;
  readonly time: number;
  /** The entry's JSON text. */
  readonly text: string;
}

/**
 * A page from up to limit+1 matches in order: `next` after the limit-th when there are
 * more, else the last position examined when the walk stopped at its budget.
 */
export function logQueryPage<T>(
  matches: readonly QueryMatch[],
  limit: number,
  stoppedAt: LogPosition | undefined,
): LogQueryPage<T> {
  const entries = matches.slice(0, limit).map((match) => ({
    seq: match.seq,
    time: match.time,
    value: decodeValue<T>(match.text),
  }));
  const lastEntry = entries.at(-1);
  if (matches.length > limit && lastEntry !== undefined) {
    return { entries, next: { time: lastEntry.time, seq: lastEntry.seq } };
  }
  return stoppedAt === undefined
    ? { entries }
    : { entries, next: { time: stoppedAt.time, seq: stoppedAt.seq } };
}
