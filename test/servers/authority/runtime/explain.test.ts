/**
 * POST /partners/{id}/explain on a real authority: the trace of each outcome, and the partner
 * scope (another partner's subject or capability reads as unknown, nothing of it leaks).
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { denyReasons, denyRules, refinedDenyRules } from "../../../../src/errors.ts";
import { writePolicyRecord } from "../../../../src/policy/record-store.ts";
import { type Harness, startHarness } from "./harness.ts";
import { PARTNER, seedAll, seedCapability, seedPartner, seedPolicy, seedSubject, snapshot } from "./seed.ts";

const OTHER = "partner-2";
const WRAPPER = fileURLToPath(new URL("../../../../bin/authority", import.meta.url));

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

  /**
   * Every reason a decision can deny with, and every refusal of the stages explain runs after
   * it: the trace names the reason, the rule (errors.ts denyRules, or the step's finer rule) and
   * the step that refused; for a decision reason, authorize-invocation answers the same reason
   * and rule for the same request. The list is checked against the table, so a new deny reason
   * without an explain case fails here.
   */
  describe("a trace for each deny reason", () => {
    interface Case {
      readonly reason: string;
      readonly rule: string | RegExp;
      /** The step that refused, and the outcome the others got before it. */
      readonly step: string;
      readonly subject: string;
      readonly method: string;
      readonly path: string;
      readonly partner?: string;
      readonly extra?: Record<string, unknown>;
      readonly remedy?: Record<string, unknown>;
      /** Not answered by authorize-invocation (a stage after the decision). */
      readonly afterDecision?: true;
    }
    const cases: readonly Case[] = [
      {
        reason: "unknown_capability",
        rule: "catalog/capability",
        step: "capability",
        subject: "agent-7",
        method: "GET",
        path: "/users/1",
        extra: { capability_id: "no-such-api" },
      },
      {
        reason: "missing_policy",
        rule: "policy/missing",
        step: "policy",
        subject: "agent-none",
        method: "GET",
        path: "/users/1",
      },
      {
        reason: "policy_verification_failed",
        rule: "policy/verification",
        step: "policy",
        subject: "agent-forged",
        method: "GET",
        path: "/users/1",
      },
      // Another subject's signed policy filed under this one: the signature binds the subject.
      {
        reason: "policy_verification_failed",
        rule: "policy/verification",
        step: "policy",
        subject: "agent-swapped",
        method: "GET",
        path: "/users/1",
      },
      {
        reason: "policy_revoked",
        rule: "policy/revoked",
        step: "decision",
        subject: "agent-gone",
        method: "GET",
        path: "/users/1",
        remedy: { action: "contact_partner" },
      },
      {
        reason: "policy_expired",
        rule: "policy/expired",
        step: "decision",
        subject: "agent-expired",
        method: "GET",
        path: "/users/1",
        remedy: { action: "contact_partner" },
      },
      {
        reason: "unknown_operation",
        rule: "catalog/operation",
        step: "decision",
        subject: "agent-7",
        method: "GET",
        path: "/nowhere",
      },
      {
        reason: "operation_not_allowed",
        rule: "decide/allowlist",
        step: "decision",
        subject: "agent-7",
        method: "DELETE",
        path: "/users/12",
        remedy: { action: "request_permission", permission_id: "billing-api:delete:/users/{id}" },
      },
      {
        reason: "operation_not_allowed",
        rule: refinedDenyRules.constraintsRollout,
        step: "decision",
        subject: "agent-outside",
        partner: OTHER,
        method: "GET",
        path: "/users/12",
      },
      {
        reason: "ambiguous_path",
        rule: "decide/path-values",
        step: "decision",
        subject: "agent-7",
        method: "GET",
        path: "/users/Me",
      },
      {
        reason: "constraint_violation",
        rule: /^constraints\//,
        step: "constraints",
        subject: "agent-7",
        method: "GET",
        path: "/users/123456",
        afterDecision: true,
      },
      {
        reason: "invalid_input",
        rule: "input/schema",
        step: "input_schema",
        subject: "agent-poster",
        method: "POST",
        path: "/invoices",
        extra: { body: "not an object" },
        afterDecision: true,
      },
    ];
    /**
     * The decision's reasons explain cannot meet: it is asked for a named subject and
     * capability (both required by its schema: 400), and authenticates no token, so no caller
     * can name a subject other than its own (subject_mismatch: authorize-invocation's body
     * naming another subject than the token's; a policy filed under another subject fails its
     * verification, above). The transport's refusals (request_body_required: a body the Check
     * did not see) and the stages after `constraints` (credentials, egress, the upstream) are
     * not run by an explain.
     */
    const notExplained = new Set(["missing_subject", "missing_capability", "subject_mismatch"]);

    before(async () => {
      const { store, protector } = h.service.context;
      await seedSubject(store, { subjectId: "agent-none" });
      const forged = await seedSubject(store, { subjectId: "agent-forged" });
      const forgedRecord = await seedPolicy(store, protector, {
        subject: forged,
        allow: [["GET", "/users/{id}"]],
      });
      await writePolicyRecord(store, { ...forgedRecord, document_hash: `sha256:${"0".repeat(64)}` });
      const swapped = await seedSubject(store, { subjectId: "agent-swapped" });
      const agent7 = await seedPolicy(store, protector, {
        subject: { ...swapped, subject_id: "agent-7-copy" },
        allow: [["GET", "/users/{id}"]],
      });
      // An attacker with store access files another subject's signed policy under this subject.
      await writePolicyRecord(store, { ...agent7, subject_id: "agent-swapped" });
      const expired = await seedSubject(store, { subjectId: "agent-expired" });
      const past = new Date(Date.now() - 7 * 86_400_000);
      await seedPolicy(store, protector, {
        subject: expired,
        allow: [["GET", "/users/{id}"]],
        now: past,
        expiresAt: new Date(past.getTime() + 86_400_000).toISOString(),
      });
      const poster = await seedSubject(store, { subjectId: "agent-poster" });
      await seedPolicy(store, protector, { subject: poster, allow: [["POST", "/invoices"]] });
      // A partner outside the parameter-scoping rollout: a constrained operation is refused by the gate.
      await seedCapability(store, { partnerId: OTHER });
      const outside = await seedSubject(store, { subjectId: "agent-outside", partnerId: OTHER });
      const limited = {
        ...snapshot("GET", "/users/{id}"),
        parameter_constraints: [{ in: "path" as const, name: "id", max_length: 4 }],
      };
      await seedPolicy(store, protector, {
        subject: outside,
        allow: [["GET", "/users/{id}"]],
        operations: [limited],
      });
    });

    it("covers every deny reason of the decision table", () => {
      const covered = new Set([...cases.map((c) => c.reason), ...notExplained]);
      assert.deepEqual(
        Object.keys(denyReasons).filter((reason) => !covered.has(reason)),
        [],
      );
    });

    it("refuses to explain without a subject or a capability (the two reasons it cannot meet)", async () => {
      for (const missing of ["subject_id", "capability_id"]) {
        const body: Record<string, unknown> = ask({ method: "GET", path: "/users/1" });
        delete body[missing];
        assert.equal((await explain(admin, body)).status, 400, missing);
      }
    });

    for (const c of cases) {
      const label = typeof c.rule === "string" ? c.rule : c.reason;
      it(`${c.reason} (${label}): denied at the ${c.step} step`, async () => {
        const token = c.partner === OTHER ? otherAdmin : admin;
        const request = { ...ask({ subject_id: c.subject, method: c.method, path: c.path }), ...c.extra };
        const { status, body } = await explain(token, request, c.partner);
        assert.equal(status, 200, JSON.stringify(body));
        assert.equal(body.result.status, "denied", JSON.stringify(body));
        assert.equal(body.result.reason, c.reason, JSON.stringify(body));
        if (typeof c.rule === "string") assert.equal(body.result.rule, c.rule);
        else assert.match(body.result.rule, c.rule);
        // A rule of the table is the reason's own, unless the step names a finer one.
        if (typeof c.rule === "string" && !c.rule.startsWith("decide/constraints"))
          assert.equal(c.rule, denyRules[c.reason as keyof typeof denyRules]);
        assert.deepEqual(body.result.remedy, c.remedy);
        // The refusing step is the one denied; every step before it passed, every one after it was skipped.
        const order = body.steps.map((s) => s.step);
        const at = order.indexOf(c.step);
        assert.ok(at >= 0, `${c.step} in ${order.join(",")}`);
        const refusing = body.steps[at];
        assert.equal(refusing?.outcome, "denied", JSON.stringify(body.steps));
        for (const before of body.steps.slice(0, at)) assert.equal(before.outcome, "passed", before.step);
        for (const later of body.steps.slice(at + 1)) assert.equal(later.outcome, "skipped", later.step);
        if (c.afterDecision) return;
        // The pipeline itself refuses the same request for the same reason, by the same rule.
        const decided = await h.authorize(
          {
            subject: { subject_id: c.subject },
            capability_id: request.capability_id,
            method: c.method,
            path: c.path,
          },
          await h.token(c.subject, c.partner === undefined ? {} : { partnerId: c.partner }),
        );
        assert.equal(decided.body.reason, c.reason, JSON.stringify(decided.body));
        assert.equal(decided.body.rule, body.result.rule);
        assert.deepEqual(decided.body.remedy, c.remedy);
      });
    }
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

  it("`authority explain` prints the trace and exits 0 on an allow, 1 on a deny, 1 on an error answer", async () => {
    const run = async (...args: string[]) => {
      const all = ["explain", "--url", h.url, "--partner", PARTNER, "--subject", "agent-7", ...args];
      try {
        const { stdout } = await promisify(execFile)(WRAPPER, all, {
          env: { ...process.env, AUTHORITY_TOKEN: admin },
          timeout: 30_000,
        });
        return { code: 0, answer: JSON.parse(stdout) as Trace };
      } catch (error) {
        const failed = error as { code: number; stdout: string };
        return { code: failed.code, answer: JSON.parse(failed.stdout || "{}") as Trace };
      }
    };
    const allowed = await run("--capability", "billing-api", "--method", "get", "--path", "/users/12");
    assert.equal(allowed.code, 0);
    assert.equal(allowed.answer.result.status, "allowed");
    const denied = await run("--capability", "billing-api", "--method", "GET", "--path", "/nowhere");
    assert.equal(denied.code, 1);
    assert.equal(denied.answer.result.reason, "unknown_operation");
    assert.equal(denied.answer.result.rule, "catalog/operation");
    const refused = await run("--capability", "billing-api", "--method", "GET", "--path", "no-slash");
    assert.equal(refused.code, 1);
  });

  it("validates its input", async () => {
    const { status } = await explain(admin, ask({ method: "GET", path: "users", extra: 1 }));
    assert.equal(status, 400);
  });
});
