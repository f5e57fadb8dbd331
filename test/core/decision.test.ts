import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type DecisionInput, decide } from "../../src/core/decision.ts";
import type { PolicyDocument } from "../../src/core/policy-document.ts";
import { denyReasons } from "../../src/errors.ts";
import {
  CAPABILITY_ID,
  capability,
  entry,
  HASH_A,
  NOW,
  pid,
  policyV1,
  policyV2,
  snapshot,
  v2Context,
} from "./fixtures.ts";

const redactions = { [pid("GET", "/users/{id}")]: [{ path: "/email", mode: "mask" as const, keep_last: 4 }] };
const assigned = entry(
  [
    ["GET", "/users/{id}"],
    ["GET", "/users/me"],
    ["POST", "/invoices"],
  ],
  { redactions },
);

const loaded = (document: PolicyDocument) => ({ ok: true as const, document });

function v1Input(overrides: Partial<DecisionInput> = {}): DecisionInput {
  return {
    subjectId: "agent-7",
    capabilityId: CAPABILITY_ID,
    capability: capability(),
    policy: loaded(policyV1([assigned])),
    method: "GET",
    path: "/users/42",
    now: NOW,
    ...overrides,
  };
}

function v2Input(overrides: Partial<DecisionInput> = {}): DecisionInput {
  return v1Input({
    subjectId: "ext-subject-1",
    policy: loaded(policyV2([assigned])),
    expectedContext: v2Context,
    ...overrides,
  });
}

const reasonOf = (input: DecisionInput): string => {
  const decision = decide(input);
  return decision.status === "denied" ? decision.reason : "allowed";
};

describe("decide: allow", () => {
  it("allows an allowlisted operation with the policy's snapshot, redactions, profile and params (v1)", () => {
    const decision = decide(v1Input());
    assert.equal(decision.status, "allowed");
    assert.ok(decision.status === "allowed");
    assert.equal(decision.permissionId, "billing-api:get:/users/{id}");
    assert.deepEqual(decision.params, { id: "42" });
    assert.equal(decision.authProfileRef, "billing-oauth");
    assert.deepEqual(decision.redactions, [{ path: "/email", mode: "mask", keep_last: 4 }]);
    assert.equal(decision.operation, assigned.operations[0]);
  });

  it("allows on the v2 path when all six context fields match", () => {
    const decision = decide(v2Input());
    assert.equal(decision.status, "allowed");
  });

  it("uses the policy's reviewed snapshot, not the live catalog's", () => {
    const reviewed = snapshot("GET", "/users/{id}", {
      upstream_url_template: "https://reviewed.example.com/u/{id}",
    });
    const policy = policyV1([{ ...assigned, operations: [reviewed, ...assigned.operations.slice(1)] }]);
    const decision = decide(v1Input({ policy: loaded(policy) }));
    assert.ok(decision.status === "allowed");
    assert.equal(decision.operation.upstream_url_template, "https://reviewed.example.com/u/{id}");
  });

  it("gives no redactions when the entry has none for the permission", () => {
    const decision = decide(v1Input({ path: "/users/me" }));
    assert.ok(decision.status === "allowed");
    assert.equal(decision.permissionId, "billing-api:get:/users/me");
    assert.deepEqual(decision.redactions, []);
    assert.deepEqual(decision.params, {});
  });

  it("accepts the path template itself, a query string, odd slashes and any method case", () => {
    for (const [method, path] of [
      ["get", "/users/{id}"],
      ["GET", "//users/42/?expand=1"],
      ["Get", "/users/%34%32"],
      ["post", "/invoices"],
    ] as const) {
      assert.equal(decide(v1Input({ method, path })).status, "allowed", `${method} ${path}`);
    }
  });
});

