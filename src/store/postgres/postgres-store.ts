/**
 * The relational backend: PostgreSQL through a bounded pg pool (connection.ts), schema from
 * numbered migrations applied at open (migrations.ts). Every method is one statement, so each
 * is atomic on its own: `appendMany` allocates its seqs and inserts its entries in one
 * statement (all or none), `create` decides "absent or expired" and writes under the row's
 * lock. Expiry uses the server's clock, so replicas agree on it.
 */
import {
  checkAfterSeq,
  checkId,
  checkIncrement,
  checkLimit,
  checkListOptions,
  checkMatch,
  checkName,
  checkTtl,
  compareCodePoints,
  decodeValue,
  encodeValue,
  type ListRange,
  returnedInteger,
  StoreError,
  StoreInvalidArgumentError,
} from "../errors.ts";
import {
  checkCounterRange,
  checkIdLookup,
  checkLogQuery,
  checkLogTrim,
  LOG_INDEX_FIELDS,
  LOG_QUERY_BUDGET,
  type LogIndexValues,
  logIndexValues,
  logQueryPage,
  type QueryMatch,
  trimCount,
} from "../log-query.ts";
import type {
  FieldMatch,
  ListOptions,
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
import { PostgresConnection, type PostgresConnectionOptions, positiveInt } from "./connection.ts";
import { type MigrationResult, migrate } from "./migrations.ts";
import { ReadBatcher } from "./read-batcher.ts";

export interface PostgresStoreOptions extends PostgresConnectionOptions {
  /** `postgres://[user[:password]@]host[:port]/database[?sslmode=…]`. */
  readonly url: string;
  /** How long health() waits for its query, ms. Default 1000. */
  readonly healthTimeoutMs?: number;
  /** How often expired documents are deleted, ms; 0 turns the timer off. Default 60000. */
  readonly sweepIntervalMs?: number;
  /** Longest wait for another replica's migration plus this one's, ms. Default 300000. */
  readonly migrationTimeoutMs?: number;
}

/** The server's clock in ms since the epoch. */
const NOW_MS = "(extract(epoch from clock_timestamp()) * 1000)::bigint";
const LIVE = `(expires_at IS NULL OR expires_at > ${NOW_MS})`;
/** How many expired rows one sweep statement deletes, so a sweep never holds many row locks. */
const SWEEP_BATCH = 500;

/** The live row ($1, $2) whose top-level field (parameter `field`) is the string in `equals`. */
const matches = (field: number, equals: number): string => `collection = $1 AND id = $2 AND ${LIVE}
  AND jsonb_typeof(value::jsonb -> $${field}::text) = 'string' AND value::jsonb ->> $${field}::text = $${equals}`;

const WRITE = `
INSERT INTO authority_documents (collection, id, value, expires_at)
VALUES ($1, $2, $3, CASE WHEN $4::bigint IS NULL THEN NULL ELSE ${NOW_MS} + $4::bigint END)
ON CONFLICT (collection, id) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at`;

/**
 * Several documents in one statement (a batch of puts to distinct documents): atomic as any
 * statement, one round trip instead of BEGIN, one INSERT per document and COMMIT.
 */
const WRITE_MANY = `
INSERT INTO authority_documents (collection, id, value, expires_at)
SELECT w.collection, w.id, w.value, CASE WHEN w.ttl IS NULL THEN NULL ELSE ${NOW_MS} + w.ttl END
FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) AS w(collection, id, value, ttl)
ON CONFLICT (collection, id) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at`;

type CheckedPut = Extract<CheckedWrite, { op: "put" }>;

/**
 * The batch's puts in key order (so concurrent batches lock rows in one order) when the batch is
 * puts only, each to another document; undefined otherwise (it then runs as a transaction).
 */
function distinctPuts(writes: readonly CheckedWrite[]): CheckedPut[] | undefined {
  const puts = writes.filter((write): write is CheckedPut => write.op === "put");
  if (puts.length !== writes.length) return undefined;
  const keys = new Set(puts.map((put) => documentKey(put.collection, put.id)));
  if (keys.size !== puts.length) return undefined;
  return puts.sort((a, b) =>
    compareCodePoints(documentKey(a.collection, a.id), documentKey(b.collection, b.id)),
  );
}

/**
 * The entries whose id the log does not hold yet (ids distinct within the call: appendMany),
 * under consecutive seqs from the head row, in order; returns the written ones' seqs and ids.
 * Two calls racing with one new id: the second fails on the unique index (23505) and is run
 * again (appendMany), then finds the id.
 */
const APPEND_MANY = `
WITH fresh AS (
  SELECT entry.*, row_number() OVER (ORDER BY entry.n) AS k
  FROM unnest($2::text[], $3::bigint[], $4::text[], ${LOG_INDEX_FIELDS.map((_, i) => `$${i + 5}::text[]`).join(", ")})
    WITH ORDINALITY AS entry(value, time_ms, record_id, ${LOG_INDEX_FIELDS.join(", ")}, n)
  WHERE entry.record_id IS NULL OR NOT EXISTS (
    SELECT 1 FROM authority_logs AS l WHERE l.log = $1 AND l.record_id = entry.record_id)
),
counted AS (SELECT count(*) AS c FROM fresh),
head AS (
  INSERT INTO authority_log_heads (log, seq) SELECT $1, c FROM counted WHERE c > 0
  ON CONFLICT (log) DO UPDATE SET seq = authority_log_heads.seq + excluded.seq
  RETURNING seq
)
INSERT INTO authority_logs (log, seq, value, time_ms, record_id, ${LOG_INDEX_FIELDS.join(", ")})
SELECT $1, head.seq - counted.c + fresh.k, fresh.value, fresh.time_ms, fresh.record_id, ${LOG_INDEX_FIELDS.map((f) => `fresh.${f}`).join(", ")}
FROM head, counted, fresh
RETURNING seq, record_id`;

const EXISTING_SEQS =
  "SELECT record_id, seq FROM authority_logs WHERE log = $1 AND record_id = ANY($2::text[])";

/** unique_violation: an id written by a racing append between this statement's check and insert. */
const UNIQUE_VIOLATION = "23505";
/** Runs of APPEND_MANY that can each lose a race before the call fails. */
const APPEND_ATTEMPTS = 3;

/** APPEND_MANY's parameters for entries whose ids are distinct. */
function appendParams(log: string, texts: readonly string[], indexes: readonly LogIndexValues[]): unknown[] {
  return [
    log,
    texts,
    indexes.map((index) => index.time),
    indexes.map((index) => index.id),
    ...LOG_INDEX_FIELDS.map((field) => indexes.map((index) => index.fields[field])),
  ];
}

const lostRace = (error: unknown): boolean =>
  (error as { cause?: { code?: unknown } } | null)?.cause?.code === UNIQUE_VIOLATION;

/** The live documents of (collection, id) pairs: one primary-key probe per pair. */
const GET_MANY = `
SELECT d.collection, d.id, d.value
FROM unnest($1::text[], $2::text[]) AS k(collection, id)
JOIN authority_documents AS d ON d.collection = k.collection AND d.id = k.id
WHERE ${LIVE}`;
/** Most documents one GET_MANY reads. */
const GET_BATCH = 500;

/** A document's key in the read batcher (names and ids never hold U+0000: checkName, checkId). */
const documentKey = (collection: string, id: string): string => `${collection}\u0000${id}`;
const splitDocumentKey = (key: string): [string, string] => {
  const at = key.indexOf("\u0000");
  return [key.slice(0, at), key.slice(at + 1)];
};

const INCREMENT = `
INSERT INTO authority_counters (name, key, value) VALUES ($1, $2, $3)
ON CONFLICT (name, key) DO UPDATE SET value = authority_counters.value + excluded.value
RETURNING value`;

/** The statement and parameters of one write of a batch. */
function writeStatement(write: CheckedWrite): [string, unknown[]] {
  switch (write.op) {
    case "put":
      return [WRITE, [write.collection, write.id, write.text, write.ttlMs ?? null]];
    case "delete":
      return [
        "DELETE FROM authority_documents WHERE collection = $1 AND id = $2",
        [write.collection, write.id],
      ];
    case "append":
      return [APPEND_MANY, appendParams(write.log, [write.text], [write.index])];
    case "increment":
      return [INCREMENT, [write.counters, write.key, write.by]];
  }
}

type QueryRow = {
  readonly seq: string;
  readonly time_ms: string;
  readonly value: string;
};

const queryMatch = (row: QueryRow): QueryMatch => ({
  seq: toInteger(row.seq, "seq"),
  time: toInteger(row.time_ms, "time"),
  text: row.value,
});

const toInteger = (value: unknown, what: string): number => returnedInteger(value, "PostgreSQL", what);

function nonNegativeInt(value: number | undefined, fallback: number, name: string): number {
  const out = value ?? fallback;
  if (!Number.isSafeInteger(out) || out < 0) {
    throw new StoreInvalidArgumentError(`${name} must be a non-negative integer.`);
  }
  return out;
}

/** `id`/`key` conditions of a validated range, numbering parameters after `params`. */
function rangeConditions(column: string, range: ListRange, params: unknown[]): string[] {
  const conditions: string[] = [];
  if (range.lower !== undefined) {
    params.push(range.lower);
    conditions.push(`${column} ${range.lowerExclusive ? ">" : ">="} $${params.length}`);
  }
  if (range.upper !== undefined) {
    params.push(range.upper);
    conditions.push(`${column} < $${params.length}`);
  }
  return conditions;
}

/** No stored id or key holds NUL (checkId refuses it), and PostgreSQL text cannot carry one. */
const matchesNothing = (range: ListRange): boolean => range.prefix?.includes("\u0000") === true;

export class PostgresStore implements Store {
  readonly backend = "postgres" as const;
  readonly #connection: PostgresConnection;
  readonly #reads: ReadBatcher<string>;
  readonly #healthTimeoutMs: number;
  readonly #migrationTimeoutMs: number;
  #sweepTimer: NodeJS.Timeout | undefined;
  #migration: MigrationResult | undefined;

  /** Use `PostgresStore.open`, which also migrates; the constructor only validates and builds the pool. */
  constructor(options: PostgresStoreOptions) {
    if (typeof options?.url !== "string")
      throw new StoreInvalidArgumentError("PostgreSQL store needs a URL.");
    this.#healthTimeoutMs = positiveInt(options.healthTimeoutMs, 1000, "healthTimeoutMs");
    this.#migrationTimeoutMs = positiveInt(options.migrationTimeoutMs, 300_000, "migrationTimeoutMs");
    const sweepIntervalMs = nonNegativeInt(options.sweepIntervalMs, 60_000, "sweepIntervalMs");
    this.#connection = new PostgresConnection(options.url, options);
    // Half the pool at most for gets, so writes (the audit log's appends) find a connection.
    const poolSize = positiveInt(options.poolSize, 10, "poolSize");
    this.#reads = new ReadBatcher({
      maxInFlight: Math.max(1, Math.floor(poolSize / 2)),
      maxBatch: GET_BATCH,
      fetch: (keys) => this.#getMany(keys),
    });
    if (sweepIntervalMs > 0) {
      this.#sweepTimer = setInterval(() => {
        // A failed sweep is skipped; reads already treat expired rows as absent.
        this.sweepExpired().catch(() => undefined);
      }, sweepIntervalMs);
      this.#sweepTimer.unref();
    }
  }

  /**
   * Connects, applies pending migrations and returns the store; an unreachable server, a
   * refused login or a schema newer than this build fails here, before anything is served.
   */
  static async open(options: PostgresStoreOptions): Promise<PostgresStore> {
    const store = new PostgresStore(options);
    try {
      await store.migrate();
      return store;
    } catch (error) {
      await store.close();
      throw error;
    }
  }

  /** host:port/database (never credentials). */
  get endpoint(): string {
    return this.#connection.endpoint;
  }

  /** What the migration at open (or the last `migrate`) found and applied. */
  get migration(): MigrationResult | undefined {
    return this.#migration;
  }

  /** Applies pending migrations (idempotent; replicas serialize on an advisory lock). */
  async migrate(): Promise<MigrationResult> {
    const result = await this.#connection.run(
      "migrate",
      (client) => migrate(client, this.#migrationTimeoutMs),
      { timeoutMs: this.#migrationTimeoutMs + 1000, discardConnection: true },
    );
    this.#migration = result;
    return result;
  }

  #read<R extends Record<string, unknown>>(what: string, sql: string, params: unknown[]): Promise<R[]> {
    return this.#connection.query<R>(what, sql, params, { retryOnLostConnection: true });
  }

  async get<T>(collection: string, id: string): Promise<T | undefined> {
    const key = documentKey(checkName("collection", collection), checkId("id", id));
    const text = await this.#reads.get(key);
    return text === undefined ? undefined : decodeValue<T>(text);
  }

  /** One query for a group of gets (ReadBatcher): the live documents among `keys`. */
  async #getMany(keys: readonly string[]): Promise<Map<string, string>> {
    const pairs = keys.map(splitDocumentKey);
    const rows = await this.#connection.query<{ collection: string; id: string; value: string }>(
      "get",
      GET_MANY,
      [pairs.map(([collection]) => collection), pairs.map(([, id]) => id)],
      { retryOnLostConnection: true, prepared: "authority_get_many" },
    );
    return new Map(rows.map((row) => [documentKey(row.collection, row.id), row.value]));
  }

  async put<T>(collection: string, id: string, value: T, options?: WriteOptions): Promise<void> {
    await this.#connection.query("put", WRITE, this.#writeParams(collection, id, value, options), {
      prepared: "authority_put",
    });
  }

  async create<T>(collection: string, id: string, value: T, options?: WriteOptions): Promise<boolean> {
    // ON CONFLICT locks the existing row, so "absent or expired" and the write are one step.
    const rows = await this.#connection.query(
      "create",
      `${WRITE}
       WHERE authority_documents.expires_at IS NOT NULL AND authority_documents.expires_at <= ${NOW_MS}
       RETURNING 1 AS created`,
      this.#writeParams(collection, id, value, options),
      { prepared: "authority_create" },
    );
    return rows.length === 1;
  }

  async putIfMatch<T>(
    collection: string,
    id: string,
    value: T,
    match: FieldMatch,
    options?: WriteOptions,
  ): Promise<boolean> {
    const { field, equals } = checkMatch(match);
    // UPDATE locks the row; a concurrent writer's commit makes it compare the new version.
    const rows = await this.#connection.query(
      "putIfMatch",
      `UPDATE authority_documents
       SET value = $3, expires_at = CASE WHEN $4::bigint IS NULL THEN NULL ELSE ${NOW_MS} + $4::bigint END
       WHERE ${matches(5, 6)} RETURNING 1 AS written`,
      [...this.#writeParams(collection, id, value, options), field, equals],
      { prepared: "authority_put_if_match" },
    );
    return rows.length === 1;
  }

  async deleteIfMatch(collection: string, id: string, match: FieldMatch): Promise<boolean> {
    const { field, equals } = checkMatch(match);
    const rows = await this.#connection.query(
      "deleteIfMatch",
      `DELETE FROM authority_documents WHERE ${matches(3, 4)} RETURNING 1 AS removed`,
      [checkName("collection", collection), checkId("id", id), field, equals],
    );
    return rows.length === 1;
  }

  #writeParams(collection: string, id: string, value: unknown, options: WriteOptions | undefined): unknown[] {
    const ttl = checkTtl(options);
    return [checkName("collection", collection), checkId("id", id), encodeValue(value), ttl ?? null];
  }

  async delete(collection: string, id: string): Promise<boolean> {
    const rows = await this.#connection.query<{ live: boolean }>(
      "delete",
      `DELETE FROM authority_documents WHERE collection = $1 AND id = $2
       RETURNING (expires_at IS NULL OR expires_at > ${NOW_MS}) AS live`,
      [checkName("collection", collection), checkId("id", id)],
    );
    // An expired row was already absent to readers: removing it is housekeeping, not a delete.
    return rows[0]?.live === true;
  }

  async list<T>(collection: string, options?: ListOptions): Promise<Page<T>> {
    const name = checkName("collection", collection);
    const range = checkListOptions(options);
    if (matchesNothing(range)) return { items: [] };
    const params: unknown[] = [name];
    const conditions = ["collection = $1", LIVE, ...rangeConditions("id", range, params)];
    params.push(range.limit + 1);
    const rows = await this.#read<{ id: string; value: string }>(
      "list",
      `SELECT id, value FROM authority_documents WHERE ${conditions.join(" AND ")}
       ORDER BY id LIMIT $${params.length}`,
      params,
    );
    const items: StoredItem<T>[] = rows
      .slice(0, range.limit)
      .map((row) => ({ id: row.id, value: decodeValue<T>(row.value) }));
    const last = items.at(-1);
    return rows.length > range.limit && last !== undefined ? { items, next: last.id } : { items };
  }

  async count(collection: string): Promise<number> {
    const rows = await this.#read<{ n: string }>(
      "count",
      `SELECT count(*) AS n FROM authority_documents WHERE collection = $1 AND ${LIVE}`,
      [checkName("collection", collection)],
    );
    return toInteger(rows[0]?.n, "count");
  }

  async append<T>(log: string, value: T): Promise<number> {
    const [seq] = await this.appendMany(log, [value]);
    return seq ?? 0;
  }

  async appendMany<T>(log: string, values: readonly T[]): Promise<number[]> {
    const name = checkName("log", log);
    const texts = values.map((value) => encodeValue(value));
    if (texts.length === 0) return [];
    const indexes = values.map((value) => logIndexValues(value));
    // An id repeated within the call is sent once; its repeats get the first one's seq.
    const firstOfId = new Map<string, number>();
    const sent: number[] = [];
    indexes.forEach((index, i) => {
      if (index.id !== null && firstOfId.has(index.id)) return;
      if (index.id !== null) firstOfId.set(index.id, i);
      sent.push(i);
    });
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.#appendDistinct(name, texts, indexes, sent);
      } catch (error) {
        if (attempt >= APPEND_ATTEMPTS || !lostRace(error)) throw error;
      }
    }
  }

  /**
   * One APPEND_MANY statement (the head row's lock orders concurrent appends; seqs and entries
   * commit or roll back together), then the seqs of the ids the log held already.
   */
  async #appendDistinct(
    log: string,
    texts: readonly string[],
    indexes: readonly LogIndexValues[],
    sent: readonly number[],
  ): Promise<number[]> {
    const rows = await this.#connection.query<{ seq: string; record_id: string | null }>(
      "append",
      APPEND_MANY,
      appendParams(
        log,
        sent.map((i) => texts[i] ?? ""),
        sent.map((i) => indexes[i] as LogIndexValues),
      ),
      { prepared: "authority_append_many" },
    );
    const seqOfId = new Map(rows.map((row) => [row.record_id, toInteger(row.seq, "seq")]));
    // Entries without an id were inserted in their order: their seqs ascend with it.
    const unnamed = rows
      .filter((row) => row.record_id === null)
      .map((row) => toInteger(row.seq, "seq"))
      .sort((a, b) => a - b);
    // The ids sent are distinct: those not written are held by the log already.
    const held = sent.flatMap((i) => indexes[i]?.id ?? []).filter((id) => !seqOfId.has(id));
    if (held.length > 0) {
      const existing = await this.#connection.query<{ record_id: string; seq: string }>(
        "append",
        EXISTING_SEQS,
        [log, held],
      );
      for (const row of existing) seqOfId.set(row.record_id, toInteger(row.seq, "seq"));
    }
    if (rows.length + held.length !== sent.length)
      throw new StoreError("PostgreSQL appended an unexpected number of entries.");
    let next = 0;
    return indexes.map((index) => (index.id === null ? unnamed[next++] : seqOfId.get(index.id)) ?? 0);
  }

  async logIdsHeld(log: string, ids: readonly string[]): Promise<string[]> {
    const name = checkName("log", log);
    const wanted = checkIdLookup(ids);
    if (wanted.length === 0) return [];
    const rows = await this.#read<{ record_id: string }>("logIdsHeld", EXISTING_SEQS, [name, wanted]);
    return rows.map((row) => row.record_id);
  }

  async readLog<T>(log: string, options?: ReadLogOptions): Promise<LogEntry<T>[]> {
    const rows = await this.#read<{ seq: string; value: string }>(
      "readLog",
      "SELECT seq, value FROM authority_logs WHERE log = $1 AND seq > $2 ORDER BY seq LIMIT $3",
      [checkName("log", log), checkAfterSeq(options), checkLimit(options?.limit)],
    );
    return rows.map((row) => ({ seq: toInteger(row.seq, "seq"), value: decodeValue<T>(row.value) }));
  }

  async queryLog<T>(log: string, query?: LogQuery): Promise<LogQueryPage<T>> {
    const name = checkName("log", log);
    const checked = checkLogQuery(query);
    const params: unknown[] = [name, checked.since, checked.until, checked.afterTime, checked.afterSeq];
    const conditions = ["log = $1", "time_ms >= $2", "time_ms <= $3", "(time_ms, seq) > ($4, $5)"];
    for (const [field, wanted] of checked.indexed) {
      params.push(wanted);
      conditions.push(`${field} = $${params.length}`);
    }
    // $n: how many candidates the index walk yields (limit+1, or the budget below).
    params.push(checked.limit + 1);
    const indexed = `SELECT seq, time_ms, value FROM authority_logs WHERE ${conditions.join(" AND ")}
      ORDER BY time_ms, seq LIMIT $${params.length}`;
    if (checked.other.length === 0) {
      const rows = await this.#read<QueryRow>("queryLog", indexed, params);
      return logQueryPage<T>(rows.map(queryMatch), checked.limit, undefined);
    }
    // Conditions no index answers: checked on at most LOG_QUERY_BUDGET candidates taken in
    // index order. The subquery's LIMIT keeps the planner on the ordered index walk (it would
    // otherwise guess the JSON conditions rare and sort every indexed match); the outer LIMIT
    // stops the walk at limit+1 matches.
    params[params.length - 1] = LOG_QUERY_BUDGET;
    const walk = [...params];
    const residual = checked.other.map(([field, wanted]) => {
      params.push(field, wanted);
      const member = `(value::json -> $${params.length - 1})`;
      return `json_typeof${member} = 'string' AND ${member} #>> '{}' = $${params.length}`;
    });
    params.push(checked.limit + 1);
    const rows = await this.#read<QueryRow>(
      "queryLog",
      `SELECT seq, time_ms, value FROM (${indexed}) AS candidates WHERE ${residual.join(" AND ")}
       ORDER BY time_ms, seq LIMIT $${params.length}`,
      params,
    );
    const matches = rows.map(queryMatch);
    if (matches.length > checked.limit) return logQueryPage<T>(matches, checked.limit, undefined);
    // A short page: did the walk end at its budget (then continue after the last candidate)?
    const stop = await this.#read<QueryRow>("queryLog", `${indexed} OFFSET $${walk.length} - 1`, walk);
    const stoppedAt = stop[0];
    return logQueryPage<T>(
      matches,
      checked.limit,
      stoppedAt === undefined ? undefined : queryMatch(stoppedAt),
    );
  }

  async trimLog(log: string, rule: LogTrim): Promise<number> {
    const name = checkName("log", log);
    const trim = checkLogTrim(rule);
    const oldest = await this.#read<{ seq: string; time_ms: string; last: string }>(
      "trimLog",
      `SELECT seq, time_ms, (SELECT seq FROM authority_log_heads WHERE log = $1) AS last
       FROM authority_logs WHERE log = $1 ORDER BY seq LIMIT $2`,
      [name, trim.max],
    );
    const first = oldest[0];
    if (first === undefined) return 0;
    const total = toInteger(first.last, "seq") - toInteger(first.seq, "seq") + 1;
    const n = trimCount(
      oldest.map((row) => toInteger(row.time_ms, "time")),
      total,
      trim,
    );
    if (n === 0) return 0;
    // Replicas trimming at once compute the same range; the second deletes nothing.
    const rows = await this.#connection.query<{ n: string }>(
      "trimLog",
      `WITH gone AS (DELETE FROM authority_logs WHERE log = $1 AND seq <= $2 RETURNING 1)
       SELECT count(*) AS n FROM gone`,
      [name, oldest[n - 1]?.seq],
    );
    return toInteger(rows[0]?.n, "change count");
  }

  async logLength(log: string): Promise<number> {
    const rows = await this.#read<{ n: string }>(
      "logLength",
      "SELECT COALESCE((SELECT seq FROM authority_log_heads WHERE log = $1), 0) AS n",
      [checkName("log", log)],
    );
    return toInteger(rows[0]?.n, "log length");
  }

  async increment(counters: string, key: string, by?: number): Promise<number> {
    const rows = await this.#connection.query<{ value: string }>("increment", INCREMENT, [
      checkName("counters", counters),
      checkId("counter key", key),
      checkIncrement(by),
    ]);
    return toInteger(rows[0]?.value, "counter");
  }

  async readCounters(counters: string, prefix?: string): Promise<Record<string, number>> {
    const name = checkName("counters", counters);
    const range = checkListOptions(prefix === undefined ? undefined : { prefix });
    if (matchesNothing(range)) return {};
    const params: unknown[] = [name];
    const conditions = ["name = $1", ...rangeConditions("key", range, params)];
    const rows = await this.#read<{ key: string; value: string }>(
      "readCounters",
      `SELECT key, value FROM authority_counters WHERE ${conditions.join(" AND ")} ORDER BY key`,
      params,
    );
    const result: Record<string, number> = {};
    for (const row of rows) result[row.key] = toInteger(row.value, "counter");
    return result;
  }

  async deleteCounters(counters: string, prefix: string, before: string, max?: number): Promise<number> {
    const name = checkName("counters", counters);
    const range = checkCounterRange(prefix, before, max);
    if (prefix.includes("\u0000")) return 0;
    const rows = await this.#connection.query<{ n: string }>(
      "deleteCounters",
      `WITH gone AS (
         DELETE FROM authority_counters WHERE name = $1 AND key IN (
           SELECT key FROM authority_counters WHERE name = $1 AND key >= $2 AND key < $3
           ORDER BY key LIMIT $4 FOR UPDATE SKIP LOCKED)
         RETURNING 1)
       SELECT count(*) AS n FROM gone`,
      [name, range.lower ?? "", range.upper, range.max],
    );
    return toInteger(rows[0]?.n, "change count");
  }

  async writeAll(writes: readonly StoreWrite[]): Promise<void> {
    const checked = checkWrites(writes);
    if (checked.length === 0) return;
    const puts = distinctPuts(checked);
    if (puts !== undefined) {
      await this.#connection.query(
        "writeAll",
        WRITE_MANY,
        [
          puts.map((put) => put.collection),
          puts.map((put) => put.id),
          puts.map((put) => put.text),
          puts.map((put) => put.ttlMs ?? null),
        ],
        { prepared: "authority_write_many" },
      );
      return;
    }
    await this.#connection.run("writeAll", async (client) => {
      // A failure releases the connection as broken (connection.ts), which ends the transaction.
      await client.query("BEGIN");
      for (const write of checked) await client.query(...writeStatement(write));
      await client.query("COMMIT");
    });
  }

  /** Deletes expired documents in small batches; returns how many were removed. */
  async sweepExpired(): Promise<number> {
    let removed = 0;
    for (;;) {
      const rows = await this.#connection.query<{ n: string }>(
        "sweep",
        `WITH gone AS (
           DELETE FROM authority_documents WHERE (collection, id) IN (
             SELECT collection, id FROM authority_documents
             WHERE expires_at IS NOT NULL AND expires_at <= ${NOW_MS}
             LIMIT ${SWEEP_BATCH} FOR UPDATE SKIP LOCKED)
           RETURNING 1)
         SELECT count(*) AS n FROM gone`,
      );
      const changes = toInteger(rows[0]?.n, "change count");
      removed += changes;
      if (changes < SWEEP_BATCH) return removed;
    }
  }

  async health(): Promise<StoreHealth> {
    const where = `postgres ${this.#connection.endpoint}`;
    if (this.#connection.closed)
      return { backend: "postgres", ok: false, detail: `${where}: store is closed` };
    try {
      await this.#connection.query("health", "SELECT 1", [], { timeoutMs: this.#healthTimeoutMs });
      const schema = this.#migration === undefined ? "" : ` (schema v${this.#migration.version})`;
      return { backend: "postgres", ok: true, detail: `${where}: ready${schema}` };
    } catch {
      return { backend: "postgres", ok: false, detail: `${where}: unavailable (${this.#connection.state})` };
    }
  }

  async close(): Promise<void> {
    if (this.#sweepTimer !== undefined) clearInterval(this.#sweepTimer);
    await this.#connection.close();
  }
}
