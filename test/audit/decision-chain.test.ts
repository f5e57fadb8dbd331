import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { createChainLinker } from "../../src/audit/chain.ts";
import { exportChains } from "../../src/audit/chain-export.ts";
import { recoverChainHeads, startCheckpoints } from "../../src/audit/checkpoints.ts";
import { findReceipt, parseReceipt, receiptOf } from "../../src/audit/receipts.ts";
import { type AuditRecorder, createAuditRecorder } from "../../src/audit/recorder.ts";
import { startRetention } from "../../src/audit/retention.ts";
import { verifyChainExport } from "../../src/audit/verify-chain.ts";
import { KeyRing, PublicKeyRing } from "../../src/crypto/index.ts";
import { keyRingCheckpointSigner } from "../../src/servers/authority/checkpoint-signers.ts";
import { logs } from "../../src/store/model.ts";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.ts";
import type { Store } from "../../src/store/store.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

const NOW = new Date("2026-06-30T12:00:00.000Z");
const ring = KeyRing.generate({ owner: "service:authority" });
const keys = PublicKeyRing.import(ring.exportPublic());
const signer = keyRingCheckpointSigner(async () => ring);

let dir: TempDir;
let files = 0;
before(async () => {
  dir = await makeTempDir("chain-");
});
after(() => dir.cleanup());

function freshStore(): SqliteStore {
  files++;
  return new SqliteStore({ path: join(dir.path, `c-${files}.db`), sweepIntervalMs: 0 });
}

/** One replica: its recorder writes chained records, its checkpointer seals them. */
async function replica(store: Store, stream: string) {
  const linker = createChainLinker({ stream, heads: await recoverChainHeads(store, stream, NOW) });
  const recorder: AuditRecorder = createAuditRecorder({ store, chain: linker });
  const checkpoints = startCheckpoints({
    store,
    linker,
    signer,
    intervalMs: 3_600_000,
    now: () => NOW,
    onError: (error) => assert.fail(String(error)),
  });
  return {
    linker,
    recorder,
    checkpoints,
    async decide(i: number) {
      return recorder.record({
        actor: "agent",
        subject_id: `s${i % 3}`,
        partner_id: i % 2 === 0 ? "p1" : "p2",
        capability_id: "cap",
        method: "GET",
        path: `/items/${i}`,
        permission_id: null,
        decision: i % 4 === 0 ? "denied" : "allowed",
        reason: i % 4 === 0 ? "missing_policy" : null,
        transport: "http",
        requestId: `req-${i}`,
        time: new Date(NOW.getTime() - 60_000 + i),
      });
    },
    async evidence(i: number) {
      await recorder.recordEvidence({
        binding_id: "b1",
        actor: "agent",
        subject_id: "s1",
        partner_id: "p1",
        capability_id: "cap",
        permission_id: null,
        decision: "allowed",
        requestId: `ev-${i}`,
        time: new Date(NOW.getTime() - 30_000 + i),
      });
    },
    /** Stops like `authority serve`: the last records stored, then the shutdown checkpoint. */
    async stop() {
      await recorder.close();
      checkpoints.stop();
      await checkpoints.checkpoint("shutdown");
    },
  };
}

async function exported(store: Store): Promise<string[]> {
  const lines: string[] = [];
  for await (const line of exportChains(store, NOW)) lines.push(line);
  return lines;
}

const verify = (lines: readonly string[]) => verifyChainExport(`${lines.join("\n")}\n`, keys);

/** The line number (1-based) of the k-th record line of a log. */
function recordLine(lines: readonly string[], log: string, k: number): number {
  let seen = 0;
  for (let i = 0; i < lines.length; i++) {
    const parsed = JSON.parse(lines[i] as string) as { type: string; log?: string };
    if (parsed.type === "record" && parsed.log === log && ++seen === k) return i + 1;
  }
  throw new Error(`no record ${k} of ${log}`);
}