describe("decide: one test per deny reason", () => {
  it("missing_subject", () => {
    assert.equal(reasonOf(v1Input({ subjectId: undefined })), "missing_subject");
    assert.equal(reasonOf(v1Input({ subjectId: "" })), "missing_subject");
  });

  it("missing_capability", () => {
    assert.equal(reasonOf(v1Input({ capabilityId: undefined })), "missing_capability");
    assert.equal(reasonOf(v1Input({ capabilityId: "" })), "missing_capability");
  });

  it("unknown_capability", () => {
    assert.equal(reasonOf(v1Input({ capability: undefined })), "unknown_capability");
    assert.equal(reasonOf(v1Input({ capabilityId: "other-api" })), "unknown_capability");
  });

  it("missing_policy: no artifact", () => {
    assert.equal(reasonOf(v1Input({ policy: { ok: false, reason: "missing_policy" } })), "missing_policy");
  });

  it("missing_policy: the policy has no entry for the capability", () => {
    const other = entry([["GET", "/users/{id}"]], { capabilityId: "other-api" });
    assert.equal(reasonOf(v1Input({ policy: loaded(policyV1([other])) })), "missing_policy");
  });

  it("policy_verification_failed", () => {
    assert.equal(
      reasonOf(v1Input({ policy: { ok: false, reason: "policy_verification_failed" } })),
      "policy_verification_failed",
    );
  });

  it("subject_mismatch (v1)", () => {
    assert.equal(reasonOf(v1Input({ subjectId: "agent-8" })), "subject_mismatch");
  });

  it("policy_revoked", () => {
    const policy = policyV1([assigned], { revoked_at: "2026-05-15T00:00:00Z" });
    assert.equal(reasonOf(v1Input({ policy: loaded(policy) })), "policy_revoked");
  });

  it("policy_expired", () => {
    const policy = policyV1([assigned], { expires_at: "2026-06-01T11:59:59Z" });
    assert.equal(reasonOf(v1Input({ policy: loaded(policy) })), "policy_expired");
  });

  it("unknown_operation", () => {
    for (const [method, path] of [
      ["GET", "/nothing"],
      ["PUT", "/users/42"],
      ["BREW", "/users/42"],
      ["GET", "/users/42/extra"],
      ["GET", "/users/%2e%2e"],
      ["GET", "/users/a%2Fb"],
      ["GET", "/users/..;"],
      ["GET", "users/42"],
    ] as const) {
      assert.equal(reasonOf(v1Input({ method, path })), "unknown_operation", `${method} ${path}`);
    }
  });

  it("unknown_operation when the catalog overlaps and cannot pick one operation", () => {
    const overlapping = capability([snapshot("GET", "/users/{id}"), snapshot("GET", "/users/{name}")]);
    assert.equal(reasonOf(v1Input({ capability: overlapping })), "unknown_operation");
  });

  it("operation_not_allowed: in the catalog, not in the allowlist", () => {
    assert.equal(reasonOf(v1Input({ method: "DELETE", path: "/users/42" })), "operation_not_allowed");
    assert.equal(reasonOf(v1Input({ path: "/invoices/1/lines/2" })), "operation_not_allowed");
  });

  it("operation_not_allowed: allowlisted but the policy lacks the reviewed snapshot", () => {
    const withoutSnapshot = { ...assigned, operations: assigned.operations.slice(1) };
    assert.equal(reasonOf(v1Input({ policy: loaded(policyV1([withoutSnapshot])) })), "operation_not_allowed");
  });

  it("ambiguous_path: a value another route of the catalog could claim (GET /users/me is a sibling)", () => {
    assert.equal(reasonOf(v1Input({ path: "/users/Me" })), "ambiguous_path");
  });

  it("policy_verification_failed: a stored path pattern the linear-time engine cannot run", () => {
    const withPattern = (pattern: string) => {
      const reviewed = snapshot("GET", "/users/{id}", {
        input_schema: {
          path: { type: "object", properties: { id: { type: "string", pattern } } },
          query: { type: "object" },
          headers: { type: "object" },
          body: null,
        },
      });
      return loaded(policyV1([{ ...assigned, operations: [reviewed, ...assigned.operations.slice(1)] }]));
    };
    // Whatever the value: the snapshot, not the value, is what cannot be enforced.
    for (const path of ["/users/42", "/users/4242"]) {
      assert.equal(
        reasonOf(v1Input({ path, policy: withPattern("^(\\d)\\1$") })),
        "policy_verification_failed",
      );
      assert.equal(
        reasonOf(v1Input({ path, policy: withPattern("^(?=\\d)\\d+$") })),
        "policy_verification_failed",
      );
    }
    // The same snapshot with a pattern that runs in linear time, catastrophic for backtracking.
    assert.equal(reasonOf(v1Input({ policy: withPattern("^(\\d+)+$") })), "allowed");
    assert.equal(
      reasonOf(v1Input({ path: `/users/${"4".repeat(5000)}x`, policy: withPattern("^(\\d+)+$") })),
      "ambiguous_path",
    );
  });

  it("covers every deny reason of the error table", () => {
    const seen = new Set([
      reasonOf(v1Input({ subjectId: undefined })),
      reasonOf(v1Input({ capabilityId: undefined })),
      reasonOf(v1Input({ capability: undefined })),
      reasonOf(v1Input({ policy: { ok: false, reason: "missing_policy" } })),
      reasonOf(v1Input({ policy: { ok: false, reason: "policy_verification_failed" } })),
      reasonOf(v1Input({ subjectId: "x" })),
      reasonOf(v1Input({ policy: loaded(policyV1([assigned], { revoked_at: "2026-01-01T00:00:00Z" })) })),
      reasonOf(v1Input({ policy: loaded(policyV1([assigned], { expires_at: "2026-01-01T00:00:00Z" })) })),
      reasonOf(v1Input({ path: "/nope" })),
      reasonOf(v1Input({ method: "DELETE" })),
      reasonOf(v1Input({ path: "/users/ME.json" })),
    ]);
    assert.deepEqual([...seen].sort(), Object.keys(denyReasons).sort());
  });
});

