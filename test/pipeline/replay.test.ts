import assert from "node:assert/strict";
import { join } from "node:path";
import { after, test } from "node:test";
import { type DecisionAuditRecord, decisionRecord } from "../../src/audit/records.ts";
import type { HttpMethod } from "../../src/core/index.ts";
import { replayDecisions } from "../../src/pipeline/replay.ts";
import { type LogPosition, SqliteStore } from "../../src/store/index.ts";
import { CAPABILITY_ID, capability, entry, policyV1 } from "../core/fixtures.ts";
import { makeTempDir } from "../helpers/temp-dir.ts";

const dir = await makeTempDir("authority-replay-");
const store = new SqliteStore({ path: join(dir.path, "store.db"), sweepIntervalMs: 0 });
after(async () => {
  await store.close();
  await dir.cleanup();
});

type Op = [HttpMethod, string];
/** Requests and the catalog operation each one names (null: none), as the test knows them. */
const REQUESTS: ReadonlyArray<{ method: HttpMethod; path: string; op: Op | null; template?: true }> = [
  { method: "GET", path: "/users/42", op: ["GET", "/users/{id}"] },
  { method: "GET", path: "/users/me", op: ["GET", "/users/me"] },
  { method: "DELETE", path: "/users/7", op: ["DELETE", "/users/{id}"] },
  { method: "POST", path: "/invoices", op: ["POST", "/invoices"] },
  { method: "GET", path: "/invoices/1/lines/2", op: ["GET", "/invoices/{invoiceId}/lines/{lineId}"] },
  { method: "GET", path: "/users/{id}", op: ["GET", "/users/{id}"], template: true },
  { method: "PATCH", path: "/users/42", op: null },
  { method: "GET", path: "/nowhere", op: null },
];
const key = ([method, path]: Op) => `${method} ${path}`;
const BEFORE: ReadonlySet<string> = new Set(["GET /users/{id}", "DELETE /users/{id}", "POST /invoices"]);
const PROPOSED: Op[] = [
  ["GET", "/users/{id}"],
  ["GET", "/users/me"],
  ["GET", "/invoices/{invoiceId}/lines/{lineId}"],
];
const WINDOW = { since: Date.parse("2026-06-01T00:00:00Z"), until: Date.parse("2026-06-02T00:00:00Z") };

function record(i: number, subject: string, time: number): DecisionAuditRecord {
  const request = REQUESTS[i % REQUESTS.length];
  assert.ok(request);
  const allowedBefore = request.op !== null && BEFORE.has(key(request.op));
  // Every fifth allowed request was refused after the decision (its arguments): still the decision's allow.
  const refusedLater = allowedBefore && i % 5 === 0;
  return decisionRecord({
    actor: subject,
    subject_id: subject,
    partner_id: "partner-1",
    capability_id: CAPABILITY_ID,
    method: request.method,
    path: request.path,
    ...(request.template === true ? { path_is_template: true } : {}),
    permission_id: request.op === null ? null : `${CAPABILITY_ID}:${request.op[0]}:${request.op[1]}`,
    decision: allowedBefore && !refusedLater ? "allowed" : "denied",
    reason: refusedLater
      ? "invalid_input"
      : allowedBefore
        ? null
        : request.op === null
          ? "unknown_operation"
          : "operation_not_allowed",
    transport: request.template === true ? "invoke" : "http",
    requestId: `req-${subject}-${i}`,
    time: new Date(time),
  });
}

test("a replay over a recorded window reports exactly the flips the test computes on its own", async () => {
  const hour = 3_600_000;
  const written: DecisionAuditRecord[] = [];
  for (let i = 0; i < 64; i++) {
    // Some before and after the window, and another subject's, which the query must leave out.
    const time = WINDOW.since - 4 * hour + i * hour;
    written.push(record(i, "agent-7", time), record(i, "agent-8", time));
  }
  // A record without a decision (no subject): skipped, never a flip.
  written.push(
    decisionRecord({
      actor: null,
      subject_id: "agent-7",
      partner_id: "partner-1",
      capability_id: CAPABILITY_ID,
      method: "GET",
      path: "/users/1",
      decision: "denied",
      reason: "upstream_unavailable",
      transport: "http",
      requestId: "req-outage",
      time: new Date(WINDOW.since + hour),
    }),
  );
  for (const value of written) await store.append("audit", value);

  const inWindow: DecisionAuditRecord[] = [];
  let position: LogPosition | undefined;
  for (;;) {
    const page = await store.queryLog<DecisionAuditRecord>("audit", {
      where: { subject_id: "agent-7", capability_id: CAPABILITY_ID },
      ...WINDOW,
      limit: 10,
      ...(position === undefined ? {} : { after: position }),
    });
    inWindow.push(...page.entries.map((entry) => entry.value));
    if (page.next === undefined) break;
    position = page.next;
  }
  const report = replayDecisions({
    records: inWindow,
    subjectId: "agent-7",
    capability: capability(),
    proposed: policyV1([entry(PROPOSED)]),
    constraintsEnforced: true,
    examples: 100,
  });

  // Independently: from the request table, the old allowlist and the proposed one.
  const proposed = new Set(PROPOSED.map(key));
  const expected = { allowToDeny: [] as string[], denyToAllow: [] as string[], unchanged: 0 };
  let outages = 0;
  for (const value of written) {
    const time = Date.parse(value.time);
    if (value.subject_id !== "agent-7" || time < WINDOW.since || time > WINDOW.until) continue;
    if (value.requestId === "req-outage") {
      outages++;
      continue;
    }
    const i = Number(value.requestId.split("-").at(-1));
    const request = REQUESTS[i % REQUESTS.length];
    assert.ok(request);
    const before = request.op !== null && BEFORE.has(key(request.op));
    const now = request.op !== null && proposed.has(key(request.op));
    if (before && !now) expected.allowToDeny.push(value.requestId);
    else if (!before && now) expected.denyToAllow.push(value.requestId);
    else expected.unchanged++;
  }
  assert.ok(
    expected.allowToDeny.length > 0 && expected.denyToAllow.length > 0,
    "the window holds both flips",
  );
  assert.deepEqual(
    report.allow_to_deny.examples.map((example) => example.requestId),
    expected.allowToDeny,
  );
  assert.deepEqual(
    report.deny_to_allow.examples.map((example) => example.requestId),
    expected.denyToAllow,
  );
  assert.equal(report.allow_to_deny.count, expected.allowToDeny.length);
  assert.equal(report.deny_to_allow.count, expected.denyToAllow.length);
  assert.equal(report.unchanged, expected.unchanged);
  assert.deepEqual(report.skipped, { upstream_unavailable: outages });
  // A flip to deny names the rule that would decide it; a permission lost is the allow list's.
  for (const example of report.allow_to_deny.examples) {
    assert.equal(example.replayed.reason, "operation_not_allowed");
    assert.equal(example.replayed.rule, "decide/allowlist");
  }
});

test("examples are capped; counts are not", () => {
  const records = Array.from({ length: 20 }, (_, i) => record(2 + 8 * i, "agent-7", WINDOW.since + i));
  const report = replayDecisions({
    records,
    subjectId: "agent-7",
    capability: capability(),
    proposed: policyV1([entry(PROPOSED)]),
    constraintsEnforced: true,
    examples: 3,
  });
  assert.equal(report.allow_to_deny.count, 20);
  assert.equal(report.allow_to_deny.examples.length, 3);
});
