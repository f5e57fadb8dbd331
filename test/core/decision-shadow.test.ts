import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { type Decision, type DecisionInput, decide, type ShadowLoad } from "../../src/core/decision.ts";
import type { HttpMethod } from "../../src/core/index.ts";
import type { PolicyDocument } from "../../src/core/policy-document.ts";
import { decideStage } from "../../src/pipeline/decision.ts";
import { CAPABILITY_ID, capability, catalogOperations, entry, NOW, pid, policyV1 } from "./fixtures.ts";

const enforcedEntry = entry([
  ["GET", "/users/{id}"],
  ["POST", "/invoices"],
]);
const narrowerShadow = entry([["GET", "/users/{id}"]]);

function input(shadow: ShadowLoad | undefined, overrides: Partial<DecisionInput> = {}): DecisionInput {
  const document: PolicyDocument = policyV1([enforcedEntry]);
  return {
    subjectId: "agent-7",
    capabilityId: CAPABILITY_ID,
    capability: capability(),
    policy: shadow === undefined ? { ok: true, document } : { ok: true, document, shadow },
    method: "POST",
    path: "/invoices",
    now: NOW,
    ...overrides,
  };
}

const verified = (document: PolicyDocument): ShadowLoad => ({ ok: true, document });
const withoutNotes = (decision: Decision): Decision => {
  const { shadow: _shadow, ...rest } = decision;
  return rest as Decision;
};

describe("decide: a shadow policy is evaluated beside the enforced one", () => {
  it("records a disagreeing shadow and acts on the enforced policy only", () => {
    const decision = decide(input(verified(policyV1([narrowerShadow]))));
    assert.equal(decision.status, "allowed");
    assert.deepEqual(decision.shadow, { decision: "denied", reason: "operation_not_allowed", agrees: false });
  });

  it("records an agreeing shadow", () => {
    const decision = decide(input(verified(policyV1([narrowerShadow])), { method: "GET", path: "/users/9" }));
    assert.equal(decision.status, "allowed");
    assert.deepEqual(decision.shadow, {
      decision: "allowed",
      permissionId: pid("GET", "/users/{id}"),
      reason: null,
      agrees: true,
    });
  });

  it("a shadow that allows more never allows what the enforced policy denies", () => {
    const wider = entry(catalogOperations.map((op) => [op.method, op.path] as [HttpMethod, string]));
    const decision = decide(input(verified(policyV1([wider])), { method: "DELETE", path: "/users/1" }));
    assert.equal(decision.status, "denied");
    assert.equal(decision.shadow?.decision, "allowed");
    assert.equal(decision.shadow?.agrees, false);
  });

  it("a shadow that failed verification is noted as invalid and never evaluated", () => {
    const decision = decide(input({ ok: false, reason: "policy_verification_failed" }));
    assert.equal(decision.status, "allowed");
    assert.deepEqual(decision.shadow, {
      decision: "invalid",
      reason: "policy_verification_failed",
      agrees: false,
    });
  });

  it("a shadow without an entry for the capability adds nothing", () => {
    const other = entry([["GET", "/users/{id}"]], { capabilityId: "other-api" });
    const decision = decide(input(verified(policyV1([other]))));
    assert.equal(decision.shadow, undefined);
  });

  it("a shadow signed for another subject is that subject's mismatch, not an allow", () => {
    const foreign = policyV1([enforcedEntry], {
      subject: { subject_id: "someone-else", subject_type: "agent", display_name: "x" },
    });
    const decision = decide(input(verified(foreign)));
    assert.equal(decision.status, "allowed");
    assert.deepEqual(decision.shadow, { decision: "denied", reason: "subject_mismatch", agrees: false });
  });

  it("the transport's narrowing applies to the shadow too", () => {
    const decision = decideStage({
      ...input(verified(policyV1([enforcedEntry]))),
      constraintsEnforced: true,
      permits: (id) => id !== pid("POST", "/invoices"),
    });
    assert.equal(decision.status, "denied");
    assert.deepEqual(decision.shadow, { decision: "denied", reason: "operation_not_allowed", agrees: true });
  });

  it("attack: whatever shadow an attacker can write, the enforced outcome is the one without it", () => {
    const methods = ["GET", "POST", "DELETE", "PUT"] as const;
    const paths = ["/users/1", "/users/me", "/invoices", "/invoices/1/lines/2", "/nope", "/users/%2e%2e"];
    const shadowEntry = fc
      .subarray(catalogOperations.map((op) => [op.method, op.path] as [HttpMethod, string]))
      .map((allowed) => entry(allowed));
    const shadowLoad: fc.Arbitrary<ShadowLoad> = fc.oneof(
      fc.constant<ShadowLoad>({ ok: false, reason: "policy_verification_failed" }),
      fc.constant<ShadowLoad>({ ok: false, reason: "missing_policy" }),
      fc
        .record({
          apis: fc.array(shadowEntry, { maxLength: 2 }),
          revoked: fc.boolean(),
          subject: fc.constantFrom("agent-7", "agent-8"),
          expires: fc.constantFrom("2026-12-31T00:00:00Z", "2026-01-01T00:00:00Z"),
        })
        .map(({ apis, revoked, subject, expires }) =>
          verified(
            policyV1(apis, {
              subject: { subject_id: subject, subject_type: "agent", display_name: "x" },
              revoked_at: revoked ? "2026-05-02T00:00:00Z" : null,
              expires_at: expires,
            }),
          ),
        ),
    );
    fc.assert(
      fc.property(
        shadowLoad,
        fc.constantFrom(...methods),
        fc.constantFrom(...paths),
        fc.boolean(),
        (shadow, method, path, logOnly) => {
          const asked = { method, path, logOnly };
          const without = decide(input(undefined, asked));
          const withShadow = decide(input(shadow, asked));
          assert.deepEqual(withoutNotes(withShadow), without);
        },
      ),
      { numRuns: 500 },
    );
  });
});

