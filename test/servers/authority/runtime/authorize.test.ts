import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { DecisionAuditRecord } from "../../../../src/audit/records.ts";
import type { PolicyRecord } from "../../../../src/policy/record.ts";
import { collections, logs, storeKeys } from "../../../../src/store/model.ts";
import { type Harness, startHarness } from "./harness.ts";
import { CAPABILITY, seedAll, seedPolicy, seedSubject } from "./seed.ts";

const decisionRecords = async (h: Harness): Promise<DecisionAuditRecord[]> => {
  assert.equal(await h.service.recorder.flush(5000), true);
  const entries = await h.service.context.store.readLog<DecisionAuditRecord>(logs.audit, { limit: 1000 });
  return entries.map((e) => e.value).filter((v) => v.kind === "decision");
};

describe("POST /v1/authorize-invocation over HTTP", () => {
  let h: Harness;
  let token: string;
  const ask = (extra: Record<string, unknown> = {}) => ({
    subject: { subject_id: "agent-7" },
    capability_id: CAPABILITY,
    method: "GET",
    path: "/users/42",
    ...extra,
  });

  before(async () => {
    h = await startHarness();
    await seedAll(h.service.context.store, h.service.context.protector);
    token = await h.token("agent-7");
  });
  after(() => h.close());

  test("allows a permitted operation with the spec's Allow object", async () => {
    const res = await h.authorize(ask(), token);
    assert.equal(res.status, 200);
    assert.deepEqual(Object.keys(res.body).sort(), ["permissionId", "requestId", "status"]);
    assert.equal(res.body.status, "allowed");
    assert.equal(res.body.permissionId, "billing-api:get:/users/{id}");
    assert.equal(typeof res.body.requestId, "string");
  });

  test("accepts the path template itself and a request without a body subject", async () => {
    const res = await h.authorize(
      { capability_id: CAPABILITY, method: "post", path: "/invoices?x=1" },
      token,
    );
    assert.equal(res.status, 200);
    assert.equal(res.body.permissionId, "billing-api:post:/invoices");
  });

  type DenyCall = () => Promise<{ status: number; body: Record<string, unknown> }>;
  const rule = (name: string) => ({ rule: name });
  // The allow list's step is the only one that names a permission (decision 2685).
  const askPermission = (permission_id: string) => ({
    rule: "decide/allowlist",
    remedy: { action: "request_permission", permission_id },
  });
  const denies: Array<[string, number, DenyCall, Record<string, unknown>]> = [
    ["missing_subject", 401, () => h.authorize(ask()), rule("auth/subject")],
    ["invalid_token", 401, () => h.authorize(ask(), "not-a-jwt"), rule("auth/token")],
    [
      "missing_capability",
      400,
      () => h.authorize({ subject: { subject_id: "agent-7" }, method: "GET", path: "/users/1" }, token),
      rule("request/capability"),
    ],
    [
      "missing_capability",
      400,
      () => h.authorize(ask({ capability_id: "" }), token),
      rule("request/capability"),
    ],
    [
      "unknown_capability",
      403,
      () => h.authorize(ask({ capability_id: "no-such-api" }), token),
      rule("catalog/capability"),
    ],
    [
      "unknown_capability",
      403,
      () => h.authorize(ask({ capability_id: "bad:id" }), token),
      rule("catalog/capability"),
    ],
    [
      "subject_mismatch",
      403,
      () => h.authorize(ask({ subject: { subject_id: "agent-8" } }), token),
      rule("policy/subject"),
    ],
    [
      "unknown_operation",
      403,
      () => h.authorize(ask({ path: "/nothing/here" }), token),
      rule("catalog/operation"),
    ],
    [
      "unknown_operation",
      403,
      () => h.authorize(ask({ path: "/users/../admin" }), token),
      rule("catalog/operation"),
    ],
    ["unknown_operation", 403, () => h.authorize(ask({ method: "BREW" }), token), rule("catalog/operation")],
    [
      "operation_not_allowed",
      403,
      () => h.authorize(ask({ method: "DELETE" }), token),
      askPermission("billing-api:delete:/users/{id}"),
    ],
    [
      "operation_not_allowed",
      403,
      () => h.authorize(ask({ path: "/users/me" }), token),
      askPermission("billing-api:get:/users/me"),
    ],
  ];
  for (const [reason, status, call, explanation] of denies) {
    test(`denies ${reason} with ${status}, naming its rule and any remedy`, async () => {
      const res = await call();
      assert.equal(res.status, status);
      assert.equal(typeof res.body.requestId, "string");
      assert.deepEqual(res.body, { status: "denied", reason, requestId: res.body.requestId, ...explanation });
    });
  }

  test("missing_subject answers with a Bearer challenge", async () => {
    const res = await fetch(`${h.url}/v1/authorize-invocation`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(ask()),
    });
    assert.equal(res.status, 401);
    assert.match(res.headers.get("www-authenticate") ?? "", /^Bearer/);
  });

  test("missing_policy: a known subject without a policy, and a subject the authority does not know", async () => {
    await seedSubject(h.service.context.store, { subjectId: "agent-bare" });
    for (const subject of ["agent-bare", "stranger"]) {
      const res = await h.authorize(ask({ subject: { subject_id: subject } }), await h.token(subject));
      assert.equal(res.status, 403);
      assert.equal(res.body.reason, "missing_policy");
    }
  });

  test("policy_revoked and policy_expired", async () => {
    const { store, protector } = h.service.context;
    const revoked = await seedSubject(store, { subjectId: "agent-revoked" });
    await seedPolicy(store, protector, {
      subject: revoked,
      allow: [["GET", "/users/{id}"]],
      revokedAt: new Date().toISOString(),
    });
    const expired = await seedSubject(store, { subjectId: "agent-expired" });
    await seedPolicy(store, protector, {
      subject: expired,
      allow: [["GET", "/users/{id}"]],
      now: new Date("2026-01-01T00:00:00Z"),
      expiresAt: "2026-01-02T00:00:00.000Z",
    });
    for (const [subject, reason] of [
      ["agent-revoked", "policy_revoked"],
      ["agent-expired", "policy_expired"],
    ] as const) {
      const res = await h.authorize(ask({ subject: { subject_id: subject } }), await h.token(subject));
      assert.equal(res.status, 403);
      assert.equal(res.body.reason, reason);
    }
  });

  test("a revocation is seen on the very next call", async () => {
    const { store, protector } = h.service.context;
    const subject = await seedSubject(store, { subjectId: "agent-live" });
    await seedPolicy(store, protector, { subject, allow: [["GET", "/users/{id}"]] });
    const live = await h.token("agent-live");
    const body = ask({ subject: { subject_id: "agent-live" } });
    assert.equal((await h.authorize(body, live)).body.status, "allowed");
    assert.equal((await h.authorize(body, live)).body.status, "allowed");
    await seedPolicy(store, protector, {
      subject,
      allow: [["GET", "/users/{id}"]],
      revokedAt: new Date().toISOString(),
    });
    const res = await h.authorize(body, live);
    assert.equal(res.status, 403);
    assert.equal(res.body.reason, "policy_revoked");
  });

  test("a tampered artifact (one flipped byte, record otherwise unchanged) fails verification, even after a cached allow", async () => {
    const { store, protector } = h.service.context;
    const subject = await seedSubject(store, { subjectId: "agent-tamper" });
    const record = await seedPolicy(store, protector, { subject, allow: [["GET", "/users/{id}"]] });
    const t = await h.token("agent-tamper");
    const body = ask({ subject: { subject_id: "agent-tamper" } });
    assert.equal((await h.authorize(body, t)).body.status, "allowed");
    const bytes = Buffer.from(record.artifact, "base64");
    const at = Math.floor(bytes.length / 2);
    bytes[at] = (bytes[at] ?? 0) ^ 0x01;
    const tampered: PolicyRecord = { ...record, artifact: bytes.toString("base64") };
    await store.put(collections.policies, storeKeys.policy("agent-tamper"), tampered);
    const res = await h.authorize(body, t);
    assert.equal(res.status, 403);
    assert.equal(res.body.reason, "policy_verification_failed");
  });

  test("an artifact copied into another subject's record fails verification (sealed to the other subject's keys)", async () => {
    const { store, protector } = h.service.context;
    const victim = await seedSubject(store, { subjectId: "agent-victim" });
    await seedPolicy(store, protector, { subject: victim, allow: [] });
    const rich = await seedSubject(store, { subjectId: "agent-rich" });
    const richRecord = await seedPolicy(store, protector, { subject: rich, allow: [["GET", "/users/{id}"]] });
    const victimRecord = await store.get<PolicyRecord>(
      collections.policies,
      storeKeys.policy("agent-victim"),
    );
    assert.ok(victimRecord);
    const t = await h.token("agent-victim");
    const body = ask({ subject: { subject_id: "agent-victim" } });
    assert.equal((await h.authorize(body, t)).body.reason, "operation_not_allowed");
    // Only the artifact moves; then the whole record (hash and head too).
    for (const copy of [
      { ...victimRecord, artifact: richRecord.artifact },
      { ...richRecord, subject_id: "agent-victim", head: victimRecord.head + 5 },
    ]) {
      await store.put(collections.policies, storeKeys.policy("agent-victim"), copy);
      const res = await h.authorize(body, t);
      assert.equal(res.status, 403);
      assert.equal(res.body.reason, "policy_verification_failed");
    }
  });

  test("wrong types are invalid_request (400), not decisions", async () => {
    const before = (await decisionRecords(h)).length;
    for (const bad of [
      { capability_id: 7, method: "GET", path: "/x" },
      { capability_id: CAPABILITY, method: "GET" },
      { capability_id: CAPABILITY, method: "GET", path: "/x", extra: true },
      { subject: "agent-7", capability_id: CAPABILITY, method: "GET", path: "/x" },
    ]) {
      const res = await h.authorize(bad, token);
      assert.equal(res.status, 400);
      assert.equal(res.body.error, "invalid_request");
    }
    assert.equal((await decisionRecords(h)).length, before);
  });

  test("every decision above was recorded exactly once, with actor, subject, capability, reason and time", async () => {
    const records = await decisionRecords(h);
    const ids = new Set(records.map((r) => r.requestId));
    assert.equal(ids.size, records.length, "one record per request");
    const reasons = new Set(records.map((r) => r.reason));
    for (const reason of [
      "missing_subject",
      "missing_capability",
      "unknown_capability",
      "missing_policy",
      "policy_verification_failed",
      "subject_mismatch",
      "policy_revoked",
      "policy_expired",
      "unknown_operation",
      "operation_not_allowed",
    ]) {
      assert.ok(reasons.has(reason as never), `a ${reason} record`);
    }
    const allow = records.find((r) => r.decision === "allowed");
    assert.ok(allow);
    assert.equal(allow.actor, "agent-7");
    assert.equal(allow.partner_id, "partner-1");
    assert.equal(allow.transport, "http");
    assert.equal(allow.path, "/users/42");
    const notAllowed = records.find((r) => r.reason === "operation_not_allowed");
    assert.equal(notAllowed?.permission_id, "billing-api:delete:/users/{id}");
    const anonymous = records.find((r) => r.reason === "missing_subject");
    assert.equal(anonymous?.actor, null);
    const usage = await h.service.context.store.readCounters("usage", "d|");
    const total = Object.values(usage).reduce((a, b) => a + b, 0);
    assert.equal(total, records.length);
  });
});
