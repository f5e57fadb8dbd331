import assert from "node:assert/strict";
import { test } from "node:test";
import { listablePolicy } from "../../src/mcp/policy-gate.ts";
import { entry, NOW, policyV1, policyV2 } from "../core/fixtures.ts";

const apis = [entry([["GET", "/users/{id}"]])];

test("an active, verified policy of this subject is listable", () => {
  const document = policyV1(apis);
  assert.deepEqual(listablePolicy({ ok: true, document }, "agent-7", NOW), { ok: true, document });
});

test("missing, unverifiable, foreign, revoked, expired and v2 policies list nothing", () => {
  assert.deepEqual(listablePolicy({ ok: false, reason: "missing_policy" }, "agent-7", NOW), {
    ok: false,
    reason: "missing_policy",
  });
  assert.deepEqual(listablePolicy({ ok: false, reason: "policy_verification_failed" }, "agent-7", NOW), {
    ok: false,
    reason: "policy_verification_failed",
  });
  const check = (document: Parameters<typeof listablePolicy>[0], subject = "agent-7") =>
    listablePolicy(document, subject, NOW);
  assert.deepEqual(check({ ok: true, document: policyV1(apis) }, "agent-8"), {
    ok: false,
    reason: "subject_mismatch",
  });
  assert.deepEqual(check({ ok: true, document: policyV1(apis, { revoked_at: "2026-05-01T00:00:00Z" }) }), {
    ok: false,
    reason: "policy_revoked",
  });
  assert.deepEqual(check({ ok: true, document: policyV1(apis, { expires_at: "2026-06-01T11:59:59Z" }) }), {
    ok: false,
    reason: "policy_expired",
  });
  assert.deepEqual(check({ ok: true, document: policyV2(apis) }, "ext-subject-1"), {
    ok: false,
    reason: "subject_mismatch",
  });
});
