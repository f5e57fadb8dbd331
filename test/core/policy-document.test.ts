import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { hashCanonical } from "../../src/core/canonical-json.ts";
import {
  computePolicyHash,
  entrySnapshotFor,
  PolicyDocumentError,
  policyEntryFor,
  policyState,
  policySubjectId,
  validatePolicyDocument,
} from "../../src/core/policy-document.ts";
import { entry, pid, policyV1, policyV2 } from "./fixtures.ts";

const refused = (doc: unknown): readonly string[] => {
  try {
    validatePolicyDocument(doc);
  } catch (error) {
    assert.ok(error instanceof PolicyDocumentError);
    assert.equal(error.code, "policy_schema_invalid");
    return error.messages;
  }
  assert.fail("expected the policy to be refused");
};

const apis = [
  entry(
    [
      ["GET", "/users/{id}"],
      ["POST", "/invoices"],
    ],
    { redactions: { [pid("GET", "/users/{id}")]: [{ path: "/ssn", mode: "remove" }] } },
  ),
];

describe("policy documents", () => {
  it("accepts v1 and v2 documents", () => {
    const v1 = policyV1(apis);
    assert.equal(validatePolicyDocument(v1), v1);
    const v2 = policyV2(apis);
    assert.equal(validatePolicyDocument(v2), v2);
    assert.equal(policySubjectId(v1), "agent-7");
    assert.equal(policySubjectId(v2), "ext-subject-1");
  });

  it("accepts a revoked policy and fractional-second timestamps", () => {
    validatePolicyDocument(policyV1(apis, { revoked_at: "2026-05-02T10:00:00.123Z" }));
  });

  it("refuses unknown schema versions and non-objects", () => {
    refused(null);
    refused([]);
    refused({ ...policyV1(apis), schema_version: "authority-user-policy-v3" });
  });

  it("refuses extra fields, non-UTC or invalid timestamps, and bad hashes", () => {
    assert.ok(refused({ ...policyV1(apis), owner: "x" }).some((m) => m.includes('"owner"')));
    refused({ ...policyV1(apis), expires_at: "2026-12-31T00:00:00+02:00" });
    refused({ ...policyV1(apis), expires_at: "2026-13-31T00:00:00Z" });
    refused({ ...policyV1(apis), policy_version: "yesterday" });
    refused({ ...policyV1(apis), revoked_at: "" });
    refused({ ...policyV1(apis), subject: { subject_id: "a", subject_type: "agent" } });
    refused({ ...policyV2(apis), issuer_hash: "sha256:ABC" });
    refused({ ...policyV2(apis), crypto_version: "subject_credentials_v1" });
    refused({ ...policyV2(apis), extra: 1 });
    const { binding_id: _b, ...noBinding } = policyV2(apis);
    refused(noBinding);
    refused({ ...policyV1(apis), apis: [{ ...apis[0], extra: true }] });
  });

  it("v2: policy_hash must be hashCanonical(apis) and subject ids must agree", () => {
    assert.equal(computePolicyHash(apis), hashCanonical(apis));
    assert.deepEqual(refused(policyV2(apis, { policy_hash: `sha256:${"0".repeat(64)}` })), [
      "/policy_hash does not match /apis",
    ]);
    const tampered = { ...policyV2(apis), apis: [entry([["DELETE", "/users/{id}"]])] };
    refused(tampered);
    refused(
      policyV2(apis, { subject: { subject_id: "someone-else", subject_type: "external", display_name: "" } }),
    );
  });

  it("refuses cross-field problems: foreign or malformed permission ids, repeats", () => {
    refused(policyV1([entry([["GET", "/a"]]), entry([["GET", "/b"]])]));
    const foreign = { ...entry([["GET", "/a"]]), allowed_permission_ids: [pid("GET", "/a", "other-api")] };
    assert.ok(refused(policyV1([foreign])).some((m) => m.includes("names another capability")));
    const traversal = { ...entry([["GET", "/a"]]), allowed_permission_ids: ["billing-api:get:/../a"] };
    refused({ ...policyV1([]), apis: [traversal] });
    const badRedactionKey = { ...entry([["GET", "/a"]]), response_redactions: { "other-api:get:/a": [] } };
    refused(policyV1([badRedactionKey]));
    const repeated = entry([["GET", "/a"]]);
    refused(policyV1([{ ...repeated, operations: [...repeated.operations, ...repeated.operations] }]));
    const badTemplate = entry([["GET", "/a"]]);
    const [op] = badTemplate.operations;
    assert.ok(op);
    refused(policyV1([{ ...badTemplate, operations: [{ ...op, path: "/a/{x" }] }]));
    const ruleWithoutMode = {
      ...entry([["GET", "/a"]]),
      response_redactions: { [pid("GET", "/a")]: [{ path: "/x" }] },
    };
    refused({ ...policyV1([]), apis: [ruleWithoutMode] });
  });

  it("finds entries and snapshots", () => {
    const doc = policyV1(apis);
    const found = policyEntryFor(doc, "billing-api");
    assert.ok(found);
    assert.equal(policyEntryFor(doc, "nope"), undefined);
    assert.equal(entrySnapshotFor(found, pid("GET", "/users/{id}"))?.path, "/users/{id}");
    assert.equal(entrySnapshotFor(found, pid("DELETE", "/users/{id}")), undefined);
  });
});

describe("policyState", () => {
  const doc = policyV1(apis, { expires_at: "2026-06-01T12:00:00Z" });

  it("is active up to and including expires_at, expired strictly after", () => {
    assert.equal(policyState(doc, new Date("2026-06-01T11:59:59Z")), "active");
    assert.equal(policyState(doc, new Date("2026-06-01T12:00:00Z")), "active");
    assert.equal(policyState(doc, new Date("2026-06-01T12:00:00.001Z")), "expired");
  });

  it("revoked wins over expired, whatever revoked_at says", () => {
    assert.equal(
      policyState({ ...doc, revoked_at: "2026-01-01T00:00:00Z" }, new Date("2026-01-01T00:00:00Z")),
      "revoked",
    );
    assert.equal(
      policyState({ ...doc, revoked_at: "2026-01-01T00:00:00Z" }, new Date("2030-01-01T00:00:00Z")),
      "revoked",
    );
    assert.equal(
      policyState({ ...doc, revoked_at: "2099-01-01T00:00:00Z" }, new Date("2026-01-01T00:00:00Z")),
      "revoked",
    );
  });

  it("fails closed on unreadable times", () => {
    assert.equal(policyState(doc, new Date(Number.NaN)), "expired");
    assert.equal(policyState({ ...doc, expires_at: "garbage" }, new Date("2026-01-01T00:00:00Z")), "expired");
  });
});
