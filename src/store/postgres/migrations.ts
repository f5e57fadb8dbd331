/**
 * The PostgreSQL schema, as numbered migrations. `migrate` applies the ones a database has not
 * seen, each in its own transaction together with its row in `authority_schema_migrations`, so
 * a migration is applied whole or not at all and never twice. Replicas starting at once
 * serialize on one advisory lock: the first applies, the others wait, then find nothing to do.
 * A database migrated by a newer build (a version this build does not know) is refused rather
 * than used with a schema this code was not written for.
 *
 * Migrations are append-only: a released one is never edited; a change is a new version.
 */
import type { PoolClient } from "pg";
import { StoreError } from "../errors.ts";
import { LOG_INDEX_FIELDS, type LogIndexValues, logIndexValues } from "../log-query.ts";

export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly sql: string;
  /** Runs after `sql`, in the same transaction (data a statement alone cannot derive). */
  readonly backfill?: (client: PoolClient) => Promise<void>;
}

/**
 * Fills the index columns of entries written before version 2, in batches, from the same
 * derivation appends use (log-query.ts), so old and new entries are indexed alike.
 */
async function backfillLogIndexes(client: PoolClient): Promise<void> {
  await eachLogBatch(client, async (rows, columns) => {
    await client.query(
      `UPDATE authority_logs AS l SET time_ms = u.time_ms, ${LOG_INDEX_FIELDS.map((f) => `${f} = u.${f}`).join(", ")}
       FROM unnest($1::text[], $2::bigint[], $3::bigint[], ${LOG_INDEX_FIELDS.map((_, i) => `$${i + 4}::text[]`).join(", ")})
         AS u(log, seq, time_ms, ${LOG_INDEX_FIELDS.join(", ")})
       WHERE l.log = u.log AND l.seq = u.seq`,
      [
        rows.map((row) => row.log),
        rows.map((row) => row.seq),
        columns.map((c) => c.time),
        ...LOG_INDEX_FIELDS.map((field) => columns.map((c) => c.fields[field])),
      ],
    );
  });
}

type LogRow = { log: string; seq: string; value: string };

/** Every log entry, 1,000 at a time in (log, seq) order, with its derived index values. */
async function eachLogBatch(
  client: PoolClient,
  apply: (rows: readonly LogRow[], columns: readonly LogIndexValues[]) => Promise<void>,
): Promise<void> {
  let position = { log: "", seq: "0" };
  for (;;) {
    const rows = (
      await client.query<LogRow>(
        `SELECT log, seq, value FROM authority_logs WHERE (log, seq) > ($1, $2) ORDER BY log, seq LIMIT 1000`,
        [position.log, position.seq],
      )
    ).rows;
    if (rows.length === 0) return;
    await apply(
      rows,
      rows.map((row) => logIndexValues(parseEntry(row.value))),
    );
    const last = rows.at(-1);
    if (last === undefined || rows.length < 1000) return;
    position = { log: last.log, seq: last.seq };
  }
}

