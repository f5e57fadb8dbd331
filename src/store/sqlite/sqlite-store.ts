/**
 * The embedded backend: one SQLite file (node:sqlite, synchronous) in WAL mode. Every
 * write is a single statement, so it is atomic on its own, including across processes
 * that share the file; no transaction spans an await.
 */
import { DatabaseSync, type SQLInputValue, type StatementSync } from "node:sqlite";
import { positiveIntegerOption } from "../../core/positive-integer.ts";
import {
  checkAfterSeq,
  checkId,
  checkIncrement,
  checkLimit,
  checkListOptions,
  checkMatch,
  checkName,
  checkTtl,
  decodeValue,
  encodeValue,
  invalidArgument,
  StoreClosedError,
  StoreError,
  StoreInvalidArgumentError,
  StoreUnavailableError,
} from "../errors.ts";
import {
  checkCounterRange,
  checkIdLookup,
  checkLogQuery,
  checkLogTrim,
  LOG_INDEX_FIELDS,
  LOG_QUERY_BUDGET,
  type LogIndexField,
  type LogIndexValues,
  logIndexValues,
  logQueryPage,
  type QueryMatch,
  trimCount,
} from "../log-query.ts";
import type {
  FieldMatch,
  ListOptions,
  LogAppend,
  LogEntry,
  LogQuery,
  LogQueryPage,
  LogTrim,
  Page,
  ReadLogOptions,
  Store,
  StoredItem,
  StoreHealth,
  StoreWrite,
  WriteOptions,
} from "../store.ts";
import { type CheckedWrite, checkWrites } from "../write-batch.ts";
import { type Checkpointer, type CheckpointerStats, createCheckpointer } from "./checkpointer.ts";

export interface SqliteStoreOptions {
  /** Path of the database file; its directory must exist. */
  readonly path: string;
  /** How long a write waits for another connection's lock before failing (ms). Default 5000. */
  readonly busyTimeoutMs?: number;
  /** How often expired documents are deleted (ms); 0 turns the timer off. Default 60000. */
  readonly sweepIntervalMs?: number;
  /**
   * WAL size (pages) at which the WAL is checkpointed into the main file (`checkpoint` says
   * where). A checkpoint takes about 2 ms per 1,000 pages here; inline, a smaller threshold
   * means shorter, more frequent stalls of the caller's event loop (at 200 the p99 of
   * authorize-invocation at 1,000 req/s dropped by about 1 ms against SQLite's default of
   * 1,000). Default 200.
   */
  readonly walAutocheckpointPages?: number;
  /**
   * Where that checkpoint runs: "thread" (default), on a worker thread with its own connection,
   * asked each time the writes since the last request reach the threshold (estimated: 8 pages
   * per transaction and one per row written, measured for decision records), so the event loop
   * never waits for its page copies and `fsync`s; the writing connection still checkpoints
   * inline at 8× the threshold should the thread fall behind, and at the threshold when the
   * thread fails. "inline": SQLite's own automatic checkpoint inside the commit (decision 2831).
   */
  readonly checkpoint?: "thread" | "inline";
  /** Clock for expiry (ms since the epoch); tests of other modules may pin it. */
  readonly now?: () => number;
}

const SCHEMA_VERSION = 4;

/**
 * WAL pages of a transaction, estimated as 8 plus one per row (measured with decision records:
 * 9.4 pages for one row, 31 for 10, 68 for 50, 132 for 200): counts toward the thread's checkpoints.
 */
