/**
 * The authority seals its decision chains on shutdown (decision 2681): after `close()`, the
 * newest checkpoint of the replica's stream is a `shutdown` one and seals the newest stored
 * record of its audit chain — nothing it recorded is left unsealed.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { test } from "node:test";
import { chainOf } from "../../../../src/audit/chain.ts";
import { logs } from "../../../../src/store/model.ts";
import { SqliteStore } from "../../../../src/store/sqlite/sqlite-store.ts";
import { startHarness } from "./harness.ts";
import { CAPABILITY, seedAll } from "./seed.ts";

test("closing the authority writes a shutdown checkpoint sealing every record it stored", async () => {
  // An interval longer than the test: only the shutdown seals.
  const h = await startHarness({ settings: { "audit-checkpoint-interval": "3600" } });
  try {
    await seedAll(h.service.context.store, h.service.context.protector);
    const agent = await h.token("agent-7");
    for (const path of ["/users/1", "/users/2", "/nowhere"])
      await h.authorize({ capability_id: CAPABILITY, method: "GET", path }, agent);
    await h.service.close();
    const store = new SqliteStore({ path: join(h.dir.path, "authority.db"), sweepIntervalMs: 0 });
    try {
      const checkpoints = await store.readLog<{
        reason: string;
        stream: string;
        heads: Record<string, { n: number }>;
      }>(logs.auditCheckpoints, { limit: 1000 });
      const records = await store.readLog(logs.audit, { limit: 1000 });
      const decisions = records
        .filter((entry) => (entry.value as { kind?: string }).kind === "decision")
        .map((entry) => chainOf(entry.value));
      const stream = decisions[0]?.stream;
      assert.ok(stream !== undefined && decisions.length >= 3, "the decisions were chained");
      const ours = checkpoints.map((entry) => entry.value).filter((value) => value.stream === stream);
      const last = ours.at(-1);
      assert.equal(last?.reason, "shutdown");
      assert.equal(last?.heads.audit?.n, Math.max(...decisions.map((link) => link?.n ?? 0)));
    } finally {
      await store.close();
    }
  } finally {
    await h.idp.close();
    await h.dir.cleanup();
  }
});