function parseEntry(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * Fills `record_id` of entries written before version 3; of several entries with one id (a
 * write that landed twice), the first keeps it. Then the id becomes unique per log.
 */
async function backfillRecordIds(client: PoolClient): Promise<void> {
  await eachLogBatch(client, async (rows, columns) => {
    await client.query(
      `UPDATE authority_logs AS l SET record_id = u.record_id
       FROM unnest($1::text[], $2::bigint[], $3::text[]) AS u(log, seq, record_id)
       WHERE l.log = u.log AND l.seq = u.seq AND u.record_id IS NOT NULL`,
      [rows.map((row) => row.log), rows.map((row) => row.seq), columns.map((c) => c.id)],
    );
  });
  await client.query(`
UPDATE authority_logs AS l SET record_id = NULL
WHERE record_id IS NOT NULL AND EXISTS (
  SELECT 1 FROM authority_logs AS o WHERE o.log = l.log AND o.record_id = l.record_id AND o.seq < l.seq);
CREATE UNIQUE INDEX authority_logs_by_record_id ON authority_logs (log, record_id) WHERE record_id IS NOT NULL;`);
}

/**
 * Ids, names and keys are compared in code-point order (COLLATE "C" on UTF-8 is byte order,
 * which is code-point order), the order SQLite's BINARY collation and Redis's ZRANGEBYLEX
 * use, so `list` pages and prefixes match the other backends. Values are JSON text: `text`
 * keeps every JSON string as given (jsonb refuses \u0000 and rewrites numbers and key order).
 * Log seqs come from one head row per log, so appends to one log serialize on that row and
 * seqs stay consecutive (a rolled-back append rolls its seq back too).
 */
export const migrations: readonly Migration[] = [
  {
    version: 1,
    name: "documents, logs and counters",
    sql: `
CREATE TABLE IF NOT EXISTS authority_documents (
  collection text COLLATE "C" NOT NULL,
  id text COLLATE "C" NOT NULL,
  value text NOT NULL,
  expires_at bigint,
  PRIMARY KEY (collection, id)
);
CREATE INDEX IF NOT EXISTS authority_documents_expiry
  ON authority_documents (expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS authority_log_heads (
  log text COLLATE "C" PRIMARY KEY,
  seq bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS authority_logs (
  log text COLLATE "C" NOT NULL,
  seq bigint NOT NULL,
  value text NOT NULL,
  PRIMARY KEY (log, seq)
);
CREATE TABLE IF NOT EXISTS authority_counters (
  name text COLLATE "C" NOT NULL,
  key text COLLATE "C" NOT NULL,
  value bigint NOT NULL,
  PRIMARY KEY (name, key)
);`,
  },
  {
    version: 2,
    name: "indexed log fields",
    sql: `
ALTER TABLE authority_logs ADD COLUMN time_ms bigint NOT NULL DEFAULT 0;
${LOG_INDEX_FIELDS.map((f) => `ALTER TABLE authority_logs ADD COLUMN ${f} text COLLATE "C";`).join("\n")}
CREATE INDEX authority_logs_by_time ON authority_logs (log, time_ms, seq);
${LOG_INDEX_FIELDS.map(
  (f) =>
    `CREATE INDEX authority_logs_by_${f} ON authority_logs (log, ${f}, time_ms, seq) WHERE ${f} IS NOT NULL;`,
).join("\n")}`,
    backfill: backfillLogIndexes,
  },
  {
    version: 3,
    name: "log entry ids unique per log",
    sql: `ALTER TABLE authority_logs ADD COLUMN record_id text COLLATE "C";`,
    backfill: backfillRecordIds,
  },
];

export const LATEST_VERSION = Math.max(...migrations.map((m) => m.version));

/** Key of the session advisory lock migrations hold (arbitrary; shared by every replica). */
export const MIGRATION_LOCK_KEY = 0x6175_7468;

const MIGRATIONS_TABLE = `
CREATE TABLE IF NOT EXISTS authority_schema_migrations (
  version integer PRIMARY KEY,
  name text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
)`;

export interface MigrationResult {
  /** The schema version after this run. */
  readonly version: number;
  /** Versions this run applied (empty when the database was already current). */
  readonly applied: readonly number[];
}

/**
 * Applies the pending migrations on `client` (a session of its own: it takes the advisory lock
 * and sets its own timeout, so the caller must not return it to a pool afterwards).
 */
export async function migrate(
  client: PoolClient,
  timeoutMs: number,
  list: readonly Migration[] = migrations,
): Promise<MigrationResult> {
  await client.query(`SET statement_timeout = ${Math.trunc(timeoutMs)}`);
  await client.query("SELECT pg_advisory_lock($1)", [MIGRATION_LOCK_KEY]);
  try {
    await client.query(MIGRATIONS_TABLE);
    const rows = (await client.query<{ version: number }>("SELECT version FROM authority_schema_migrations"))
      .rows;
    const done = new Set(rows.map((row) => Number(row.version)));
    const known = new Set(list.map((m) => m.version));
    const unknown = [...done].filter((version) => !known.has(version));
    if (unknown.length > 0) {
      throw new StoreError(
        `The PostgreSQL schema has version ${Math.max(...unknown)}, newer than this build knows (${Math.max(...known)}).`,
      );
    }
    const applied: number[] = [];
    for (const migration of [...list].sort((a, b) => a.version - b.version)) {
      if (done.has(migration.version)) continue;
      await client.query("BEGIN");
      try {
        await client.query(migration.sql);
        await migration.backfill?.(client);
        await client.query("INSERT INTO authority_schema_migrations (version, name) VALUES ($1, $2)", [
          migration.version,
          migration.name,
        ]);
        await client.query("COMMIT");
      } catch (error) {
        await client.query("ROLLBACK").catch(() => undefined);
        throw error;
      }
      applied.push(migration.version);
    }
    return { version: Math.max(0, ...done, ...applied), applied };
  } finally {
    await client.query("SELECT pg_advisory_unlock($1)", [MIGRATION_LOCK_KEY]).catch(() => undefined);
  }
}
