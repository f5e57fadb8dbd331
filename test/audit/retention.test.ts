import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { retentionIsEmpty, startRetention } from "../../src/audit/retention.ts";
import { USAGE_COUNTERS, usageKeysFor } from "../../src/audit/usage.ts";
import { resolveAuthorityConfig } from "../../src/config/authority.ts";
import { logs } from "../../src/store/model.ts";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

const NOW = new Date("2026-06-30T12:00:00.000Z");
const DAY = 86_400_000;

let dir: TempDir;
let files = 0;
before(async () => {
  dir = await makeTempDir("retention-");
});
after(() => dir.cleanup());

function freshStore(): SqliteStore {
  files++;
  return new SqliteStore({ path: join(dir.path, `r-${files}.db`), sweepIntervalMs: 0 });
}

const decision = (daysAgo: number, i: number) => ({
  kind: "decision",
  partner_id: "p1",
  subject_id: `s${i % 3}`,
  decision: "allowed",
  time: new Date(NOW.getTime() - daysAgo * DAY - i).toISOString(),
});

describe("background retention", () => {
  it("removes old audit records in small batches, counts them, and keeps the usage rollups", async () => {
    const store = freshStore();
    try {
      // 55 records 40 days old, then 5 from today; usage counted for all of them.
      const old = Array.from({ length: 55 }, (_, i) => decision(40, 55 - i));
      const recent = Array.from({ length: 5 }, (_, i) => decision(0, 5 - i));
      await store.appendMany(logs.audit, [...old, ...recent]);
      for (const row of [...old, ...recent]) {
        for (const key of usageKeysFor(new Date(row.time), {
          partner_id: row.partner_id,
          subject_id: row.subject_id,
          capability_id: "cap",
          permission_id: "cap:get:/x",
          state: "allowed",
        })) {
          await store.increment(USAGE_COUNTERS, key);
        }
      }
      const batches: Array<[string, number]> = [];
      const worker = startRetention({
        store,
        settings: { logs: { [logs.audit]: { maxAgeMs: 30 * DAY } }, usage: { hour: 7 * DAY } },
        batchSize: 10,
        now: () => NOW,
        onRemoved: (what, count) => batches.push([what, count]),
      });
      const removed = await worker.runOnce();
      await worker.stop();
      assert.deepEqual(removed, { audit: 55, usage_hour: 3 });
      const auditBatches = batches.filter(([what]) => what === "audit").map(([, n]) => n);
      assert.deepEqual(auditBatches, [10, 10, 10, 10, 10, 5]);
      assert.equal((await store.readLog(logs.audit, { limit: 1000 })).length, 5);
      // Daily rollups of the trimmed days are still there; hourly ones older than 7 days are gone.
      const counters = await store.readCounters(USAGE_COUNTERS);
      const daily = Object.entries(counters).filter(([key]) => key.startsWith("d|"));
      assert.equal(
        daily.reduce((sum, [, n]) => sum + n, 0),
        60,
      );
      const hourly = Object.keys(counters).filter((key) => key.startsWith("h|"));
      assert.ok(hourly.every((key) => key.startsWith(`h|${NOW.toISOString().slice(0, 10)}`)));
      // A second pass finds nothing.
      const again = startRetention({
        store,
        settings: { logs: { [logs.audit]: { maxAgeMs: 30 * DAY, maxCount: 5 } }, usage: { hour: 7 * DAY } },
        now: () => NOW,
      });
      assert.deepEqual(await again.runOnce(), { audit: 0, usage_hour: 0 });
      await again.stop();
    } finally {
      await store.close();
    }
  });

  it("keeps at most the configured count of records, and nothing when no rule is set", async () => {
    const store = freshStore();
    try {
      await store.appendMany(
        logs.mcpAudit,
        Array.from({ length: 30 }, (_, i) => decision(0, 30 - i)),
      );
      const worker = startRetention({
        store,
        settings: { logs: { [logs.mcpAudit]: { maxCount: 12 }, [logs.audit]: {} }, usage: {} },
        now: () => NOW,
      });
      assert.deepEqual(await worker.runOnce(), { [logs.mcpAudit]: 18 });
      await worker.stop();
      assert.deepEqual(
        (await store.readLog(logs.mcpAudit, { limit: 100 })).map((e) => e.seq),
        Array.from({ length: 12 }, (_, i) => 19 + i),
      );
    } finally {
      await store.close();
    }
  });

  it("the evidence age removes the binding evidence documents too, binding by binding, across passes", async () => {
    const store = freshStore();
    const evidenceId = (daysAgo: number, i: number) =>
      `ev_${(NOW.getTime() - daysAgo * DAY - i).toString(36).padStart(10, "0")}${i.toString(16).padStart(16, "0")}`;
    try {
      // b1: 5 old then 3 recent; b2: 4 old; b3: 3 recent; plus a document that is no evidence id.
      const docs: Array<[string, number]> = [
        ...Array.from({ length: 5 }, (_, i): [string, number] => [`b1/${evidenceId(40, 10 - i)}`, 40]),
        ...Array.from({ length: 3 }, (_, i): [string, number] => [`b1/${evidenceId(1, 10 - i)}`, 1]),
        ...Array.from({ length: 4 }, (_, i): [string, number] => [`b2/${evidenceId(31, 10 - i)}`, 31]),
        ...Array.from({ length: 3 }, (_, i): [string, number] => [`b3/${evidenceId(0, 10 - i)}`, 0]),
        ["b4/not-an-evidence-id", 99],
      ];
      for (const [id, daysAgo] of docs) await store.put("binding_invocations", id, { daysAgo });
      const counted: number[] = [];
      const settings = { logs: { [logs.evidence]: { maxAgeMs: 30 * DAY } }, usage: {} };
      // Pages of 2, one page per pass: the walk resumes where the previous pass stopped.
      const worker = startRetention({
        store,
        settings,
        batchSize: 2,
        maxBatchesPerPass: 1,
        now: () => NOW,
        onRemoved: (what, n) => {
          if (what === "evidence_documents") counted.push(n);
        },
      });
      let removed = 0;
      for (let pass = 0; pass < 12; pass++) removed += (await worker.runOnce()).evidence_documents ?? 0;
      await worker.stop();
      assert.equal(removed, 9);
      assert.equal(
        counted.reduce((sum, n) => sum + n, 0),
        9,
      );
      const left = (await store.list("binding_invocations", { limit: 100 })).items.map((item) => item.id);
      assert.deepEqual(
        left,
        docs.filter(([, daysAgo]) => daysAgo <= 1 || daysAgo === 99).map(([id]) => id),
      );
      // Without an age for evidence nothing is removed.
      const none = startRetention({
        store,
        settings: { logs: { [logs.evidence]: { maxCount: 1 } }, usage: {} },
      });
      assert.equal((await none.runOnce()).evidence_documents, undefined);
      await none.stop();
    } finally {
      await store.close();
    }
  });

  it("is configured by the authority's settings (0 = keep forever, the default)", () => {
    // The one-process mode: these settings do not depend on key custody.
    const embedded = { "policy-protection": "embedded" };
    const defaults = resolveAuthorityConfig({ flags: embedded, env: {} });
    assert.equal(retentionIsEmpty(defaults.retention), true);
    const set = resolveAuthorityConfig({
      flags: { ...embedded, "audit-retention-days": "90", "mcp-audit-retention-count": "1000000" },
      env: { AUTHORITY_USAGE_HOURLY_RETENTION_DAYS: "35", AUTHORITY_RETENTION_INTERVAL: "60" },
    });
    assert.deepEqual(set.retention, {
      logs: {
        audit: { maxAgeMs: 90 * DAY },
        mcp_audit: { maxCount: 1_000_000 },
        evidence: {},
      },
      usage: { hour: 35 * DAY },
      intervalMs: 60_000,
    });
    assert.throws(() => resolveAuthorityConfig({ flags: { "audit-retention-days": "-1" }, env: {} }));
  });
});
