/**
 * POST /partners/{id}/explain on a real authority: the trace of each outcome, and the partner
 * scope (another partner's subject or capability reads as unknown, nothing of it leaks).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { type Harness, startHarness } from "./harness.ts";
import { PARTNER, seedAll, seedPartner, seedPolicy, seedSubject, snapshot } from "./seed.ts";

const OTHER = "partner-2";

interface Trace {
  readonly steps: Array<{ step: string; outcome: string; inputs: Record<string, unknown> }>;
  readonly result: {
    status: string;
    permission_id: string | null;
    reason?: string;
    rule: string;
    remedy?: Record<string, unknown>;
    log_only?: { reason: string; rule: string };
  };
  readonly reason?: string;
}

describe("admin explain", () => {
  let h: Harness;
  let admin: string;
  let otherAdmin: string;
  const explain = async (token: string, body: unknown, partner = PARTNER) => {
    const response = await fetch(`${h.url}/partners/${partner}/explain`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as Trace };
  };
  const ask = (extra: Record<string, unknown>) => ({
    subject_id: "agent-7",
    capability_id: "billing-api",
    ...extra,
  });
  const outcomes = (body: Trace) => Object.fromEntries(body.steps.map((s) => [s.step, s.outcome]));

  before(async () => {
    h = await startHarness({
      // Records read on every call: the log-only case turns the mode on mid-run.
      settings: {
        "parameter-scoping": "true",
        "parameter-scoping-partners": PARTNER,
        "record-cache-ms": "0",
      },
    });
    const { store, protector } = h.service.context;
    const { subject } = await seedAll(store, protector, { allow: [["GET", "/users/{id}"]] });
    const limited = {
      ...snapshot("GET", "/users/{id}"),
      parameter_constraints: [{ in: "path" as const, name: "id", max_length: 4 }],
    };
    await seedPolicy(store, protector, { subject, allow: [["GET", "/users/{id}"]], operations: [limited] });
    const revoked = await seedSubject(store, { subjectId: "agent-gone" });
    await seedPolicy(store, protector, {
      subject: revoked,
      allow: [["GET", "/users/{id}"]],
      revokedAt: new Date().toISOString(),
    });
    await seedPartner(store, OTHER);
    await seedSubject(store, { subjectId: "agent-other", partnerId: OTHER });
    admin = await h.token("pa-1", { roles: ["partner_admin"], partnerId: PARTNER });
    otherAdmin = await h.token("pa-2", { roles: ["partner_admin"], partnerId: OTHER });
  });
  after(() => h.close());

  it("refuses another partner's admin, and answers another partner's subject as unknown", async () => {
    const foreign = await explain(otherAdmin, ask({ method: "GET", path: "/users/1" }));
    assert.equal(foreign.status, 403);
    const crossed = await explain(otherAdmin, ask({ method: "GET", path: "/users/1" }), OTHER);
    assert.equal(crossed.status, 404);
    const unknown = await explain(
      otherAdmin,
      ask({ subject_id: "nobody", method: "GET", path: "/users/1" }),
      OTHER,
    );
    assert.deepEqual(crossed.body.reason, unknown.body.reason);
    assert.doesNotMatch(JSON.stringify(crossed.body), /billing-api|agent-7|users/);
    const otherSubject = await explain(
      admin,
      ask({ subject_id: "agent-other", method: "GET", path: "/users/1" }),
    );
    assert.equal(otherSubject.status, 404);
  });

  it("traces an allow with its inputs by reference", async () => {
    const { status, body } = await explain(admin, ask({ method: "GET", path: "/users/12" }));
    assert.equal(status, 200);
    assert.equal(body.result.status, "allowed");
    assert.equal(body.result.permission_id, "billing-api:get:/users/{id}");
    assert.deepEqual(outcomes(body), {
      subject: "passed",
      capability: "passed",
      policy: "passed",
      decision: "passed",
      input_schema: "passed",
      constraints: "passed",
    });
    const policy = body.steps.find((s) => s.step === "policy");
    assert.match(String(policy?.inputs.policy_hash), /^sha256:/);
    assert.equal(body.steps[1]?.inputs.catalog_version, "1");
  });

  it("explains an allow-list deny with the permission to ask for", async () => {
    const { body } = await explain(admin, ask({ method: "DELETE", path: "/users/12" }));
    assert.equal(body.result.reason, "operation_not_allowed");
    assert.equal(body.result.rule, "decide/allowlist");
    assert.equal(body.result.remedy?.permission_id, "billing-api:delete:/users/{id}");
    assert.equal(outcomes(body).decision, "denied");
  });

  it("explains an unknown operation", async () => {
    const { body } = await explain(admin, ask({ method: "GET", path: "/nowhere" }));
    assert.equal(body.result.reason, "unknown_operation");
    assert.equal(body.result.rule, "catalog/operation");
    assert.equal(outcomes(body).input_schema, "skipped");
  });

  it("explains a constraint violation at the constraints step", async () => {
    const { body } = await explain(admin, ask({ method: "GET", path: "/users/123456" }));
    assert.equal(body.result.reason, "constraint_violation");
    assert.match(body.result.rule, /^constraints\//);
    assert.deepEqual([outcomes(body).input_schema, outcomes(body).constraints], ["passed", "denied"]);
  });

  it("explains a revoked policy with its remedy", async () => {
    const { body } = await explain(admin, ask({ subject_id: "agent-gone", method: "GET", path: "/users/1" }));
    assert.equal(body.result.reason, "policy_revoked");
    assert.equal(body.result.rule, "policy/revoked");
    assert.deepEqual(body.result.remedy, { action: "contact_partner" });
  });

  // Last: the capability stays in the log-only mode.
  it("applies the log-only mode: an allow-list deny is explained as the allow it would be, marked log-only", async () => {
    const platform = await h.token("ops", { roles: ["admin"] });
    const enabled = await fetch(`${h.url}/admin/log-only/${PARTNER}/billing-api`, {
      method: "PUT",
      headers: { authorization: `Bearer ${platform}`, "content-type": "application/json" },
      body: JSON.stringify({ reason: "onboarding" }),
    });
    assert.equal(enabled.status, 200);
    const { status, body } = await explain(admin, ask({ method: "DELETE", path: "/users/12" }));
    assert.equal(status, 200);
    assert.equal(body.result.status, "allowed", JSON.stringify(body));
    assert.equal(body.result.permission_id, "billing-api:delete:/users/{id}");
    assert.deepEqual(body.result.log_only, { reason: "operation_not_allowed", rule: "decide/allowlist" });
    const decision = body.steps.find((s) => s.step === "decision");
    assert.equal(decision?.outcome, "passed");
    assert.equal(decision?.inputs.log_only, true);
    // Only the allow list is relaxed: an unknown operation is still denied, and not marked.
    const unknown = await explain(admin, ask({ method: "GET", path: "/nowhere" }));
    assert.equal(unknown.body.result.reason, "unknown_operation");
    assert.equal(unknown.body.result.log_only, undefined);
    // An allow the policy gives itself is not marked log-only.
    const own = await explain(admin, ask({ method: "GET", path: "/users/12" }));
    assert.equal(own.body.result.status, "allowed");
    assert.equal(own.body.result.log_only, undefined);
  });

  it("validates its input", async () => {
    const { status } = await explain(admin, ask({ method: "GET", path: "users", extra: 1 }));
    assert.equal(status, 400);
  });
});
