/**
 * The configuration of `authority store migrate`: the store whose schema to bring up to date
 * ahead of a rollout (`serve` applies the same migrations at start).
 */
import { defineProcess } from "./schema.ts";
import { embeddedStateSettings, setting } from "./settings.ts";

export interface StoreMigrateConfig {
  readonly storeUrl: string;
}

export const storeMigrateSettings = {
  // The same setting as serve's, but required: migrating a default local file is never meant.
  store: setting({ ...embeddedStateSettings.store, defaultText: undefined }),
} as const;

export const storeMigrateSchema = defineProcess({
  command: "store migrate",
  title: "Store schema migrations (`authority store migrate`)",
  settings: storeMigrateSettings,
  notes: `Applies the store's pending schema migrations and exits: for PostgreSQL the numbered
migrations recorded in \`authority_schema_migrations\` (safe beside running replicas, which apply
the same ones at start under the same advisory lock); a SQLite file is brought up to date when
opened; Redis has no schema. Prints the schema version and what this run applied.`,
  build(read): StoreMigrateConfig {
    return { storeUrl: read.value("store") };
  },
});
