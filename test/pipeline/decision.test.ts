import assert from "node:assert/strict";
import { test } from "node:test";
import { decide } from "../../src/core/decision.ts";
import {
  type DecisionSources,
  decideStage,
  decisionStages,
  type SubjectOfRecord,
  subjectStandsFor,
} from "../../src/pipeline/decision.ts";
import { CAPABILITY_ID, capability, entry, NOW, pid, policyV1, snapshot } from "../core/fixtures.ts";

const input = {
  subjectId: "agent-7",
  capabilityId: CAPABILITY_ID,
  capability: capability(),
  policy: { ok: true as const, document: policyV1([entry([["GET", "/users/{id}"]])]) },
  method: "GET",
  path: "/users/42",
  now: NOW,
  constraintsEnforced: true,
};

test("the decision stage is decide() when the transport adds no narrowing", () => {
  assert.deepEqual(decideStage(input), decide(input));
});

test("a narrowing can only take away: a rejected permission is operation_not_allowed, a deny stays that deny", () => {
  const seen: string[] = [];
  const narrowed = decideStage({
    ...input,
    permits: (permissionId) => {
      seen.push(permissionId);
      return false;
    },
  });
  assert.deepEqual(narrowed, {
    status: "denied",
    reason: "operation_not_allowed",
    explanation: { rule: "binding/experience" },
  });
  assert.deepEqual(seen, [pid("GET", "/users/{id}")]);
  // A narrowing that admits everything cannot turn a deny into an allow.
  const revoked = {
    ...input,
    policy: { ok: true as const, document: { ...input.policy.document, revoked_at: "2026-01-01T00:00:00Z" } },
  };
  assert.deepEqual(decideStage({ ...revoked, permits: () => true }), {
    status: "denied",
    reason: "policy_revoked",
  });
});

test("outside the parameter-scoping rollout an operation with signed constraints is operation_not_allowed, one without stays allowed", () => {
  const constrained = snapshot("GET", "/users/{id}", {
    parameter_constraints: [{ in: "path", name: "id", max_length: 4 }],
  });
  const policy = {
    ok: true as const,
    document: policyV1([entry([["GET", "/users/{id}"]], { operations: [constrained] })]),
  };
  const outside = { ...input, policy, constraintsEnforced: false };
  assert.deepEqual(decideStage(outside), {
    status: "denied",
    reason: "operation_not_allowed",
    explanation: { rule: "decide/constraints-rollout" },
  });
  assert.equal(decideStage({ ...outside, constraintsEnforced: true }).status, "allowed");
  assert.equal(decideStage({ ...input, constraintsEnforced: false }).status, "allowed");
});

test("a subject stands only for the principals its identity admits", () => {
  const partnerToken = { partnerId: "p1", identity: "partner_token" } as const;
  assert.equal(
    subjectStandsFor(partnerToken.partnerId, partnerToken.identity, {
      via: "bearer",
      partnerId: "p1",
      vouchable: false,
    }),
    true,
  );
  assert.equal(
    subjectStandsFor(partnerToken.partnerId, partnerToken.identity, {
      via: "bearer",
      partnerId: "p2",
      vouchable: true,
    }),
    false,
  );
  assert.equal(
    subjectStandsFor(partnerToken.partnerId, partnerToken.identity, {
      via: "bearer",
      partnerId: undefined,
      vouchable: true,
    }),
    false,
  );
  assert.equal(
    subjectStandsFor(partnerToken.partnerId, partnerToken.identity, { via: "binding", partnerId: "p1" }),
    false,
  );
  const vouched = { partnerId: "p1", identity: "platform_vouched" } as const;
  assert.equal(
    subjectStandsFor(vouched.partnerId, vouched.identity, {
      via: "bearer",
      partnerId: undefined,
      vouchable: true,
    }),
    true,
  );
  assert.equal(
    subjectStandsFor(vouched.partnerId, vouched.identity, {
      via: "bearer",
      partnerId: undefined,
      vouchable: false,
    }),
    false,
  );
  const binding = { partnerId: "p1", identity: "binding" } as const;
  assert.equal(
    subjectStandsFor(binding.partnerId, binding.identity, { via: "binding", partnerId: "p1" }),
    true,
  );
  assert.equal(
    subjectStandsFor(binding.partnerId, binding.identity, {
      via: "bearer",
      partnerId: "p1",
      vouchable: true,
    }),
    false,
  );
  assert.equal(
    subjectStandsFor(undefined, undefined, { via: "bearer", partnerId: "p1", vouchable: true }),
    false,
  );
});

test("the stages answer at once when every source does, and wait only for a source that waits (the sidecar's form)", async () => {
  const record: SubjectOfRecord = { subjectId: "agent-7", partnerId: "p1", identity: "partner_token" };
  const sources = (wait: "none" | "policy"): DecisionSources<SubjectOfRecord> => ({
    subject: () => record,
    recordOf: (subject) => subject,
    unrecorded: () => "missing_policy",
    capability: () => capability(),
    policy: () => (wait === "policy" ? Promise.resolve(input.policy) : input.policy),
    logOnly: () => false,
    constraintsEnforced: () => true,
  });
  const request = {
    subjectId: "agent-7",
    authenticatedAs: { via: "bearer", partnerId: "p1", vouchable: false } as const,
    capabilityId: CAPABILITY_ID,
    method: "GET",
    path: "/users/42",
    now: NOW,
  };
  const done = (decision: { status: string }, _s: unknown, partnerId: string | undefined) =>
    `${decision.status}@${partnerId}`;
  const cached = decisionStages(sources("none"), request, done);
  assert.equal(cached, "allowed@p1", "no promise when every input is at hand");
  const waited = decisionStages(sources("policy"), request, done);
  assert.ok(waited instanceof Promise);
  assert.equal(await waited, cached);
});
