/**
 * Receipts on binding invoke and broker execute (decision 2771): each answer whose decision
 * was recorded carries `x-authority-receipt`, and the receipt finds exactly that record through
 * GET /admin/audit/receipts/{receipt}; an idempotent replay answers the original's receipt.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { BINDING, type BindingsHarness, PARTNER, type Reply, startBindingsHarness } from "./harness.ts";

describe("receipts on invoke and broker execute", () => {
  let h: BindingsHarness;
  before(async () => {
    h = await startBindingsHarness();
  });
  after(async () => {
    await h.close();
  });

  /** The record the answer's receipt finds, read as the partner's admin. */
  async function recordOf(reply: Reply): Promise<Record<string, unknown>> {
    const receipt = reply.headers.get("x-authority-receipt");
    assert.match(receipt ?? "", /^r2\.a\.\d+\.[A-Za-z0-9_-]{22}$/, "the answer carries a decision receipt");
    assert.equal(await h.context.decisions.recorder.flush(5000), true);
    const partnerAdmin = await h.adminToken(["partner_admin"], PARTNER);
    const found = await h.call("GET", `/admin/audit/receipts/${encodeURIComponent(receipt ?? "")}`, {
      token: partnerAdmin,
    });
    assert.equal(found.status, 200, JSON.stringify(found.body));
    assert.equal(found.body.requestId, reply.body.requestId, "the receipt finds this call's record");
    return found.body;
  }

  it("an allowed and a denied invoke each find their record; a replay keeps the original's", async () => {
    const key = `receipt-${Date.now()}`;
    const allowed = await h.invoke(
      { capability_id: "customers", method: "GET", path: "/customers" },
      { key },
    );
    assert.equal(allowed.status, 200, JSON.stringify(allowed.body));
    const record = await recordOf(allowed);
    assert.deepEqual([record.decision, record.transport, record.path], ["allowed", "invoke", "/customers"]);
    const replayed = await h.invoke(
      { capability_id: "customers", method: "GET", path: "/customers" },
      { key },
    );
    assert.equal(replayed.headers.get("idempotent-replayed"), "true");
    assert.equal(replayed.headers.get("x-authority-receipt"), allowed.headers.get("x-authority-receipt"));

    const denied = await h.invoke({ capability_id: "customers", method: "DELETE", path: "/customers/cus_1" });
    assert.equal(denied.status, 403, JSON.stringify(denied.body));
    const deniedRecord = await recordOf(denied);
    assert.equal(deniedRecord.decision, "denied");
    // Refused after the decision (the input schema): the receipt finds the denied record too.
    const invalid = await h.invoke({
      capability_id: "customers",
      method: "POST",
      path: "/customers",
      arguments: { body: { unexpected: true } },
    });
    assert.equal(invalid.status, 400);
    assert.equal((await recordOf(invalid)).reason, "invalid_input");
  });

  it("a broker execute finds its record", async () => {
    const token = await h.workloadToken(h.agent, "authority/authority.broker.execute");
    const reply = await h.call("POST", "/v1/broker/execute", {
      token,
      body: {
        binding_id: BINDING,
        capability_id: "customers",
        method: "GET",
        path: "/customers/cus_00000002",
      },
      headers: { "x-authority-user-assertion": await h.userAssertion() },
    });
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
    const record = await recordOf(reply);
    assert.deepEqual([record.decision, record.transport], ["allowed", "broker"]);
  });
});
