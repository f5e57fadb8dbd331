import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { createAuditRecorder, createDecisionRecorder } from "../../src/audit/recorder.ts";
import type { DecisionInput } from "../../src/audit/records.ts";
import { parseUsageKey, USAGE_COUNTERS } from "../../src/audit/usage.ts";
import { AuditBufferFullError, AuditClosedError } from "../../src/audit/writer.ts";
import { openStore } from "../../src/store/index.ts";
import type { Store } from "../../src/store/store.ts";
import { type RedisServerHandle, startRedisServer } from "../helpers/redis-server.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

const decision = (i: number, extra: Partial<DecisionInput> = {}): DecisionInput => ({
  actor: "agent-1",
  subject_id: "agent-1",
  partner_id: "partner-1",
  capability_id: "billing-api",
  method: "GET",
  path: `/users/${i}?token=abc`,
  permission_id: "billing-api:get:/users/{id}",
  decision: i % 3 === 0 ? "denied" : "allowed",
  reason: i % 3 === 0 ? "operation_not_allowed" : null,
  transport: "http",
  requestId: `req-${i}`,
  time: new Date("2026-06-01T12:30:00.000Z"),
  ...extra,
});

async function sumUsage(store: Store): Promise<{ day: number; hour: number }> {
  const sums = { day: 0, hour: 0 };
  for (const [key, count] of Object.entries(await store.readCounters(USAGE_COUNTERS))) {
    const parsed = parseUsageKey(key);
    if (parsed !== undefined) sums[parsed.granularity] += count;
  }
  return sums;
}

describe("decision recorder on SQLite", () => {
  let dir: TempDir;
  let store: Store;

  before(async () => {
    dir = await makeTempDir("recorder-");
    store = await openStore(`sqlite:${join(dir.path, "a.db")}`);
  });
  after(async () => {
    await store.close();
    await dir.cleanup();
  });

  test("one decision → one audit record (stored when record() resolves) and one count per period", async () => {
    const recorder = createDecisionRecorder({ store });
    const record = await recorder.record(decision(1));
    assert.equal(record.kind, "decision");
    assert.equal(record.path, "/users/1", "query strings are never stored");
    assert.equal(record.reason, null);
    const [entry] = await store.readLog<Record<string, unknown>>("audit");
    assert.equal(entry?.value.id, record.id);
    assert.equal(entry?.value.time, "2026-06-01T12:30:00.000Z");
    assert.equal(await recorder.flush(5000), true);
    assert.deepEqual(await sumUsage(store), { day: 1, hour: 1 });
    const keys = Object.keys(await store.readCounters(USAGE_COUNTERS));
    assert.deepEqual(keys.sort(), [
      "d|2026-06-01|partner-1|agent-1|billing-api|billing-api%3Aget%3A%2Fusers%2F%7Bid%7D|allowed",
      "h|2026-06-01T12|partner-1|agent-1|billing-api|billing-api%3Aget%3A%2Fusers%2F%7Bid%7D|allowed",
    ]);
    await recorder.close();
  });

  test("closing refuses further records and counts them as dropped", async () => {
    const recorder = createAuditRecorder({ store });
    assert.deepEqual(await recorder.close(), { flushed: true, lost: 0 });
    await assert.rejects(recorder.record(decision(2)), AuditClosedError);
    assert.equal(recorder.dropped(), 1);
    assert.equal(recorder.accepting(), false);
  });

  test("options are validated at construction", () => {
    assert.throws(() => createAuditRecorder({ store, maxPending: 0 }));
    assert.throws(() => createAuditRecorder({ store, retry: { initialDelayMs: 100, maxDelayMs: 10 } }));
    assert.throws(() => createAuditRecorder({ store, reprLimit: 2 }));
  });
});

describe("decision recorder through a Redis outage", () => {
  let redis: RedisServerHandle;

  before(async () => {
    redis = await startRedisServer();
  });
  after(() => redis.stop());

  const open = () => openStore(redis.url, { redis: { readyTimeoutMs: 200, connectTimeoutMs: 500 } });

  test("buffers while the store is down, keeps order, and loses nothing after recovery", async () => {
    const store = await open();
    const recorder = createAuditRecorder({ store, retry: { initialDelayMs: 20, maxDelayMs: 200 } });
    const before = await store.logLength("audit");
    await redis.stop();
    const inputs = Array.from({ length: 60 }, (_, i) => decision(i));
    // Every record() settles (queued) although nothing can be written.
    await Promise.all(inputs.map((input) => recorder.record(input)));
    assert.equal(recorder.pending(), 60);
    assert.equal(recorder.stats().state, "failing");
    assert.equal(recorder.dropped(), 0);

    await redis.start();
    assert.equal(await recorder.flush(20_000), true);
    assert.equal(recorder.pending(), 0);
    assert.equal(recorder.stats().state, "ok");
    const entries = await store.readLog<{ requestId: string }>("audit", { afterSeq: before, limit: 1000 });
    assert.deepEqual(
      entries.map((e) => e.value.requestId),
      inputs.map((i) => i.requestId),
    );
    assert.deepEqual(await sumUsage(store), { day: 60, hour: 60 });
    assert.deepEqual(await recorder.close(), { flushed: true, lost: 0 });
    await store.close();
  });

  test("past the bound, records are refused (dropped counted) and never half-written", async () => {
    const store = await open();
    const recorder = createAuditRecorder({
      store,
      maxPending: 5,
      retry: { initialDelayMs: 20, maxDelayMs: 100 },
    });
    await redis.stop();
    for (let i = 0; i < 5; i++) await recorder.record(decision(100 + i));
    assert.equal(recorder.accepting(), false);
    await assert.rejects(recorder.record(decision(105)), (error: unknown) => {
      assert.ok(error instanceof AuditBufferFullError);
      assert.equal(error.authorityCode, "upstream_unavailable");
      return true;
    });
    assert.equal(recorder.dropped(), 1);
    await redis.start();
    assert.equal(await recorder.flush(20_000), true);
    const entries = await store.readLog<{ requestId: string }>("audit", { limit: 1000 });
    const ids = entries.map((e) => e.value.requestId);
    assert.equal(ids.filter((id) => id.startsWith("req-10")).length, 5);
    assert.equal(ids.includes("req-105"), false);
    await recorder.close();
    await store.close();
  });

  test("close() with the store still down reports what was lost", async () => {
    const store = await open();
    const recorder = createAuditRecorder({ store, retry: { initialDelayMs: 20, maxDelayMs: 50 } });
    await redis.stop();
    await recorder.record(decision(200));
    await recorder.recordEvidence({
      binding_id: "b-1",
      actor: "w",
      subject_id: "s",
      partner_id: "p",
      capability_id: null,
      permission_id: null,
      decision: "denied",
      reason: "missing_policy",
      requestId: "r",
      time: new Date(),
    });
    const result = await recorder.close(300);
    assert.deepEqual(result, { flushed: false, lost: 2 });
    assert.equal(recorder.lost(), 2);
    await redis.start();
    await store.close();
  });
});
