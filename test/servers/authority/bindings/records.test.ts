import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { DecisionAuditRecord } from "../../../../src/audit/records.ts";
import { USAGE_COUNTERS } from "../../../../src/audit/usage.ts";
import { BINDING, type BindingsHarness, type Reply, startBindingsHarness } from "./harness.ts";

/**
 * What the records say about refused invoke calls and about replays: the admin audit, the
 * usage counters and the evidence (the binding's record and the shared `evidence` log).
 */
describe("binding invoke records and replays", () => {
  let h: BindingsHarness;
  before(async () => {
    h = await startBindingsHarness();
  });
  after(async () => {
    await h.close();
  });

  async function flushed(): Promise<void> {
    assert.equal(await h.context.decisions.recorder.flush(5000), true);
  }

  async function decisionsOf(requestId: string): Promise<DecisionAuditRecord[]> {
    await flushed();
    const entries = await h.store.readLog<DecisionAuditRecord>("audit", { limit: 1000 });
    return entries.map((e) => e.value).filter((r) => r.kind === "decision" && r.requestId === requestId);
  }

  async function evidenceLogOf(requestId: string): Promise<{ decision: string; reason: string | null }[]> {
    await flushed();
    const entries = await h.store.readLog<{ decision: string; reason: string | null; requestId: string }>(
      "evidence",
      { limit: 1000 },
    );
    return entries.map((e) => e.value).filter((r) => r.requestId === requestId);
  }

  async function usage(subjectId: string, state: "allowed" | "denied"): Promise<number> {
    await flushed();
    const counters = await h.store.readCounters(USAGE_COUNTERS, "d|");
    return Object.entries(counters)
      .filter(([key]) => key.split("|")[3] === subjectId && key.endsWith(`|${state}`))
      .reduce((sum, [, n]) => sum + n, 0);
  }

  async function bindingEvidence(requestId: string) {
    const listed = await h.call("GET", `/v1/bindings/${BINDING}/invocations?limit=1000`, { token: h.admin });
    assert.equal(listed.status, 200);
    return listed.body.items.filter((e: { requestId: string }) => e.requestId === requestId);
  }

  /** One denied record everywhere, with this reason. */
  async function assertRecordedDenied(reply: Reply, reason: string, subjectId: string): Promise<void> {
    const requestId: string = reply.body.requestId;
    const decisions = await decisionsOf(requestId);
    assert.deepEqual(
      decisions.map((d) => [d.decision, d.reason, d.transport, d.subject_id]),
      [["denied", reason, "invoke", subjectId]],
      "the admin audit holds one denied record with the reason",
    );
    const evidence = await bindingEvidence(requestId);
    assert.deepEqual(
      evidence.map((e: { decision: string; reason: string }) => [e.decision, e.reason]),
      [["denied", reason]],
      "the binding's evidence says denied with the reason",
    );
    assert.deepEqual(
      (await evidenceLogOf(requestId)).map((e) => [e.decision, e.reason]),
      [["denied", reason]],
      "the evidence log says denied with the reason",
    );
  }

  it("records invalid input after the decision as denied (audit, usage, evidence), not allowed", async () => {
    const subjectId = await h.mapUser("records-invalid");
    const assertion = await h.userAssertion("records-invalid");
    const before = { allowed: await usage(subjectId, "allowed"), denied: await usage(subjectId, "denied") };
    const upstreamBefore = h.upstream.received.length;
    const reply = await h.invoke(
      {
        capability_id: "customers",
        method: "POST",
        path: "/customers",
        arguments: { body: { unexpected: true } },
      },
      { assertion },
    );
    assert.equal(reply.status, 400, JSON.stringify(reply.body));
    assert.equal(reply.body.error, "invalid_input");
    assert.equal(h.upstream.received.length, upstreamBefore, "nothing reached the upstream");
    await assertRecordedDenied(reply, "invalid_input", subjectId);
    assert.equal(await usage(subjectId, "allowed"), before.allowed, "no allowed count");
    assert.equal(await usage(subjectId, "denied"), before.denied + 1, "one denied count");
  });

  it("records a refusal another check adds after the decision (ambiguous_path) as denied", async () => {
    const subjectId = await h.mapUser("records-ambiguous");
    const reply = await h.invoke(
      {
        capability_id: "customers",
        permission_id: "customers:get:/customers/{customerId}",
        arguments: { path: { customerId: "Me" } },
      },
      { assertion: await h.userAssertion("records-ambiguous") },
    );
    assert.equal(reply.status, 403, JSON.stringify(reply.body));
    assert.deepEqual(reply.body, {
      status: "denied",
      reason: "ambiguous_path",
      requestId: reply.body.requestId,
      rule: "decide/path-values",
    });
    await assertRecordedDenied(reply, "ambiguous_path", subjectId);
  });

  it("answers the rollout gate with the Deny shape and records it as denied", async () => {
    const subjectId = await h.mapUser("records-rollout");
    // A replica whose environment does not enable parameter scoping: constrained operations fail closed.
    const replica = await h.startReplica({
      config: { parameterScoping: { enabled: false, partnerAllowlist: [] } },
    });
    const upstreamBefore = h.upstream.received.length;
    const reply = await h.invoke(
      { capability_id: "customers", method: "GET", path: "/customers", arguments: { query: { limit: 10 } } },
      { assertion: await h.userAssertion("records-rollout"), base: replica.url },
    );
    assert.equal(reply.status, 403, JSON.stringify(reply.body));
    assert.deepEqual(reply.body, {
      status: "denied",
      reason: "operation_not_allowed",
      requestId: reply.body.requestId,
      rule: "decide/constraints-rollout",
    });
    assert.equal(h.upstream.received.length, upstreamBefore);
    assert.equal(await replica.context.decisions.recorder.flush(5000), true);
    await assertRecordedDenied(reply, "operation_not_allowed", subjectId);
    // The same call where the rollout allows constraints: the decision itself allowed it.
    const allowed = await h.invoke(
      { capability_id: "customers", method: "GET", path: "/customers", arguments: { query: { limit: 10 } } },
      { assertion: await h.userAssertion("records-rollout") },
    );
    assert.equal(allowed.status, 200, JSON.stringify(allowed.body));
  });

  it("records a call the upstream answered as allowed, once", async () => {
    const subjectId = await h.mapUser("records-allowed");
    const reply = await h.invoke(
      { capability_id: "customers", method: "GET", path: "/customers/cus_00000001" },
      { assertion: await h.userAssertion("records-allowed") },
    );
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
    const decisions = await decisionsOf(reply.body.requestId);
    assert.deepEqual(
      decisions.map((d) => [d.decision, d.reason, d.permission_id]),
      [["allowed", null, "customers:get:/customers/{customerId}"]],
    );
    assert.equal(await usage(subjectId, "allowed"), 1);
    assert.equal(await usage(subjectId, "denied"), 0);
  });

  it("answers a missing capability_id with the Deny outcome missing_capability, recorded", async () => {
    const subjectId = await h.mapUser("records-nocap");
    const reply = await h.invoke(
      { method: "GET", path: "/customers" },
      { assertion: await h.userAssertion("records-nocap") },
    );
    assert.equal(reply.status, 400);
    assert.deepEqual(reply.body, {
      status: "denied",
      reason: "missing_capability",
      requestId: reply.body.requestId,
      rule: "request/capability",
    });
    await assertRecordedDenied(reply, "missing_capability", subjectId);
  });

  it("replays a stored result only while the policy still allows it: after revocation, the current deny", async () => {
    const subjectId = await h.mapUser("replay-revoked");
    const assertion = await h.userAssertion("replay-revoked");
    const body = { capability_id: "customers", method: "GET", path: "/customers/cus_00000001" };
    const first = await h.invoke(body, { assertion, key: "replay-revoked-1" });
    assert.equal(first.status, 200, JSON.stringify(first.body));
    const replay = await h.invoke(body, { assertion, key: "replay-revoked-1" });
    assert.equal(replay.headers.get("idempotent-replayed"), "true");
    assert.deepEqual(replay.body, first.body);

    const revoked = await h.call("DELETE", `/v1/bindings/${BINDING}/subjects/${subjectId}/apis/customers`, {
      token: h.admin,
    });
    assert.equal(revoked.status, 200, JSON.stringify(revoked.body));

    const upstreamBefore = h.upstream.received.length;
    const after = await h.invoke(body, { assertion, key: "replay-revoked-1" });
    assert.equal(after.status, 403, JSON.stringify(after.body));
    assert.deepEqual(after.body, {
      status: "denied",
      reason: "policy_revoked",
      requestId: after.body.requestId,
      rule: "policy/revoked",
      remedy: { action: "contact_partner" },
    });
    assert.equal(after.headers.get("idempotent-replayed"), null);
    assert.equal(JSON.stringify(after.body).includes("cus_00000001"), false, "none of the stored data");
    assert.equal(h.upstream.received.length, upstreamBefore);
    await assertRecordedDenied(after, "policy_revoked", subjectId);
  });

  it("replays after an allowlist change only what the new allowlist allows", async () => {
    const subjectId = await h.mapUser("replay-narrowed");
    const assertion = await h.userAssertion("replay-narrowed");
    const body = { capability_id: "customers", method: "GET", path: "/customers/cus_00000001" };
    const first = await h.invoke(body, { assertion, key: "replay-narrowed-1" });
    assert.equal(first.status, 200, JSON.stringify(first.body));
    const narrowed = await h.call("POST", `/v1/bindings/${BINDING}/apis`, {
      token: h.admin,
      body: {
        subject_id: subjectId,
        capability_id: "customers",
        allowed_permission_ids: ["customers:get:/customers"],
        ttl_seconds: 3600,
      },
    });
    assert.equal(narrowed.status, 200, JSON.stringify(narrowed.body));
    const after = await h.invoke(body, { assertion, key: "replay-narrowed-1" });
    assert.deepEqual([after.status, after.body.reason], [403, "operation_not_allowed"]);
    await assertRecordedDenied(after, "operation_not_allowed", subjectId);
  });
});
