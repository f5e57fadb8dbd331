import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { DecisionAuditRecord } from "../../../../src/audit/records.ts";
import { parseUsageKey, USAGE_COUNTERS } from "../../../../src/audit/usage.ts";
import { logs } from "../../../../src/store/model.ts";
import { type Harness, startHarness } from "./harness.ts";
import { CAPABILITY, seedAll } from "./seed.ts";

const N = 300;

describe("audit conservation under concurrency", () => {
  let h: Harness;

  before(async () => {
    h = await startHarness();
    await seedAll(h.service.context.store, h.service.context.protector);
  });
  after(() => h.close());

  test(`${N} concurrent mixed decisions → exactly ${N} decision records and usage counts summing to ${N}`, async () => {
    const token = await h.token("agent-7");
    const kinds = [
      () => h.authorize({ capability_id: CAPABILITY, method: "GET", path: "/users/1" }, token),
      () => h.authorize({ capability_id: CAPABILITY, method: "DELETE", path: "/users/1" }, token),
      () => h.authorize({ capability_id: CAPABILITY, method: "GET", path: "/nope" }, token),
      () => h.authorize({ capability_id: "other-api", method: "GET", path: "/users/1" }, token),
      () => h.authorize({ capability_id: CAPABILITY, method: "GET", path: "/users/1" }),
      () =>
        h.authorize(
          { subject: { subject_id: "x" }, capability_id: CAPABILITY, method: "GET", path: "/" },
          token,
        ),
    ];
    const call = (i: number) => {
      const kind = kinds[i % kinds.length];
      assert.ok(kind);
      return kind();
    };
    const responses = await Promise.all(Array.from({ length: N }, (_, i) => call(i)));
    const allowed = responses.filter((r) => r.body.status === "allowed").length;
    assert.equal(allowed, N / kinds.length);
    assert.equal(responses.filter((r) => r.body.status === "denied").length, N - allowed);

    assert.equal(await h.service.recorder.flush(10_000), true);
    assert.equal(h.service.recorder.dropped(), 0);
    const entries = await h.service.context.store.readLog<DecisionAuditRecord>(logs.audit, { limit: 1000 });
    const decisions = entries.map((e) => e.value).filter((v) => v.kind === "decision");
    assert.equal(decisions.length, N);
    assert.deepEqual(
      new Set(decisions.map((d) => d.requestId)),
      new Set(responses.map((r) => r.body.requestId)),
      "one record per answered request, none twice",
    );
    assert.equal(new Set(decisions.map((d) => d.id)).size, N);

    const counters = await h.service.context.store.readCounters(USAGE_COUNTERS);
    const sums = { day: { allowed: 0, denied: 0 }, hour: { allowed: 0, denied: 0 } };
    for (const [key, count] of Object.entries(counters)) {
      const parsed = parseUsageKey(key);
      assert.ok(parsed, key);
      sums[parsed.granularity][parsed.state] += count;
    }
    for (const granularity of ["day", "hour"] as const) {
      assert.equal(sums[granularity].allowed + sums[granularity].denied, N);
      assert.equal(sums[granularity].allowed, allowed);
    }
  });
});