const PAGES_PER_TRANSACTION = 8;
/** With the checkpoint on its thread, the writing connection checkpoints itself only past this many thresholds. */
const THREAD_BACKSTOP = 8;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS store_meta (
  key TEXT PRIMARY KEY NOT NULL,
  value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS documents (
  collection TEXT NOT NULL,
  id TEXT NOT NULL,
  value TEXT NOT NULL,
  expires_at INTEGER,
  PRIMARY KEY (collection, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS documents_expiry ON documents (expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS logs (
  log TEXT NOT NULL,
  seq INTEGER NOT NULL,
  value TEXT NOT NULL,
  PRIMARY KEY (log, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS counters (
  name TEXT NOT NULL,
  key TEXT NOT NULL,
  value INTEGER NOT NULL,
  PRIMARY KEY (name, key)
) WITHOUT ROWID;
`;

/** The log columns migration 2 adds, in LOG_INDEX_FIELDS order. */
const INDEX_COLUMNS = LOG_INDEX_FIELDS.join(", ");

/**
 * Version 2: the indexed fields of every log entry as columns (filled from the stored JSON
 * for entries written before), each with an index ordered by (time_ms, seq), so a filtered
 * query reads only matching entries.
 */
function addLogIndexes(db: DatabaseSync): void {
  db.exec("ALTER TABLE logs ADD COLUMN time_ms INTEGER NOT NULL DEFAULT 0");
  for (const field of LOG_INDEX_FIELDS) db.exec(`ALTER TABLE logs ADD COLUMN ${field} TEXT`);
  const update = db.prepare(
    `UPDATE logs SET time_ms = :time, ${LOG_INDEX_FIELDS.map((f) => `${f} = :${f}`).join(", ")}
     WHERE log = :log AND seq = :seq`,
  );
  eachLogEntry(db, (log, seq, index) => update.run({ log, seq, time: index.time, ...index.fields }));
  db.exec("CREATE INDEX logs_by_time ON logs (log, time_ms, seq)");
  for (const field of LOG_INDEX_FIELDS) {
    db.exec(`CREATE INDEX logs_by_${field} ON logs (log, ${field}, time_ms, seq) WHERE ${field} IS NOT NULL`);
  }
}

/**
 * Version 3: each entry's top-level `id` as a column, unique per log (decision 2751). Entries
 * written before keep their first copy's id (filled in seq order; a later copy's update is
 * ignored by the unique index and keeps NULL).
 */
function addLogRecordIds(db: DatabaseSync): void {
  db.exec("ALTER TABLE logs ADD COLUMN record_id TEXT");
  db.exec("CREATE UNIQUE INDEX logs_by_record_id ON logs (log, record_id) WHERE record_id IS NOT NULL");
  const update = db.prepare("UPDATE OR IGNORE logs SET record_id = :id WHERE log = :log AND seq = :seq");
  eachLogEntry(db, (log, seq, index) => {
    if (index.id !== null) update.run({ log, seq, id: index.id });
  });
}

/** Every log entry in (log, seq) order, 1,000 per read, with its derived index values. */
function eachLogEntry(
  db: DatabaseSync,
  visit: (log: string, seq: number, index: LogIndexValues) => void,
): void {
  const select = db.prepare(
    "SELECT log, seq, value FROM logs WHERE (log, seq) > (:log, :seq) ORDER BY log, seq LIMIT 1000",
  );
  let position: { log: string; seq: number } = { log: "", seq: 0 };
  for (;;) {
    const rows = select.all(position);
    for (const row of rows) {
      const log = asText(row.log, "log");
      const seq = asNumber(row.seq, "seq");
      visit(log, seq, logIndexValues(parseEntry(asText(row.value, "value"))));
      position = { log, seq };
    }
    if (rows.length < 1000) break;
  }
}

function parseEntry(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** Schema changes after version 1, applied in order to a file that has not seen them. */
/**
 * Version 4: `documents` as a rowid table (decision 3201), its key a separate unique index.
 * In a `WITHOUT ROWID` table every B-tree cell, interior ones included, holds the whole row,
 * and a row over about 1 KB (a signed policy, an idempotency record with its result) spills to
 * an overflow page that each key comparison reads past the page cache; the key's own index
 * holds only keys. Same columns, same key, same SQL: the rows are copied over once.
 */
function documentsWithRowids(db: DatabaseSync): void {
  db.exec(`
    CREATE TABLE documents_by_rowid (
      collection TEXT NOT NULL,
      id TEXT NOT NULL,
      value TEXT NOT NULL,
      expires_at INTEGER,
      PRIMARY KEY (collection, id)
    );
    INSERT INTO documents_by_rowid (collection, id, value, expires_at)
      SELECT collection, id, value, expires_at FROM documents ORDER BY collection, id;
    DROP TABLE documents;
    ALTER TABLE documents_by_rowid RENAME TO documents;
    CREATE INDEX documents_expiry ON documents (expires_at) WHERE expires_at IS NOT NULL;
  `);
}

const MIGRATIONS: ReadonlyArray<{ readonly version: number; readonly apply: (db: DatabaseSync) => void }> = [
  { version: 2, apply: addLogIndexes },
  { version: 3, apply: addLogRecordIds },
  { version: 4, apply: documentsWithRowids },
];

/**
 * Which index a query reads, most selective first (a subject belongs to one partner, a
 * reason is rarer than a decision). The other conditions are written `+column = …` so
 * SQLite does not pick a wider index for them.
 */
const DRIVER_ORDER: readonly LogIndexField[] = [
  "subject_id",
  "capability_id",
  "reason",
  "partner_id",
  "decision",
];

const PUT = `INSERT INTO documents (collection, id, value, expires_at) VALUES (:collection, :id, :value, :expires)
  ON CONFLICT (collection, id) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at`;
const DELETE = "DELETE FROM documents WHERE collection = :collection AND id = :id RETURNING expires_at";
/**
 * The write lock is taken before MAX(seq) is read, so concurrent writers never share a seq. An
 * entry whose id the log holds already is not written (no row returned: EXISTING_SEQ has its seq).
 */
const APPEND = `INSERT INTO logs (log, seq, value, time_ms, ${INDEX_COLUMNS}, record_id)
  SELECT :log, COALESCE(MAX(seq), 0) + 1, :value, :time, ${LOG_INDEX_FIELDS.map((f) => `:${f}`).join(", ")}, :id
  FROM logs WHERE log = :log
  ON CONFLICT DO NOTHING
  RETURNING seq`;
const EXISTING_SEQ = "SELECT seq FROM logs WHERE log = :log AND record_id = :id";
const INCREMENT = `INSERT INTO counters (name, key, value) VALUES (:name, :key, :by)
  ON CONFLICT (name, key) DO UPDATE SET value = value + excluded.value
  RETURNING value`;

const LIVE = "(expires_at IS NULL OR expires_at > :now)";
/** The row is live and its top-level field (checkMatch: a plain name) is the string :equals. */
const MATCHES = `collection = :collection AND id = :id AND ${LIVE}
  AND json_type(value, :path) = 'text' AND json_extract(value, :path) = :equals`;

/** SQLITE_BUSY and SQLITE_LOCKED: another connection holds the lock longer than busy_timeout. */
const BUSY_CODES = new Set([5, 6]);

/** How many expired rows one sweep statement deletes, so a sweep never holds the lock for long. */
const SWEEP_BATCH = 500;

function checkOptions(options: SqliteStoreOptions): Required<Omit<SqliteStoreOptions, "now">> {
  if (typeof options?.path !== "string" || options.path.length === 0) {
    throw new StoreInvalidArgumentError("SQLite store needs a file path.");
  }
  const busyTimeoutMs = options.busyTimeoutMs ?? 5000;
  const sweepIntervalMs = options.sweepIntervalMs ?? 60_000;
  const walAutocheckpointPages = positiveIntegerOption(
    options.walAutocheckpointPages,
    200,
    "walAutocheckpointPages",
    invalidArgument,
  );
  if (!Number.isSafeInteger(busyTimeoutMs) || busyTimeoutMs < 0) {
    throw new StoreInvalidArgumentError("busyTimeoutMs must be a non-negative integer.");
  }
  if (!Number.isSafeInteger(sweepIntervalMs) || sweepIntervalMs < 0) {
    throw new StoreInvalidArgumentError("sweepIntervalMs must be a non-negative integer.");
  }
  const checkpoint = options.checkpoint ?? "thread";
  if (checkpoint !== "thread" && checkpoint !== "inline") {
    throw new StoreInvalidArgumentError('checkpoint must be "thread" or "inline".');
  }
  return { path: options.path, busyTimeoutMs, sweepIntervalMs, walAutocheckpointPages, checkpoint };
}

/** The named parameters of an entry's time, index and id columns. */
function indexParams(index: LogIndexValues): Record<string, SQLInputValue> {
  return { time: index.time, ...index.fields, id: index.id };
}

function toStoreError(error: unknown, what: string): StoreError {
  if (error instanceof StoreError) return error;
  const errcode = (error as { errcode?: unknown } | null)?.errcode;
  if (typeof errcode === "number" && BUSY_CODES.has(errcode & 0xff)) {
    return new StoreUnavailableError(`SQLite database is locked (${what}).`, { cause: error });
  }
  return new StoreError(`SQLite ${what} failed.`, { cause: error });
}

function asNumber(value: unknown, what: string): number {
  if (typeof value === "number") return value;
  if (typeof value === "bigint" && value <= BigInt(Number.MAX_SAFE_INTEGER)) return Number(value);
  throw new StoreError(`SQLite returned a non-numeric ${what}.`);
}

function asText(value: unknown, what: string): string {
  if (typeof value === "string") return value;
  throw new StoreError(`SQLite returned a non-text ${what}.`);
}

export class SqliteStore implements Store {
  readonly backend = "sqlite" as const;
  readonly path: string;
  readonly #db: DatabaseSync;
  readonly #now: () => number;
  readonly #statements = new Map<string, StatementSync>();
  #sweepTimer: NodeJS.Timeout | undefined;
  #checkpointer: Checkpointer | undefined;
  #closed = false;

  constructor(options: SqliteStoreOptions) {
    const checked = checkOptions(options);
    this.path = checked.path;
    this.#now = options.now ?? Date.now;
    try {
      this.#db = new DatabaseSync(checked.path, { timeout: checked.busyTimeoutMs });
    } catch (error) {
      throw toStoreError(error, "open");
    }
    try {
      this.#db.exec(`PRAGMA busy_timeout = ${checked.busyTimeoutMs}`);
      const mode = this.#db.prepare("PRAGMA journal_mode = WAL").get();
      if (mode?.journal_mode !== "wal") throw new StoreError("SQLite could not switch to WAL mode.");
      this.#db.exec("PRAGMA synchronous = NORMAL");
      const threaded = checked.checkpoint === "thread";
      const inlinePages = checked.walAutocheckpointPages * (threaded ? THREAD_BACKSTOP : 1);
      this.#db.exec(`PRAGMA wal_autocheckpoint = ${inlinePages}`);
      this.#db.exec("PRAGMA foreign_keys = ON");
      // A statement inside a transaction of several (appendAcross, writeAll) keeps a copy of each
      // page it changes (its statement journal); past 64 KiB SQLite spilled it to a temporary
      // file: page-sized writes that nothing reads unless a statement fails (decision 3161).
      // Temporary files stay in memory instead.
      this.#db.exec("PRAGMA temp_store = MEMORY");
      this.#migrate();
      this.sweepExpired();
    } catch (error) {
      this.#db.close();
      throw toStoreError(error, "open");
    }
    if (checked.checkpoint === "thread") {
      this.#checkpointer = createCheckpointer({
        path: checked.path,
        busyTimeoutMs: checked.busyTimeoutMs,
        everyPages: checked.walAutocheckpointPages,
        onFailure: () => {
          try {
            if (!this.#closed) this.#db.exec(`PRAGMA wal_autocheckpoint = ${checked.walAutocheckpointPages}`);
          } catch {
            // The backstop threshold stays: the WAL is still checkpointed, only later.
          }
        },
      });
    }
    if (checked.sweepIntervalMs > 0) {
      this.#sweepTimer = setInterval(() => {
        try {
          this.sweepExpired();
        } catch {
          // A busy database skips one sweep; reads already treat expired rows as absent.
        }
      }, checked.sweepIntervalMs);
      this.#sweepTimer.unref();
    }
  }

  #migrate(): void {
    // BEGIN IMMEDIATE takes the write lock first, so two processes opening a new file
    // cannot both try to create the schema.
    this.#db.exec("BEGIN IMMEDIATE");
    try {
      this.#db.exec(SCHEMA);
      const row = this.#db.prepare("SELECT value FROM store_meta WHERE key = 'schema_version'").get();
      // A new file has the version 1 tables (SCHEMA) and no version row yet.
      const version = row === undefined ? 1 : Number(row.value);
      if (version > SCHEMA_VERSION) {
        throw new StoreError(`SQLite file has schema version ${String(row?.value)}, newer than this build.`);
      }
      for (const migration of MIGRATIONS) if (migration.version > version) migration.apply(this.#db);
      this.#db
        .prepare(
          "INSERT INTO store_meta (key, value) VALUES ('schema_version', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .run(String(SCHEMA_VERSION));
      this.#db.exec("COMMIT");
    } catch (error) {
      this.#db.exec("ROLLBACK");
      throw error;
    }
  }

  /** Runs one operation on the open database, turning driver failures into store errors. */
  #run<R>(what: string, operation: () => R): Promise<R> {
    if (this.#closed) return Promise.reject(new StoreClosedError("sqlite"));
    try {
      return Promise.resolve(operation());
    } catch (error) {
      return Promise.reject(toStoreError(error, what));
    }
  }

  /** Checkpoints asked of and completed by the checkpoint thread (zeros when checkpoints are inline). */
  checkpointStats(): CheckpointerStats {
    return this.#checkpointer?.stats() ?? { requested: 0, completed: 0 };
  }

  /** A write of about `rows` rows: run, then counted toward the next background checkpoint. */
  #write<R>(what: string, rows: number, operation: () => R): Promise<R> {
    const done = this.#run(what, operation);
    this.#checkpointer?.wrote(PAGES_PER_TRANSACTION + rows);
    return done;
  }

  #statement(sql: string): StatementSync {
    let statement = this.#statements.get(sql);
    if (statement === undefined) {
      statement = this.#db.prepare(sql);
      this.#statements.set(sql, statement);
    }
    return statement;
  }

  /** Deletes expired documents in small batches; returns how many were removed. */
  sweepExpired(): number {
    if (this.#closed) throw new StoreClosedError("sqlite");
    const statement = this.#statement(
      `DELETE FROM documents WHERE (collection, id) IN (
         SELECT collection, id FROM documents
         WHERE expires_at IS NOT NULL AND expires_at <= :now LIMIT ${SWEEP_BATCH})`,
    );
    let removed = 0;
    for (;;) {
      const changes = asNumber(statement.run({ now: this.#now() }).changes, "change count");
      removed += changes;
      if (changes < SWEEP_BATCH) return removed;
    }
  }

  get<T>(collection: string, id: string): Promise<T | undefined> {
    return this.#run("get", () => {
      const row = this.#statement(
        `SELECT value FROM documents WHERE collection = :collection AND id = :id AND ${LIVE}`,
      ).get({ collection: checkName("collection", collection), id: checkId("id", id), now: this.#now() });
      return row === undefined ? undefined : decodeValue<T>(asText(row.value, "value"));
    });
  }

  put<T>(collection: string, id: string, value: T, options?: WriteOptions): Promise<void> {
    return this.#write("put", 1, () => {
      this.#statement(PUT).run(this.#writeParams(collection, id, value, options));
    });
  }

  create<T>(collection: string, id: string, value: T, options?: WriteOptions): Promise<boolean> {
    return this.#write("create", 1, () => {
      const params = this.#writeParams(collection, id, value, options);
      // One statement: the expiry check and the write happen under the same write lock.
      const result = this.#statement(
        `INSERT INTO documents (collection, id, value, expires_at) VALUES (:collection, :id, :value, :expires)
         ON CONFLICT (collection, id) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at
         WHERE documents.expires_at IS NOT NULL AND documents.expires_at <= :now`,
      ).run({ ...params, now: this.#now() });
      return asNumber(result.changes, "change count") === 1;
    });
  }

  putIfMatch<T>(
    collection: string,
    id: string,
    value: T,
    match: FieldMatch,
    options?: WriteOptions,
  ): Promise<boolean> {
    return this.#write("putIfMatch", 1, () => {
      const params = { ...this.#writeParams(collection, id, value, options), ...this.#matchParams(match) };
      // One statement: the comparison and the write happen under the same write lock.
      const result = this.#statement(
        `UPDATE documents SET value = :value, expires_at = :expires WHERE ${MATCHES}`,
      ).run(params);
      return asNumber(result.changes, "change count") === 1;
    });
  }

  deleteIfMatch(collection: string, id: string, match: FieldMatch): Promise<boolean> {
    return this.#write("deleteIfMatch", 1, () => {
      const result = this.#statement(`DELETE FROM documents WHERE ${MATCHES}`).run({
        collection: checkName("collection", collection),
        id: checkId("id", id),
        ...this.#matchParams(match),
      });
      return asNumber(result.changes, "change count") === 1;
    });
  }

  #matchParams(match: FieldMatch) {
    const { field, equals } = checkMatch(match);
    return { path: `$.${field}`, equals, now: this.#now() } satisfies Record<string, SQLInputValue>;
  }

  #writeParams(collection: string, id: string, value: unknown, options: WriteOptions | undefined) {
    const ttl = checkTtl(options);
    return {
      collection: checkName("collection", collection),
      id: checkId("id", id),
      value: encodeValue(value),
      expires: ttl === undefined ? null : this.#now() + ttl,
    } satisfies Record<string, SQLInputValue>;
  }

  delete(collection: string, id: string): Promise<boolean> {
    return this.#write("delete", 1, () => {
      const row = this.#statement(DELETE).get({
        collection: checkName("collection", collection),
        id: checkId("id", id),
      });
      if (row === undefined) return false;
      // An expired row was already absent to readers: removing it is housekeeping, not a delete.
      return row.expires_at === null || asNumber(row.expires_at, "expiry") > this.#now();
    });
  }

  list<T>(collection: string, options?: ListOptions): Promise<Page<T>> {
    return this.#run("list", () => {
      const name = checkName("collection", collection);
      const range = checkListOptions(options);
      const conditions = ["collection = :collection", LIVE];
      const params: Record<string, SQLInputValue> = {
        collection: name,
        now: this.#now(),
        take: range.limit + 1,
      };
      if (range.lower !== undefined) {
        conditions.push(range.lowerExclusive ? "id > :lower" : "id >= :lower");
        params.lower = range.lower;
      }
      if (range.upper !== undefined) {
        conditions.push("id < :upper");
        params.upper = range.upper;
      }
      const rows = this.#statement(
        `SELECT id, value FROM documents WHERE ${conditions.join(" AND ")} ORDER BY id LIMIT :take`,
      ).all(params);
      const items: StoredItem<T>[] = rows
        .slice(0, range.limit)
        .map((row) => ({ id: asText(row.id, "id"), value: decodeValue<T>(asText(row.value, "value")) }));
      const last = items.at(-1);
      return rows.length > range.limit && last !== undefined ? { items, next: last.id } : { items };
    });
  }

  count(collection: string): Promise<number> {
    return this.#run("count", () => {
      const row = this.#statement(
        `SELECT COUNT(*) AS n FROM documents WHERE collection = :collection AND ${LIVE}`,
      ).get({ collection: checkName("collection", collection), now: this.#now() });
      return asNumber(row?.n, "count");
    });
  }

  append<T>(log: string, value: T): Promise<number> {
    return this.#write("append", 1, () => {
      const name = checkName("log", log);
      const text = encodeValue(value);
      // The write lock is taken before MAX(seq) is read, so concurrent writers (other
      // connections, other processes) cannot both get the same seq.
      return this.#appendOne(name, text, logIndexValues(value));
    });
  }

  /** One entry (APPEND), or the seq of the entry with its id that the log holds already. */
  #appendOne(log: string, text: string, index: LogIndexValues): number {
    const row =
      this.#statement(APPEND).get({ log, value: text, ...indexParams(index) }) ??
      (index.id === null ? undefined : this.#statement(EXISTING_SEQ).get({ log, id: index.id }));
    return asNumber(row?.seq, "seq");
  }

  appendMany<T>(log: string, values: readonly T[]): Promise<number[]> {
    // An empty batch still has its log name checked.
    if (values.length === 0) {
      return this.#run("append", () => {
        checkName("log", log);
        return [];
      });
    }
    return this.appendAcross(values.map((value) => ({ log, value })));
  }

  appendAcross<T>(entries: readonly LogAppend<T>[]): Promise<number[]> {
    return this.#write("append", entries.length, () => {
      const checked = entries.map(({ log, value }) => ({
        log: checkName("log", log),
        text: encodeValue(value),
        index: logIndexValues(value),
      }));
      if (checked.length === 0) return [];
      // IMMEDIATE takes the write lock before MAX(seq) is read (as append's single statement does).
      this.#db.exec("BEGIN IMMEDIATE");
      try {
        // Each entry by APPEND: an id the log holds already keeps its stored seq (decision 2751).
        const seqs = checked.map(({ log, text, index }) => this.#appendOne(log, text, index));
        this.#db.exec("COMMIT");
        return seqs;
      } catch (error) {
        if (this.#db.isTransaction) this.#db.exec("ROLLBACK");
        throw error;
      }
    });
  }

  logIdsHeld(log: string, ids: readonly string[]): Promise<string[]> {
    return this.#run("logIdsHeld", () => {
      const name = checkName("log", log);
      const wanted = checkIdLookup(ids);
      if (wanted.length === 0) return [];
      return this.#statement(
        "SELECT record_id FROM logs WHERE log = :log AND record_id IN (SELECT value FROM json_each(:ids))",
      )
        .all({ log: name, ids: JSON.stringify(wanted) })
        .map((row) => asText(row.record_id, "record id"));
    });
  }

  readLog<T>(log: string, options?: ReadLogOptions): Promise<LogEntry<T>[]> {
    return this.#run("readLog", () => {
      const rows = this.#statement(
        "SELECT seq, value FROM logs WHERE log = :log AND seq > :after ORDER BY seq LIMIT :limit",
      ).all({
        log: checkName("log", log),
        after: checkAfterSeq(options),
        limit: checkLimit(options?.limit),
      });
      return rows.map((row) => ({
        seq: asNumber(row.seq, "seq"),
        value: decodeValue<T>(asText(row.value, "value")),
      }));
    });
  }

  queryLog<T>(log: string, query?: LogQuery): Promise<LogQueryPage<T>> {
    return this.#run("queryLog", () => {
      const checked = checkLogQuery(query);
      const driver = DRIVER_ORDER.find((field) => checked.indexed.some(([f]) => f === field));
      const params: Record<string, SQLInputValue> = {
        log: checkName("log", log),
        since: checked.since,
        until: checked.until,
        afterTime: checked.afterTime,
        afterSeq: checked.afterSeq,
      };
      const conditions = [
        "log = :log",
        "time_ms >= :since",
        "time_ms <= :until",
        "(time_ms, seq) > (:afterTime, :afterSeq)",
      ];
      checked.indexed.forEach(([field, wanted], i) => {
        conditions.push(`${field === driver ? "" : "+"}${field} = :i${i}`);
        params[`i${i}`] = wanted;
      });
      const residual = checked.other.map(([field, wanted], i) => {
        params[`p${i}`] = `$.${field}`;
        params[`o${i}`] = wanted;
        return `json_extract(value, :p${i}) = :o${i}`;
      });
      const matched = residual.length === 0 ? "1" : residual.join(" AND ");
      // Conditions no index answers are checked on at most LOG_QUERY_BUDGET candidates, read
      // lazily in index order: the walk stops at limit+1 matches.
      params.take = residual.length === 0 ? checked.limit + 1 : LOG_QUERY_BUDGET;
      const index = driver === undefined ? "logs_by_time" : `logs_by_${driver}`;
      const rows = this.#statement(
        `SELECT seq, time_ms, CASE WHEN ${matched} THEN value END AS value FROM logs INDEXED BY ${index}
         WHERE ${conditions.join(" AND ")} ORDER BY time_ms, seq LIMIT :take`,
      ).iterate(params);
      const candidates: QueryMatch[] = [];
      let examined = 0;
      let last: { seq: number; time: number } | undefined;
      for (const row of rows) {
        examined++;
        last = { seq: asNumber(row.seq, "seq"), time: asNumber(row.time_ms, "time") };
        if (row.value === null) continue;
        candidates.push({ ...last, text: asText(row.value, "value") });
        if (candidates.length > checked.limit) break;
      }
      const exhausted = residual.length > 0 && examined >= LOG_QUERY_BUDGET;
      return logQueryPage<T>(candidates, checked.limit, exhausted ? last : undefined);
    });
  }

  trimLog(log: string, rule: LogTrim): Promise<number> {
    return this.#write("trimLog", 1, () => {
      const name = checkName("log", log);
      const trim = checkLogTrim(rule);
      this.#db.exec("BEGIN IMMEDIATE");
      try {
        // MAX alone (not beside MIN) is one index lookup; the oldest come from the key order.
        const last = this.#statement("SELECT MAX(seq) AS last FROM logs WHERE log = :log").get({ log: name });
        const oldest = this.#statement(
          "SELECT seq, time_ms FROM logs WHERE log = :log ORDER BY seq LIMIT :max",
        ).all({ log: name, max: trim.max });
        const first = oldest[0];
        if (first === undefined) {
          this.#db.exec("COMMIT");
          return 0;
        }
        const total = asNumber(last?.last, "seq") - asNumber(first.seq, "seq") + 1;
        const n = trimCount(
          oldest.map((row) => asNumber(row.time_ms, "time")),
          total,
          trim,
        );
        const removed =
          n === 0
            ? 0
            : asNumber(
                this.#statement("DELETE FROM logs WHERE log = :log AND seq <= :last").run({
                  log: name,
                  last: asNumber(oldest[n - 1]?.seq, "seq"),
                }).changes,
                "change count",
              );
        this.#db.exec("COMMIT");
        return removed;
      } catch (error) {
        if (this.#db.isTransaction) this.#db.exec("ROLLBACK");
        throw error;
      }
    });
  }

  logLength(log: string): Promise<number> {
    return this.#run("logLength", () => {
      const row = this.#statement("SELECT COALESCE(MAX(seq), 0) AS n FROM logs WHERE log = :log").get({
        log: checkName("log", log),
      });
      return asNumber(row?.n, "log length");
    });
  }

  increment(counters: string, key: string, by?: number): Promise<number> {
    return this.#write("increment", 1, () => {
      const row = this.#statement(INCREMENT).get({
        name: checkName("counters", counters),
        key: checkId("counter key", key),
        by: checkIncrement(by),
      });
      return asNumber(row?.value, "counter");
    });
  }

  readCounters(counters: string, prefix?: string): Promise<Record<string, number>> {
    return this.#run("readCounters", () => {
      const name = checkName("counters", counters);
      const range = checkListOptions(prefix === undefined ? undefined : { prefix });
      const conditions = ["name = :name"];
      const params: Record<string, SQLInputValue> = { name };
      if (range.lower !== undefined) {
        conditions.push("key >= :lower");
        params.lower = range.lower;
      }
      if (range.upper !== undefined) {
        conditions.push("key < :upper");
        params.upper = range.upper;
      }
      const rows = this.#statement(
        `SELECT key, value FROM counters WHERE ${conditions.join(" AND ")} ORDER BY key`,
      ).all(params);
      const result: Record<string, number> = {};
      for (const row of rows) result[asText(row.key, "counter key")] = asNumber(row.value, "counter");
      return result;
    });
  }

  deleteCounters(counters: string, prefix: string, before: string, max?: number): Promise<number> {
    return this.#write("deleteCounters", 1, () => {
      const name = checkName("counters", counters);
      const range = checkCounterRange(prefix, before, max);
      const result = this.#statement(
        `DELETE FROM counters WHERE name = :name AND key IN (
           SELECT key FROM counters WHERE name = :name AND key >= :lower AND key < :upper ORDER BY key LIMIT :max)`,
      ).run({ name, lower: range.lower ?? "", upper: range.upper, max: range.max });
      return asNumber(result.changes, "change count");
    });
  }

  writeAll(writes: readonly StoreWrite[]): Promise<void> {
    return this.#write("writeAll", writes.length, () => {
      const checked = checkWrites(writes);
      if (checked.length === 0) return;
      this.#db.exec("BEGIN IMMEDIATE");
      try {
        for (const write of checked) this.#apply(write);
        this.#db.exec("COMMIT");
      } catch (error) {
        if (this.#db.isTransaction) this.#db.exec("ROLLBACK");
        throw error;
      }
    });
  }

  /** One write of a batch, inside its transaction. */
  #apply(write: CheckedWrite): void {
    switch (write.op) {
      case "put":
        this.#statement(PUT).run({
          collection: write.collection,
          id: write.id,
          value: write.text,
          expires: write.ttlMs === undefined ? null : this.#now() + write.ttlMs,
        });
        return;
      case "delete":
        this.#statement(DELETE).get({ collection: write.collection, id: write.id });
        return;
      case "append":
        this.#appendOne(write.log, write.text, write.index);
        return;
      case "increment":
        this.#statement(INCREMENT).get({ name: write.counters, key: write.key, by: write.by });
        return;
    }
  }

  async health(): Promise<StoreHealth> {
    if (this.#closed) return { backend: "sqlite", ok: false, detail: "sqlite store is closed" };
    try {
      this.#statement("SELECT COUNT(*) AS n FROM store_meta").get();
      return { backend: "sqlite", ok: true, detail: `sqlite ok (wal) at ${this.path}` };
    } catch (error) {
      const reason = toStoreError(error, "health check").message;
      return { backend: "sqlite", ok: false, detail: `${reason} (${this.path})` };
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#sweepTimer !== undefined) clearInterval(this.#sweepTimer);
    await this.#checkpointer?.close();
    this.#statements.clear();
    try {
      // Folds the WAL back into the main file so a copied file is complete.
      this.#db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
    } catch {
      // Another connection may still be reading; the WAL stays valid and is replayed on open.
    }
    this.#db.close();
  }
}
