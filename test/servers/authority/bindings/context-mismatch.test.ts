import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { listAssignments, loadPolicyRecord } from "../../../../src/admin/policy-writer.ts";
import { externalSubjectHash, issuerHash } from "../../../../src/bindings/derive.ts";
import { protectPolicy } from "../../../../src/policy/artifact.ts";
import { compilePolicyDocument, type HeadlessContext } from "../../../../src/policy/compile.ts";
import type { PolicyRecord } from "../../../../src/policy/record.ts";
import { collections, storeKeys } from "../../../../src/store/model.ts";
import { ALLOWED, BINDING, type BindingsHarness, PARTNER, startBindingsHarness } from "./harness.ts";

/**
 * A v2 policy is signed for one context: subject, partner, binding, issuer hash,
 * external-subject hash and mapping version. A correctly signed policy whose signed
 * context differs from the context derived for the request in any one field is denied
 * (subject_mismatch) before any downstream secret is loaded.
 */
describe("v2 context mismatches", () => {
  let h: BindingsHarness;
  before(async () => {
    h = await startBindingsHarness();
  });
  after(async () => {
    await h.close();
  });

  const request = { capability_id: "customers", method: "GET", path: "/customers/cus_00000001" };

  /** Maps a fresh user, then replaces its policy with one signed for a context differing in one field. */
  async function userWithPolicy(
    external: string,
    change: (context: HeadlessContext) => HeadlessContext,
    subjectOverride?: string,
  ) {
    const subjectId = await h.mapUser(external);
    const deps = { store: h.store };
    const record = await loadPolicyRecord(deps, PARTNER, subjectId);
    assert.ok(record);
    const honest: HeadlessContext = {
      partnerId: PARTNER,
      bindingId: BINDING,
      issuerHash: issuerHash(h.partnerIdp.issuer),
      externalSubjectHash: externalSubjectHash(external),
      mappingVersion: "1",
    };
    const now = new Date();
    const document = compilePolicyDocument({
      subject: { subject_id: subjectOverride ?? subjectId, subject_type: "external", display_name: external },
      cryptoVersion: "platform_service_v2",
      assignments: await listAssignments(deps, PARTNER, subjectId),
      expiresAt: record.expires_at,
      revokedAt: null,
      now,
      headless: change(honest),
    });
    // Signed and encrypted with the real service keys: only the context is wrong.
    const protectedPolicy = await protectPolicy(document, h.context.protector, PARTNER);
    const tampered: PolicyRecord = {
      ...record,
      document_hash: protectedPolicy.documentHash,
      artifact: protectedPolicy.artifact,
      policy_version: now.toISOString(),
      head: record.head + 1,
    };
    await h.store.put(collections.policies, storeKeys.policy(subjectId), tampered);
    return { subjectId, assertion: await h.userAssertion(external) };
  }

  async function expectMismatch(assertion: string): Promise<void> {
    const before = h.upstream.received.length;
    const reply = await h.invoke(request, { assertion });
    assert.equal(reply.status, 403, JSON.stringify(reply.body));
    assert.deepEqual(reply.body, {
      status: "denied",
      reason: "subject_mismatch",
      requestId: reply.body.requestId,
      rule: "policy/subject",
    });
    assert.equal(h.upstream.received.length, before, "nothing was sent upstream");
  }

  it("allows the honest policy (baseline)", async () => {
    const { assertion } = await userWithPolicy("mm-baseline", (c) => c);
    const reply = await h.invoke(request, { assertion });
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
  });

  it("denies a policy signed for another subject", async () => {
    const { assertion } = await userWithPolicy(
      "mm-subject",
      (c) => c,
      "ext_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    );
    await expectMismatch(assertion);
  });

  it("denies a policy signed for another partner", async () => {
    const { assertion } = await userWithPolicy("mm-partner", (c) => ({ ...c, partnerId: "globex" }));
    await expectMismatch(assertion);
  });

  it("denies a policy signed for another binding", async () => {
    const { assertion } = await userWithPolicy("mm-binding", (c) => ({ ...c, bindingId: "acme-other-app" }));
    await expectMismatch(assertion);
  });

  it("denies a policy signed for another issuer", async () => {
    const { assertion } = await userWithPolicy("mm-issuer", (c) => ({
      ...c,
      issuerHash: issuerHash("https://other-idp.example"),
    }));
    await expectMismatch(assertion);
  });

  it("denies a policy signed for another external subject", async () => {
    const { assertion } = await userWithPolicy("mm-external", (c) => ({
      ...c,
      externalSubjectHash: externalSubjectHash("somebody-else"),
    }));
    await expectMismatch(assertion);
  });

  it("denies a policy signed for another mapping version", async () => {
    const { assertion } = await userWithPolicy("mm-version", (c) => ({ ...c, mappingVersion: "0" }));
    await expectMismatch(assertion);
  });

  it("denies a mapping re-pointed at another user's policy", async () => {
    const victim = await h.mapUser("mm-victim");
    const other = await h.mapUser("mm-donor");
    const donor = await loadPolicyRecord({ store: h.store }, PARTNER, other);
    const own = await loadPolicyRecord({ store: h.store }, PARTNER, victim);
    assert.ok(donor && own);
    await h.store.put(collections.policies, storeKeys.policy(victim), {
      ...donor,
      subject_id: victim,
      head: own.head + 1,
    });
    const reply = await h.invoke(request, { assertion: await h.userAssertion("mm-victim") });
    // The donor's policy verifies (same service keys) but names the donor: a mismatch.
    assert.deepEqual([reply.status, reply.body.reason], [403, "subject_mismatch"]);
  });

  it("denies every policy of the binding once its mapping_version changes, until re-assigned", async () => {
    const assertion = await h.userAssertion("user-123");
    assert.equal((await h.invoke(request, { assertion })).status, 200);
    const bumped = await h.call("PATCH", `/v1/bindings/${BINDING}`, {
      token: h.admin,
      body: { mapping_version: "2" },
    });
    assert.equal(bumped.status, 200);
    assert.equal(bumped.body.mapping_version, "2");
    await expectMismatch(assertion);
    const reassigned = await h.call("POST", `/v1/bindings/${BINDING}/apis`, {
      token: h.admin,
      body: {
        subject_id: h.subjectId,
        capability_id: "customers",
        allowed_permission_ids: [...ALLOWED],
        ttl_seconds: 600,
      },
    });
    assert.equal(reassigned.status, 200);
    assert.equal(reassigned.body.mapping.mapping_version, "2");
    assert.equal((await h.invoke(request, { assertion })).status, 200);
  });
});