describe("tamper-evident decision records", () => {
  let store: SqliteStore;
  let lines: string[];

  before(async () => {
    store = freshStore();
    const one = await replica(store, "replica-a");
    for (let i = 0; i < 12; i++) await one.decide(i);
    for (let i = 0; i < 3; i++) await one.evidence(i);
    await one.stop();
    lines = await exported(store);
  });
  after(() => store.close());

  it("verifies an untouched export", async () => {
    const result = await verify(lines);
    assert.equal(result.failure, undefined);
    assert.equal(result.ok, true);
    assert.equal(result.records, 15);
    assert.equal(result.streams, 2);
    assert.equal(result.unsealed, 0);
  });

  it("names the record whose bytes were changed", async () => {
    const line = recordLine(lines, logs.audit, 5);
    const tampered = [...lines];
    // One byte of the stored reason changed.
    tampered[line - 1] = (tampered[line - 1] as string).replace('"missing_policy"', '"missing_polict"');
    assert.notEqual(tampered[line - 1], lines[line - 1]);
    const result = await verify(tampered);
    assert.equal(result.failure?.kind, "modified");
    assert.equal(result.failure?.line, line);
  });

  it("names a change of the newest record through the checkpoint", async () => {
    const line = recordLine(lines, logs.audit, 12);
    const tampered = [...lines];
    tampered[line - 1] = (tampered[line - 1] as string).replace('"req-11"', '"req-1l"');
    const result = await verify(tampered);
    assert.equal(result.failure?.kind, "modified");
    assert.equal(result.failure?.line, line);
  });

  it("names a deleted record", async () => {
    const line = recordLine(lines, logs.audit, 4);
    const tampered = lines.filter((_, i) => i !== line - 1);
    const result = await verify(tampered);
    assert.equal(result.failure?.kind, "removed");
    assert.equal(result.failure?.n, 5);
    assert.equal(result.failure?.line, line);
  });

  it("names swapped records", async () => {
    const line = recordLine(lines, logs.audit, 6);
    const tampered = [...lines];
    [tampered[line - 1], tampered[line]] = [tampered[line] as string, tampered[line - 1] as string];
    const result = await verify(tampered);
    assert.equal(result.failure?.kind, "reordered");
    assert.equal(result.failure?.line, line);
  });

  it("names a removed first record", async () => {
    const line = recordLine(lines, logs.audit, 1);
    const result = await verify(lines.filter((_, i) => i !== line - 1));
    assert.equal(result.failure?.kind, "removed");
  });

  it("names a truncated tail", async () => {
    const result = await verify(lines.slice(0, -2));
    assert.equal(result.failure?.kind, "truncated");
    assert.equal(result.failure?.log, logs.evidence);
    assert.equal(result.failure?.n, 3);
  });

  it("refuses a forged checkpoint: edited heads, or signed by another key", async () => {
    const at = lines.findIndex((line) => line.includes('"type":"checkpoint"'));
    const edited = [...lines];
    const checkpoint = JSON.parse(lines[at] as string) as { value: { heads: { audit: { n: number } } } };
    checkpoint.value.heads.audit.n = 11;
    edited[at] = JSON.stringify(checkpoint);
    const first = await verify(edited);
    assert.equal(first.failure?.kind, "forged_checkpoint");
    assert.equal(first.failure?.line, at + 1);

    const other = KeyRing.generate({ owner: "service:authority" });
    const forged = JSON.parse(lines[at] as string) as { value: { signed_blob: string } };
    const otherSigned = await keyRingCheckpointSigner(async () => other).sign("{}");
    forged.value.signed_blob = otherSigned;
    const second = await verify(lines.map((line, i) => (i === at ? JSON.stringify(forged) : line)));
    assert.equal(second.failure?.kind, "forged_checkpoint");
  });

  it("finds a record by its receipt, only within the caller's partner", async () => {
    const reader = freshStore();
    try {
      const one = await replica(reader, "replica-r");
      const record = await one.decide(2);
      await one.stop();
      const receipt = receiptOf(logs.audit, record);
      const ref = parseReceipt(receipt);
      assert.ok(ref);
      const found = await findReceipt(reader, ref, "p1");
      assert.ok(found);
      assert.equal((found.value as { id: string }).id, record.id);
      assert.equal(await findReceipt(reader, ref, "p2"), undefined);
      assert.equal(parseReceipt(`${receipt}x!`), undefined);
      // The receipt does not disclose the id (anyone knowing it early could send it first).
      assert.equal(receipt.includes(record.id), false);
      // A receipt of the earlier form, naming the id, is still found.
      const older = parseReceipt(`r1.a.${Date.parse(record.time)}.${record.id}`);
      assert.ok(older);
      const olderFound = await findReceipt(reader, older, "p1");
      assert.equal((olderFound?.value as { id: string } | undefined)?.id, record.id);
    } finally {
      await reader.close();
    }
  });
});