describe("decide: the capability's log-only mode", () => {
  it("allows what the allow list does not cover, and says what enforcement would have answered", () => {
    const decision = decide(input(undefined, { method: "DELETE", path: "/users/1", logOnly: true }));
    assert.equal(decision.status, "allowed");
    assert.ok(decision.status === "allowed");
    assert.deepEqual(decision.logOnly, { reason: "operation_not_allowed", rule: "decide/allowlist" });
    assert.equal(decision.permissionId, pid("DELETE", "/users/{id}"));
  });

  it("relaxes nothing else: revoked, expired, unknown operations and other subjects still deny", () => {
    const revoked = policyV1([enforcedEntry], { revoked_at: "2026-05-02T00:00:00Z" });
    const cases: Array<[Partial<DecisionInput>, string]> = [
      [{ policy: { ok: true, document: revoked } }, "policy_revoked"],
      [
        { policy: { ok: true, document: policyV1([enforcedEntry], { expires_at: "2026-01-01T00:00:00Z" }) } },
        "policy_expired",
      ],
      [{ method: "GET", path: "/nowhere" }, "unknown_operation"],
      [{ subjectId: "agent-8" }, "subject_mismatch"],
      [{ policy: { ok: false, reason: "policy_verification_failed" } }, "policy_verification_failed"],
    ];
    for (const [overrides, reason] of cases) {
      const decision = decide(
        input(undefined, { method: "DELETE", path: "/users/1", logOnly: true, ...overrides }),
      );
      assert.equal(decision.status === "denied" ? decision.reason : "allowed", reason);
    }
  });

  it("attack: relaxes no step after the allow list, nor a missing entry", () => {
    const onlyInvoices = { ok: true as const, document: policyV1([entry([["POST", "/invoices"]])]) };
    const constrained = capability(
      catalogOperations.map((op) =>
        op.method === "DELETE"
          ? { ...op, parameter_constraints: [{ in: "path" as const, name: "id", allowed_values: ["1"] }] }
          : op,
      ),
    );
    const otherEntry = policyV1([entry([["POST", "/invoices"]], { capabilityId: "other-api" })]);
    const cases: Array<[Partial<DecisionInput>, string]> = [
      // A value the sibling GET /users/me could claim: still ambiguous.
      [{ method: "GET", path: "/users/Me", policy: onlyInvoices }, "ambiguous_path"],
      // Signed constraints outside the rollout: still the rollout gate.
      [{ capability: constrained, constraintsEnforced: false }, "operation_not_allowed"],
      // No entry for the capability at all: not an allow-list miss.
      [{ policy: { ok: true, document: otherEntry } }, "missing_policy"],
    ];
    for (const [overrides, reason] of cases) {
      const decision = decide(
        input(undefined, { method: "DELETE", path: "/users/1", logOnly: true, ...overrides }),
      );
      assert.equal(
        decision.status === "denied" ? decision.reason : "allowed",
        reason,
        JSON.stringify(overrides),
      );
    }
    // The transport's narrowing (a binding's experience) still takes a log-only allow away.
    const narrowed = decideStage({
      ...input(undefined, { method: "DELETE", path: "/users/1", logOnly: true }),
      constraintsEnforced: true,
      permits: (id) => id !== pid("DELETE", "/users/{id}"),
    });
    assert.equal(narrowed.status, "denied");
  });

  it("a shadow beside a log-only allow is compared with the deny enforcement gave", () => {
    const decision = decide(
      input(verified(policyV1([narrowerShadow])), { method: "DELETE", path: "/users/1", logOnly: true }),
    );
    assert.equal(decision.status, "allowed");
    assert.deepEqual(decision.shadow, { decision: "denied", reason: "operation_not_allowed", agrees: true });
  });
});
