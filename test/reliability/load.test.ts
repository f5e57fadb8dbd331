/**
 * Load with nothing lost, at CI size (bench/load.ts runs the same at ≥ 20,000 decisions):
 * 2,000 mixed authorize-invocation decisions and 200 binding invokes (50 Idempotency-Keys,
 * each sent 4 times at once) at concurrency 32, on the embedded store. Afterwards: one
 * audit record per decision, usage counters equal to the records, each key executed
 * upstream exactly once with every duplicate answered the same, one evidence record per
 * executed invoke.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { runMixedLoad } from "../helpers/load-run.ts";
import { assertNoLeaks, newCounts, report } from "../helpers/suite-report.ts";
import { type System, startSystem } from "../helpers/system.ts";

const DECISIONS = 2000;
const INVOKE_KEYS = 50;
const DUPLICATES = 4;
const CONCURRENCY = 32;

const counts = newCounts();

describe("load: mixed decisions and idempotent invokes, nothing lost", () => {
  let system: System;

  // Info level: the per-request lines are what a production log would hold.
  before(async () => {
    system = await startSystem({ logLevel: "info" });
  });
  after(() => system?.close());

  test(`${DECISIONS} decisions + ${INVOKE_KEYS * DUPLICATES} invokes: records = decisions, usage = records, each key once`, async (t) => {
    const result = await runMixedLoad(system, {
      decisions: DECISIONS,
      invokeKeys: INVOKE_KEYS,
      duplicatesPerKey: DUPLICATES,
      concurrency: CONCURRENCY,
    });
    t.diagnostic(
      JSON.stringify({
        ...result,
        durationMs: Math.round(result.durationMs),
        requestsPerSecond: Math.round(result.requestsPerSecond),
      }),
    );
    assert.equal(result.unexpected, 0, "every answer is the expected decision");
    assert.equal(result.allowed + result.denied, DECISIONS);
    const expectedAllowed = Array.from({ length: DECISIONS }, (_, i) => i % 6).filter(
      (k) => k === 0 || k === 5,
    ).length;
    assert.equal(result.allowed, expectedAllowed, "two of six kinds allow");
    assert.equal(result.recordsLost, 0, "every decision has its audit record");
    assert.equal(result.duplicatedRecords, 0, "and only one");
    assert.equal(result.auditRecordsForRequests, DECISIONS);
    // Invokes decide too (transport "invoke"): every request once — the executed one and each
    // duplicate, whose stored answer is replayed only after the current decision allows it
    // (docs/decisions/0702) — while the upstream runs once per key.
    const invokes = INVOKE_KEYS * DUPLICATES;
    assert.equal(result.invokeReplays, invokes - INVOKE_KEYS);
    assert.equal(result.auditDecisionRecords, DECISIONS + invokes);
    assert.equal(result.usageCounted, result.auditDecisionRecords, "one usage count per decision record");
    assert.equal(result.usageAllowed, result.allowed + invokes);
    assert.equal(result.invokesExecutedUpstream, INVOKE_KEYS, "each Idempotency-Key executed upstream once");
    assert.equal(result.inconsistentKeys, 0, "duplicates got the first answer");
    assert.equal(result.evidenceRecords, INVOKE_KEYS);
    assert.equal(result.droppedByRecorder, 0);
    counts.recordsLost += result.recordsLost;
    report(
      t,
      "load",
      counts,
      `decisions: ${result.decisions}, audit records: ${result.auditRecordsForRequests}, usage counted: ${result.usageCounted}, ` +
        `invokes: ${result.invokes} on ${result.invokeKeys} keys, upstream executions: ${result.invokesExecutedUpstream}`,
    );
  });

  test("no canary, secret or token in any log line or response", () => {
    assertNoLeaks(system);
  });
});