describe("checkpoints at the interval", () => {
  it("seals the heads each interval when they moved, and only then", async (t) => {
    t.mock.timers.enable({ apis: ["setInterval"] });
    const store = freshStore();
    try {
      const one = await replica(store, "replica-i");
      for (let i = 0; i < 3; i++) await one.decide(i);
      await one.recorder.flush();
      const reasons = async () =>
        (
          await store.readLog<{ reason: string; heads: { audit?: { n: number } } }>(logs.auditCheckpoints, {
            limit: 100,
          })
        ).map((entry) => `${entry.value.reason}:${entry.value.heads.audit?.n ?? 0}`);
      t.mock.timers.tick(3_600_000);
      // The interval's write is queued before this one: both are in the log once it returns.
      await one.checkpoints.checkpoint("demand");
      assert.deepEqual(await reasons(), ["interval:3", "demand:3"]);
      // Nothing moved: the next interval signs nothing.
      t.mock.timers.tick(3_600_000);
      await one.decide(3);
      await one.recorder.flush();
      t.mock.timers.tick(3_600_000);
      await one.checkpoints.checkpoint("demand");
      assert.deepEqual(await reasons(), ["interval:3", "demand:3", "interval:4", "demand:4"]);
      await one.stop();
    } finally {
      await store.close();
    }
  });
});

describe("decision chains across restarts, replicas and retention", () => {
  it("continues the chain after a restart, with or without the shutdown checkpoint", async () => {
    const store = freshStore();
    try {
      const first = await replica(store, "replica-a");
      for (let i = 0; i < 5; i++) await first.decide(i);
      await first.stop();
      const second = await replica(store, "replica-a");
      assert.equal(second.linker.storedHeads().audit.n, 5);
      for (let i = 5; i < 8; i++) await second.decide(i);
      // A crash: records stored, no shutdown checkpoint.
      await second.recorder.flush();
      second.checkpoints.stop();
      const third = await replica(store, "replica-a");
      assert.equal(third.linker.storedHeads().audit.n, 8);
      for (let i = 8; i < 10; i++) await third.decide(i);
      await third.stop();
      const result = await verify(await exported(store));
      assert.equal(result.failure, undefined);
      assert.equal(result.streams, 1);
      assert.equal(result.records, 10);
    } finally {
      await store.close();
    }
  });

  it("keeps one verifiable chain per replica when two replicas write to one store", async () => {
    const store = freshStore();
    try {
      const a = await replica(store, "replica-a");
      const b = await replica(store, "replica-b");
      await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? a : b).decide(i)));
      await Promise.all([a.stop(), b.stop()]);
      const lines = await exported(store);
      const result = await verify(lines);
      assert.equal(result.failure, undefined);
      assert.equal(result.streams, 2);
      assert.equal(result.records, 40);
      // Tampering with one replica's chain is still named.
      const line = recordLine(lines, logs.audit, 10);
      const tampered = lines.filter((_, i) => i !== line - 1);
      assert.equal((await verify(tampered)).ok, false);
    } finally {
      await store.close();
    }
  });

  it("stays verifiable after retention trims the oldest records, and not when more are removed", async () => {
    const store = freshStore();
    try {
      const a = await replica(store, "replica-a");
      const b = await replica(store, "replica-b");
      for (let i = 0; i < 30; i++) await (i % 3 === 0 ? b : a).decide(i);
      await Promise.all([a.stop(), b.stop()]);
      const retention = startRetention({
        store,
        settings: { logs: { [logs.audit]: { maxCount: 12 } }, usage: {} },
        intervalMs: 3_600_000,
        batchSize: 7,
        beforeTrim: (log, entries) => a.checkpoints.sealTrimmed(log as "audit", entries),
      });
      const removed = await retention.runOnce();
      await retention.stop();
      assert.equal(removed[logs.audit], 18);
      const lines = await exported(store);
      const result = await verify(lines);
      assert.equal(result.failure, undefined);
      assert.equal(result.records, 12);
      const first = recordLine(lines, logs.audit, 1);
      const second = await verify(lines.filter((_, i) => i !== first - 1));
      assert.equal(second.failure?.kind, "removed");
    } finally {
      await store.close();
    }
  });
});