describe("decide: v2 context", () => {
  const mismatches: Array<[string, Partial<DecisionInput>]> = [
    ["subject id", { subjectId: "ext-subject-2" }],
    ["partner", { expectedContext: { ...v2Context, partnerId: "partner-2" } }],
    ["binding", { expectedContext: { ...v2Context, bindingId: "binding-1" } }],
    ["issuer hash", { expectedContext: { ...v2Context, issuerHash: `sha256:${"c".repeat(64)}` } }],
    ["external subject hash", { expectedContext: { ...v2Context, externalSubjectHash: HASH_A } }],
    ["mapping version", { expectedContext: { ...v2Context, mappingVersion: "4" } }],
    ["no derived context", { expectedContext: undefined }],
  ];
  for (const [field, overrides] of mismatches) {
    it(`any mismatch is subject_mismatch: ${field}`, () => {
      assert.equal(reasonOf(v2Input(overrides)), "subject_mismatch");
    });
  }

  it("a v1 policy cannot satisfy a derived external context", () => {
    assert.equal(reasonOf(v1Input({ expectedContext: v2Context })), "subject_mismatch");
  });

  it("revocation and expiry apply on the v2 path too", () => {
    const revoked = policyV2([assigned], { revoked_at: "2026-05-15T00:00:00Z" });
    assert.equal(reasonOf(v2Input({ policy: loaded(revoked) })), "policy_revoked");
    const expired = policyV2([assigned], { expires_at: "2026-05-15T00:00:00Z" });
    assert.equal(reasonOf(v2Input({ policy: loaded(expired) })), "policy_expired");
    assert.equal(reasonOf(v2Input({ method: "DELETE" })), "operation_not_allowed");
  });
});

describe("decide: precedence", () => {
  const expiredRevoked = policyV1([assigned], {
    expires_at: "2026-01-01T00:00:00Z",
    revoked_at: "2026-01-02T00:00:00Z",
  });

  const ladder: Array<[string, Partial<DecisionInput>]> = [
    ["missing_subject", { subjectId: undefined }],
    ["missing_capability", { capabilityId: undefined }],
    ["unknown_capability", { capability: undefined }],
    ["policy_verification_failed", { policy: { ok: false, reason: "policy_verification_failed" } }],
  ];

  it("earlier steps win over every later failure", () => {
    // Each row adds one more failure to all the later ones; the earliest must be reported.
    const everythingWrong: Partial<DecisionInput> = {
      subjectId: "agent-8",
      policy: loaded(expiredRevoked),
      method: "PUT",
      path: "/nothing",
    };
    for (let i = 0; i < ladder.length; i++) {
      const combined = Object.assign(
        {},
        everythingWrong,
        ...ladder
          .slice(i)
          .map(([, o]) => o)
          .reverse(),
      );
      const row = ladder[i];
      assert.ok(row);
      assert.equal(reasonOf(v1Input(combined)), row[0]);
    }
    assert.equal(reasonOf(v1Input(everythingWrong)), "subject_mismatch");
  });

  it("revoked wins over expired, and both over unknown operations", () => {
    assert.equal(reasonOf(v1Input({ policy: loaded(expiredRevoked), path: "/nothing" })), "policy_revoked");
    const expired = policyV1([assigned], { expires_at: "2026-01-01T00:00:00Z" });
    assert.equal(reasonOf(v1Input({ policy: loaded(expired), path: "/nothing" })), "policy_expired");
  });

  it("unknown_operation wins over a missing capability entry and over operation_not_allowed", () => {
    const other = entry([["GET", "/users/{id}"]], { capabilityId: "other-api" });
    assert.equal(
      reasonOf(v1Input({ policy: loaded(policyV1([other])), path: "/nothing" })),
      "unknown_operation",
    );
    assert.equal(reasonOf(v1Input({ policy: loaded(policyV1([other])) })), "missing_policy");
  });

  it("a missing policy reason comes before subject checks", () => {
    assert.equal(
      reasonOf(v1Input({ policy: { ok: false, reason: "missing_policy" }, subjectId: "someone" })),
      "missing_policy",
    );
  });
});
