/**
 * The one persistence interface. Three real backends implement it (sqlite/, redis/ and
 * postgres/) and one contract suite (test/store/contract.ts) runs against each.
 *
 * Model: named collections of JSON documents keyed by id (ordered by id, so ids with a
 * common prefix page together), append-only logs with monotonic sequence numbers (audit),
 * and named counter sets (usage). Values must be JSON-serializable.
 */

export interface StoredItem<T> {
  readonly id: string;
  readonly value: T;
}

export interface Page<T> {
  readonly items: StoredItem<T>[];
  /** Opaque cursor for the next page (the last id); absent on the last page. */
  readonly next?: string;
}

export interface ListOptions {
  /** Only ids starting with this prefix. */
  readonly prefix?: string;
  /** Only ids strictly greater than this (a `next` cursor). */
  readonly after?: string;
  /** Page size; default 100, at most 1000. */
  readonly limit?: number;
}

export interface WriteOptions {
  /** The document disappears after this many milliseconds. */
  readonly ttlMs?: number;
}

/**
 * A condition on a stored document: its top-level `field` is the string `equals`. A write
 * with it applies only to a live document that matches (compare-and-set), in one step.
 */
export interface FieldMatch {
  /** A top-level field name: 1-64 of a-z, 0-9 and _, starting with a letter or _. */
  readonly field: string;
  readonly equals: string;
}

export interface LogEntry<T> {
  /** 1-based, strictly increasing within one log. */
  readonly seq: number;
  readonly value: T;
}

export interface ReadLogOptions {
  /** Only entries with seq greater than this. */
  readonly afterSeq?: number;
  /** Default 100, at most 1000. */
  readonly limit?: number;
}

/** A place in a log ordered by (time, seq): a query continues strictly after it. */
export interface LogPosition {
  /** The entry's `time` in ms (0 when it has none). */
  readonly time: number;
  readonly seq: number;
}

export interface LogQuery {
  /**
   * Top-level fields the entry must have with exactly these string values. The indexed
   * fields (log-query.ts LOG_INDEX_FIELDS) are answered from an index on every backend;
   * other fields are checked on the entries an index (or the time order) yields.
   */
  readonly where?: Readonly<Record<string, string>>;
  /** Only entries whose `time` is at or after this (ms). */
  readonly since?: number;
  /** Only entries whose `time` is at or before this (ms). */
  readonly until?: number;
  /** Continue after this position (a page's `next`). */
  readonly after?: LogPosition;
  /** Default 100, at most 1000. */
  readonly limit?: number;
}

export interface TimedLogEntry<T> extends LogEntry<T> {
  /** The entry's `time` in ms, as the log's index holds it. */
  readonly time: number;
}

export interface LogQueryPage<T> {
  /** Matches in (time, seq) order. */
  readonly entries: TimedLogEntry<T>[];
  /** Where to continue; absent when no match follows. A page may be short when `next` is set. */
  readonly next?: LogPosition;
}

/** Which old entries a trim removes, oldest seq first. */
export interface LogTrim {
  /** Entries whose `time` is before this (ms). */
  readonly olderThan?: number;
  /** Entries beyond the newest `keepLast`. */
  readonly keepLast?: number;
  /** Most entries removed by this call (default 500, at most 10000). */
  readonly max?: number;
}

/** One write of a `writeAll` batch. */
export type StoreWrite =
  | {
      readonly op: "put";
      readonly collection: string;
      readonly id: string;
      readonly value: unknown;
      readonly ttlMs?: number;
    }
  | { readonly op: "delete"; readonly collection: string; readonly id: string }
  | { readonly op: "append"; readonly log: string; readonly value: unknown }
  | { readonly op: "increment"; readonly counters: string; readonly key: string; readonly by?: number };

export type StoreBackend = "sqlite" | "redis" | "postgres";

