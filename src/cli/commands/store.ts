import type { Command } from "commander";
import { storeMigrateSchema } from "../../config/store-migrate.ts";
import { isStoreError, openStore, PostgresStore } from "../../store/index.ts";
import { addSettingOptions, loadCommandConfig } from "../settings-options.ts";

/**
 * `authority store migrate`: brings the store's schema up to date ahead of a rollout and exits
 * (docs/store.md). Prints one line: the backend, where (never credentials), the version, and
 * the versions this run applied.
 */
async function migrate(storeUrl: string): Promise<string> {
  const store = await openStore(storeUrl);
  try {
    if (store instanceof PostgresStore) {
      const { version, applied } = store.migration ?? (await store.migrate());
      const what = applied.length === 0 ? "nothing to apply" : `applied ${applied.join(", ")}`;
      return `postgres ${store.endpoint}: schema version ${version} (${what})`;
    }
    return store.backend === "sqlite"
      ? "sqlite: schema up to date (applied when the file is opened)"
      : "redis: no schema to migrate";
  } finally {
    await store.close();
  }
}

export function register(program: Command): void {
  const store = program.command("store").description("Operate on the store (schema migrations)");
  const command = store
    .command("migrate")
    .description("Apply the store's pending schema migrations and exit (serve applies them at start too)");
  addSettingOptions(command, storeMigrateSchema).action(async (_options: unknown, cmd: Command) => {
    const config = await loadCommandConfig(storeMigrateSchema, cmd);
    try {
      process.stdout.write(`${await migrate(config.storeUrl)}\n`);
    } catch (error) {
      if (isStoreError(error)) cmd.error(`authority store migrate: ${error.message}`);
      throw error;
    }
  });
}
