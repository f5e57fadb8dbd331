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

export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly sql: string;
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