export interface StoreHealth {
  readonly backend: StoreBackend;
  readonly ok: boolean;
  /** Safe, human-readable state (no secrets, no connection strings with passwords). */
  readonly detail: string;
}

/** One entry of `Store.appendAcross`. */
export interface LogAppend<T> {
  readonly log: string;
  readonly value: T;
}

export interface Store {
  readonly backend: StoreBackend;
  get<T>(collection: string, id: string): Promise<T | undefined>;
  put<T>(collection: string, id: string, value: T, options?: WriteOptions): Promise<void>;
  /** Writes only when no live document has this id; true when this call created it. */
  create<T>(collection: string, id: string, value: T, options?: WriteOptions): Promise<boolean>;
  /**
   * Replaces a live document only while it matches (a fencing token: decision 2991); one
   * atomic step on every backend. True when this call wrote it.
   */
  putIfMatch<T>(
    collection: string,
    id: string,
    value: T,
    match: FieldMatch,
    options?: WriteOptions,
  ): Promise<boolean>;
  delete(collection: string, id: string): Promise<boolean>;
  /** Deletes a live document only while it matches; true when this call removed it. */
  deleteIfMatch(collection: string, id: string, match: FieldMatch): Promise<boolean>;
  list<T>(collection: string, options?: ListOptions): Promise<Page<T>>;
  count(collection: string): Promise<number>;
  append<T>(log: string, value: T): Promise<number>;
  /**
   * Appends several entries at once, in order, all or none: their seqs are consecutive and
   * returned in the same order. One transaction (SQLite), one script (Redis) or one statement
   * (PostgreSQL) for the batch, so a busy audit log costs one write per batch instead of one
   * per entry.
   */
  appendMany<T>(log: string, values: readonly T[]): Promise<number[]>;
  /**
   * Entries for several logs in one transaction, all or none: each log's entries get
   * consecutive seqs in their order; the seqs come back in the order of `entries`. Offered
   * where one transaction is cheaper than one per log (SQLite: one commit, one WAL sync
   * point); without it, callers append log by log with `appendMany`.
   */
  appendAcross?<T>(entries: readonly LogAppend<T>[]): Promise<number[]>;
  /**
   * Which of `ids` (at most 1000) entries of the log hold as their top-level `id`: a record
   * already stored is not handed to the writer again (decision 2751).
   */
  logIdsHeld(log: string, ids: readonly string[]): Promise<string[]>;
  readLog<T>(log: string, options?: ReadLogOptions): Promise<LogEntry<T>[]>;
  /** Last seq given out in this log (0 when empty); trimming does not lower it. */
  logLength(log: string): Promise<number>;
  /**
   * The entries matching a query, in (time, seq) order, from indexes: a page holds matches,
   * not a window of the log (work per call is bounded on every backend).
   */
  queryLog<T>(log: string, query?: LogQuery): Promise<LogQueryPage<T>>;
  /**
   * Retention: removes up to `max` of the oldest entries (by seq) that the rule selects,
   * stopping at the first entry to keep; never the newest entry. Returns how many it removed.
   */
  trimLog(log: string, rule: LogTrim): Promise<number>;
  increment(counters: string, key: string, by?: number): Promise<number>;
  readCounters(counters: string, prefix?: string): Promise<Record<string, number>>;
  /**
   * Retention of counters: removes up to `max` counters whose key starts with `prefix` and
   * sorts before `before` (code-point order). Returns how many it removed.
   */
  deleteCounters(counters: string, prefix: string, before: string, max?: number): Promise<number>;
  /**
   * Several records that change together (an assignment and its audit record): the writes,
   * in order, in one transaction — all or none (SQLite, PostgreSQL); one MULTI/EXEC on Redis
   * (no other client sees a part, but Redis has no rollback). At most 100 writes; each is
   * validated before any is applied.
   */
  writeAll(writes: readonly StoreWrite[]): Promise<void>;
  health(): Promise<StoreHealth>;
  close(): Promise<void>;
}
