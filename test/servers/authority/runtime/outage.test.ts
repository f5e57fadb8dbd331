import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { DecisionAuditRecord } from "../../../../src/audit/records.ts";
import { USAGE_COUNTERS } from "../../../../src/audit/usage.ts";
import { logs } from "../../../../src/store/model.ts";
import { type RedisServerHandle, startRedisServer } from "../../../helpers/redis-server.ts";
import { makeTempDir, type TempDir } from "../../../helpers/temp-dir.ts";
import { type Harness, startHarness } from "./harness.ts";
import { CAPABILITY, seedAll } from "./seed.ts";

describe("store outage (Redis stopped and restarted)", () => {
  let redis: RedisServerHandle;
  let aofDir: TempDir;
  let h: Harness;

  before(async () => {
    aofDir = await makeTempDir("authority-aof-");
    // Persisted so the restarted server has the seeded records again, as a real one would.
    redis = await startRedisServer({
      args: ["--appendonly", "yes", "--appendfsync", "always", "--dir", aofDir.path],
    });
    h = await startHarness({ storeUrl: redis.url });
    await seedAll(h.service.context.store, h.service.context.protector);
  });
  after(async () => {
    await h.close();
    await redis.stop();
    await aofDir.cleanup();
  });

  test("503 denies while down, recovery after restart, and every buffered record lands", async () => {
    const token = await h.token("agent-7");
    const allow = { capability_id: CAPABILITY, method: "GET", path: "/users/1" };
    assert.equal((await h.authorize(allow, token)).status, 200);
    assert.equal(await h.service.recorder.flush(5000), true);
    const before = await h.service.context.store.logLength(logs.audit);

    await redis.stop();
    const during = await Promise.all([
      ...Array.from({ length: 12 }, () => h.authorize(allow, token)),
      h.authorize({ capability_id: CAPABILITY, method: "DELETE", path: "/users/1" }, token),
      h.authorize(allow),
    ]);
    for (const res of during.slice(0, 13)) {
      assert.equal(res.status, 503);
      assert.equal(typeof res.body.requestId, "string");
      assert.deepEqual(res.body, {
        status: "denied",
        reason: "upstream_unavailable",
        requestId: res.body.requestId,
        rule: "service/unavailable",
        remedy: { action: "retry_later" },
      });
    }
    // No subject needs no store: still the ordinary 401 deny.
    assert.equal(during[13]?.status, 401);
    assert.equal(h.service.recorder.pending(), during.length);
    assert.equal(h.service.recorder.stats().state, "failing");
    const ready = await fetch(`${h.url}/readyz`);
    assert.equal(ready.status, 503);

    await redis.start();
    assert.equal(await h.service.recorder.flush(20_000), true);
    assert.equal(h.service.recorder.pending(), 0);
    assert.equal(h.service.recorder.dropped(), 0);

    const entries = await h.service.context.store.readLog<DecisionAuditRecord>(logs.audit, {
      afterSeq: before,
      limit: 1000,
    });
    assert.deepEqual(
      new Set(entries.map((e) => e.value.requestId)),
      new Set(during.map((r) => r.body.requestId)),
      "every decision made during the outage is in the log, once",
    );
    assert.equal(entries.length, during.length);
    const usage = await h.service.context.store.readCounters(USAGE_COUNTERS, "d|");
    assert.equal(
      Object.values(usage).reduce((a, b) => a + b, 0),
      1 + during.length,
    );

    const recovered = await h.authorize(allow, token);
    assert.equal(recovered.status, 200);
    assert.equal(recovered.body.status, "allowed");
    assert.equal((await fetch(`${h.url}/readyz`)).status, 200);
  });
});
