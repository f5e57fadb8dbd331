import assert from "node:assert/strict";
import { test } from "node:test";
import { decide, type PolicyLoad, policyStanding } from "../../src/core/decision.ts";
import { CAPABILITY_ID, capability, entry, NOW, policyV1, policyV2 } from "./fixtures.ts";

const apis = [entry([["GET", "/users/{id}"]])];

test("an active, verified policy of this subject stands", () => {
  assert.equal(policyStanding({ ok: true, document: policyV1(apis) }, "agent-7", NOW), undefined);
});

test("missing, unverifiable, foreign, revoked, expired and (without a derived context) v2 policies do not stand", () => {
  const check = (load: PolicyLoad, subject = "agent-7") => policyStanding(load, subject, NOW);
  assert.equal(check({ ok: false, reason: "missing_policy" }), "missing_policy");
  assert.equal(check({ ok: false, reason: "policy_verification_failed" }), "policy_verification_failed");
  assert.equal(check({ ok: true, document: policyV1(apis) }, "agent-8"), "subject_mismatch");
  assert.equal(
    check({ ok: true, document: policyV1(apis, { revoked_at: "2026-05-01T00:00:00Z" }) }),
    "policy_revoked",
  );
  assert.equal(
    check({ ok: true, document: policyV1(apis, { expires_at: "2026-06-01T11:59:59Z" }) }),
    "policy_expired",
  );
  assert.equal(check({ ok: true, document: policyV2(apis) }, "ext-subject-1"), "subject_mismatch");
});

test("decide() refuses for exactly the policy-wide reason policyStanding gives (a listing never shows what a call refuses)", () => {
  const loads: PolicyLoad[] = [
    { ok: false, reason: "missing_policy" },
    { ok: true, document: policyV1(apis, { revoked_at: "2026-05-01T00:00:00Z" }) },
    { ok: true, document: policyV1(apis, { expires_at: "2026-06-01T11:59:59Z" }) },
    { ok: true, document: policyV2(apis) },
  ];
  for (const policy of loads) {
    const decision = decide({
      subjectId: "agent-7",
      capabilityId: CAPABILITY_ID,
      capability: capability(),
      policy,
      method: "GET",
      path: "/users/1",
      now: NOW,
    });
    assert.deepEqual(decision, { status: "denied", reason: policyStanding(policy, "agent-7", NOW) });
  }
});
