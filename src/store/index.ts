/**
 * Opens the configured store from its URL (`AUTHORITY_STORE_URL` / `--store`):
 *   sqlite:<path>            a file (relative to the working directory), parent dirs created
 *   sqlite:///<absolute>     the same with an absolute path
 *   redis://… / rediss://…   a Redis server (password in the URL is never reported)
 *   postgres://… / postgresql://…   a PostgreSQL database, migrated when opened (likewise)
 */
import { mkdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { StoreError, StoreInvalidArgumentError } from "./errors.ts";
import { PostgresStore, type PostgresStoreOptions } from "./postgres/postgres-store.ts";
import { RedisStore, type RedisStoreOptions } from "./redis/redis-store.ts";
import { SqliteStore, type SqliteStoreOptions } from "./sqlite/sqlite-store.ts";
import type { Store } from "./store.ts";

export * from "./errors.ts";
export type { MigrationResult } from "./postgres/migrations.ts";
export { PostgresStore, type PostgresStoreOptions } from "./postgres/postgres-store.ts";
export { RedisStore, type RedisStoreOptions } from "./redis/redis-store.ts";
export { SqliteStore, type SqliteStoreOptions } from "./sqlite/sqlite-store.ts";
export type * from "./store.ts";

export interface OpenStoreOptions {
  readonly sqlite?: Omit<SqliteStoreOptions, "path">;
  readonly redis?: Omit<RedisStoreOptions, "url">;
  readonly postgres?: Omit<PostgresStoreOptions, "url">;
}

/** The file path a `sqlite:` URL names, resolved against the working directory. */
export function sqlitePathFromUrl(url: string): string {
  let rest = url.slice("sqlite:".length);
  if (rest.startsWith("//")) {
    rest = rest.slice(2);
    if (!rest.startsWith("/")) {
      throw new StoreInvalidArgumentError("sqlite:// URLs need an absolute path (sqlite:///var/lib/x.db).");
    }
  }
  if (rest === "" || rest.includes("\u0000"))
    throw new StoreInvalidArgumentError("sqlite: URL has no file path.");
  return resolve(rest);
}

export async function openStore(url: string, options: OpenStoreOptions = {}): Promise<Store> {
  if (typeof url !== "string") throw new StoreInvalidArgumentError("Store URL must be a string.");
  if (url.startsWith("sqlite:")) {
    const path = sqlitePathFromUrl(url);
    try {
      mkdirSync(dirname(path), { recursive: true });
    } catch (error) {
      throw new StoreError("Could not create the SQLite store directory.", { cause: error });
    }
    return new SqliteStore({ ...options.sqlite, path });
  }
  if (/^rediss?:\/\//i.test(url)) {
    return new RedisStore({ ...options.redis, url });
  }
  if (/^postgres(ql)?:\/\//i.test(url)) {
    return PostgresStore.open({ ...options.postgres, url });
  }
  // The URL may carry a password, so it is not echoed.
  throw new StoreInvalidArgumentError(
    "Store URL must start with sqlite:, redis://, rediss://, postgres:// or postgresql://.",
  );
}
