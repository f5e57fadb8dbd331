import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { hashCanonical } from "../../src/core/canonical-json.ts";
import {
  computePolicyHash,
  entrySnapshotFor,
  type PolicyApiEntry,
  PolicyDocumentError,
  policyEntryFor,
  policyState,
  policySubjectId,
  validatePolicyDocument,
} from "../../src/core/policy-document.ts";
import { entry, HASH_A, pid, policyV1, policyV2 } from "./fixtures.ts";

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

describe("policy documents with entries validated before (knownEntry)", () => {
  /** Entries that passed validation, found by content as the sidecar's interner finds them. */
  const knownFrom = (...validated: PolicyApiEntry[]) => {
    const byText = new Map(validated.map((known) => [JSON.stringify(known), Object.freeze(known)]));
    return { knownEntry: (candidate: unknown) => byText.get(JSON.stringify(candidate)) };
  };
  const known = entry([["GET", "/users/{id}"]]);
  const other = entry([["POST", "/invoices"]], { capabilityId: "payments-api" });
  const refusedWith = (doc: unknown, options: ReturnType<typeof knownFrom>): readonly string[] => {
    try {
      validatePolicyDocument(doc, options);
    } catch (error) {
      assert.ok(error instanceof PolicyDocumentError);
      return error.messages;
    }
    assert.fail("expected the policy to be refused");
  };

  it("uses the known instance in place of an equal entry, in order, for v1 and v2", () => {
    const options = knownFrom(known);
    for (const doc of [
      policyV1([other, structuredClone(known)]),
      policyV2([other, structuredClone(known)]),
    ]) {
      const checked = validatePolicyDocument(structuredClone(doc), options);
      assert.equal(checked.apis[1], options.knownEntry(known));
      assert.deepEqual(checked, doc);
    }
  });

  it("still applies the rules across entries and the policy hash", () => {
    const options = knownFrom(known);
    const twice = refusedWith(policyV1([structuredClone(known), structuredClone(known)]), options);
    assert.ok(twice.some((m) => m.includes("appears in two entries")));
    const hash = refusedWith({ ...policyV2([structuredClone(known)]), policy_hash: HASH_A }, options);
    assert.ok(hash.some((m) => m.includes("/policy_hash")));
  });

  it("checks every entry that is not known, and an entry differing from a known one in anything", () => {
    const options = knownFrom(known);
    const extra = refusedWith(
      policyV1([{ ...structuredClone(known), owner: "x" } as PolicyApiEntry]),
      options,
    );
    assert.ok(extra.some((m) => m.includes('"owner"')));
    const foreign = entry([["GET", "/a"]], { capabilityId: "payments-api" });
    const wrongId = { ...foreign, allowed_permission_ids: [pid("GET", "/a")] };
    const problems = refusedWith(policyV1([structuredClone(known), wrongId]), options);
    assert.ok(problems.some((m) => m.includes("/apis/1/allowed_permission_ids/0 names another capability")));
    // The rest of the document is checked too.
    refusedWith({ ...policyV1([structuredClone(known)]), expires_at: "tomorrow" }, options);
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
