/**
 * Shadows of headless (binding) subjects through the binding API (decision 2761): set and
 * removed with the checks of the binding's own assignment, compiled under the binding's
 * context so that the runtime evaluates them, and visible in the subject's policy view.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { DecisionAuditRecord } from "../../../../src/audit/records.ts";
import { BINDING, type BindingsHarness, PARTNER, startBindingsHarness } from "./harness.ts";

const LIST = "customers:get:/customers";
const READ_ONE = "customers:get:/customers/{customerId}";

describe("binding API: shadows of headless subjects", () => {
  let h: BindingsHarness;
  const shadowPath = (subject = h.subjectId, capability = "customers") =>
    `/v1/bindings/${BINDING}/subjects/${subject}/apis/${capability}/shadow`;
  const body = { allowed_permission_ids: [LIST], ttl_seconds: 600 };

  before(async () => {
    h = await startBindingsHarness();
  });
  after(() => h.close());

  async function recordOf(requestId: string): Promise<DecisionAuditRecord | undefined> {
    assert.equal(await h.context.decisions.recorder.flush(5000), true);
    const entries = await h.store.readLog<DecisionAuditRecord>("audit", { limit: 1000 });
    return entries.map((e) => e.value).find((r) => r.kind === "decision" && r.requestId === requestId);
  }

  it("is refused where the binding's assignment would be", async () => {
    const unknown = await h.call("PUT", shadowPath(), {
      token: h.admin,
      body: { allowed_permission_ids: ["customers:get:/nowhere"], ttl_seconds: 600 },
    });
    assert.equal(unknown.status, 400, JSON.stringify(unknown.body));
    const twoExpiries = await h.call("PUT", shadowPath(), {
      token: h.admin,
      body: { ...body, expires_at: new Date(Date.now() + 60_000).toISOString() },
    });
    assert.equal(twoExpiries.status, 400, JSON.stringify(twoExpiries.body));
    const unmapped = await h.call("PUT", shadowPath("nobody"), { token: h.admin, body });
    assert.equal(unmapped.status, 404, JSON.stringify(unmapped.body));
    const unknownCapability = await h.call("PUT", shadowPath(h.subjectId, "payroll"), {
      token: h.admin,
      body,
    });
    assert.equal(unknownCapability.status, 404, JSON.stringify(unknownCapability.body));
    const other = await h.adminToken(["partner_admin"], "globex");
    const foreign = await h.call("PUT", shadowPath(), { token: other, body });
    assert.equal(foreign.status, 403, JSON.stringify(foreign.body));
    const viewer = await h.adminToken(["partner_viewer"], PARTNER);
    assert.notEqual((await h.call("PUT", shadowPath(), { token: viewer, body })).status, 200);
    // The partner route still refuses the headless subject: its policies belong to its binding.
    const partnerRoute = await h.call(
      "PUT",
      `/partners/${PARTNER}/caab/subjects/${h.subjectId}/policies/customers/shadow`,
      { token: h.admin, body },
    );
    assert.equal(partnerRoute.status, 400, JSON.stringify(partnerRoute.body));
  });

  it("is set under the binding's context, evaluated by the runtime and shown in the policy view", async () => {
    const set = await h.call("PUT", shadowPath(), { token: h.admin, body });
    assert.equal(set.status, 200, JSON.stringify(set.body));
    assert.equal(set.body.shadow_policy.crypto_version, "platform_service_v2");
    assert.deepEqual(set.body.assignment.allowed_permission_ids, [LIST]);
    assert.equal(set.body.shadow_policy.artifact, undefined);

    const reply = await h.invoke({
      capability_id: "customers",
      method: "GET",
      path: "/customers/cus_00000001",
    });
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
    const record = await recordOf(reply.body.requestId);
    assert.equal(record?.permission_id, READ_ONE);
    // Verified under the binding's context (not "invalid"), and it disagrees.
    assert.deepEqual(record?.shadow, { decision: "denied", reason: "operation_not_allowed", agrees: false });

    const view = await h.call("GET", `/partners/${PARTNER}/caab/subjects/${h.subjectId}/policy`, {
      token: h.admin,
    });
    assert.equal(view.status, 200, JSON.stringify(view.body));
    assert.deepEqual(view.body.shadow_policy.capabilities[0].allowed_permission_ids, [LIST]);
  });

  it("is removed through the binding API; decisions then carry no shadow", async () => {
    const removed = await h.call("DELETE", shadowPath(), { token: h.admin });
    assert.equal(removed.status, 200, JSON.stringify(removed.body));
    assert.equal(removed.body.shadow_policy, null);
    assert.equal((await h.call("DELETE", shadowPath(), { token: h.admin })).status, 404);
    const reply = await h.invoke({
      capability_id: "customers",
      method: "GET",
      path: "/customers/cus_00000001",
    });
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
    assert.equal((await recordOf(reply.body.requestId))?.shadow, undefined);
  });

  it("is promoted through the binding API in one recorded action, enforced at once", async () => {
    const promotePath = `${shadowPath()}/promote`;
    assert.equal((await h.call("POST", promotePath, { token: h.admin })).status, 404, "no shadow yet");
    const shadow = { allowed_permission_ids: [LIST, READ_ONE], ttl_seconds: 600 };
    assert.equal((await h.call("PUT", shadowPath(), { token: h.admin, body: shadow })).status, 200);
    const other = await h.adminToken(["partner_admin"], "globex");
    assert.equal((await h.call("POST", promotePath, { token: other })).status, 403);
    // The partner route still refuses the headless subject.
    const partnerRoute = await h.call(
      "POST",
      `/partners/${PARTNER}/caab/subjects/${h.subjectId}/policies/customers/shadow/promote`,
      { token: h.admin },
    );
    assert.equal(partnerRoute.status, 400, JSON.stringify(partnerRoute.body));

    const promoted = await h.call("POST", promotePath, { token: h.admin });
    assert.equal(promoted.status, 200, JSON.stringify(promoted.body));
    assert.deepEqual(promoted.body.assignment.allowed_permission_ids, [LIST, READ_ONE].sort());
    assert.equal(promoted.body.shadow_policy, null);
    assert.equal(promoted.body.policy.crypto_version, "platform_service_v2");
    // Enforced under the binding's context at once: the list the old assignment lacked is allowed.
    const listed = await h.invoke({ capability_id: "customers", method: "GET", path: "/customers" });
    assert.equal(listed.status, 200, JSON.stringify(listed.body));
    assert.equal((await recordOf(listed.body.requestId))?.shadow, undefined);
    const changes = await h.store.readLog<{ kind: string; action?: string; subject_id?: string }>("audit", {
      limit: 1000,
    });
    const promotions = changes.filter(
      (e) => e.value.action === "promote_shadow" && e.value.subject_id === h.subjectId,
    );
    assert.equal(promotions.length, 1, "one promote_shadow record");
    assert.equal((await h.call("POST", promotePath, { token: h.admin })).status, 404, "nothing left");
  });
});
