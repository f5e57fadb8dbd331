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

export type StoreBackend = "sqlite" | "redis" | "postgres";

export interface StoreHealth {
  readonly backend: StoreBackend;
  readonly ok: boolean;
  /** Safe, human-readable state (no secrets, no connection strings with passwords). */
  readonly detail: string;
}

export interface Store {
  readonly backend: StoreBackend;
  get<T>(collection: string, id: string): Promise<T | undefined>;
  put<T>(collection: string, id: string, value: T, options?: WriteOptions): Promise<void>;
  /** Writes only when no live document has this id; true when this call created it. */
  create<T>(collection: string, id: string, value: T, options?: WriteOptions): Promise<boolean>;
  delete(collection: string, id: string): Promise<boolean>;
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
  readLog<T>(log: string, options?: ReadLogOptions): Promise<LogEntry<T>[]>;
  logLength(log: string): Promise<number>;
  increment(counters: string, key: string, by?: number): Promise<number>;
  readCounters(counters: string, prefix?: string): Promise<Record<string, number>>;
  health(): Promise<StoreHealth>;
  close(): Promise<void>;
}
