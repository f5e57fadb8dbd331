/**
 * The verified-policy cache shares an `apis` section across subjects whose signed documents
 * carry it byte for byte (policy-interning.ts, parsePolicyDocument): the second subject's
 * first load neither parses nor validates it. What must hold: the signature is still checked
 * over every document's exact bytes, a section is found only by the hash of those bytes, and
 * what differs between subjects (revocation, another operation's bytes) is each one's own.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { decide } from "../../../src/core/decision.ts";
import { SIGNATURE_BYTES } from "../../../src/crypto/signature.ts";
import { SIGNED_BLOB_HEAD_BYTES } from "../../../src/crypto/signed-blob.ts";
import {
  createVerifiedPolicyCache,
  type PolicyFetchResult,
  type PolicyRecordFetcher,
} from "../../../src/policy/cache/index.ts";
import { createLocalPolicyProtector } from "../../../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../../../src/policy/process-key-rings.ts";
import { capability, entry, NOW, snapshot } from "../../core/fixtures.ts";
import { POLICY_CACHE_SETTINGS } from "../../helpers/policy-cache-settings.ts";
import { protectedRecord, recordSource, sidecarOpener, signedPolicyText } from "./helpers.ts";

const protector = createLocalPolicyProtector({ keyRings: createProcessKeyRings(), serviceIdentity: "t" });

/** The authority's answers, with subject `subjectId`'s signed policy replaced by `forge(genuine)`. */
function forging(
  source: PolicyRecordFetcher,
  subjectId: string,
  forge: (signedPolicy: string) => Promise<string> | string,
): PolicyRecordFetcher {
  return {
    async fetchPolicy(subject, options): Promise<PolicyFetchResult> {
      const result = await source.fetchPolicy(subject, options);
      if (subject !== subjectId || result.status !== "found" || result.signedPolicy === null) return result;
      return { ...result, signedPolicy: await forge(signedPolicyText(result.signedPolicy)) };
    },
  };
}

/** The signed blob with one byte of its payload's `apis` section changed (a letter for another). */
function flipSectionByte(signedPolicy: string): string {
  const blob = Buffer.from(signedPolicy, "base64");
  const payloadAt = SIGNED_BLOB_HEAD_BYTES + blob.readUInt32BE(1) + SIGNATURE_BYTES;
  const text = blob.subarray(payloadAt).toString("utf8");
  const at = text.indexOf("/users/{id}");
  assert.ok(text.startsWith('{"apis":[') && at > 0);
  blob[payloadAt + at + 1] = "v".charCodeAt(0); // /users → /vsers
  return blob.toString("base64");
}

const allowedFor = (subjectId: string, policy: Parameters<typeof decide>[0]["policy"]) =>
  decide({
    subjectId,
    capabilityId: "billing-api",
    capability: capability(),
    policy,
    method: "GET",
    path: "/users/42",
    now: NOW,
  }).status === "allowed";

describe("verified-policy cache: apis sections shared by their exact bytes", () => {
  test("a second subject with the same signed catalog takes the first one's section, not a copy", async () => {
    const source = recordSource(protector);
    for (const subject of ["a", "b"])
      source.records.set(subject, await protectedRecord(protector, subject, 1));
    const cache = createVerifiedPolicyCache({
      ...POLICY_CACHE_SETTINGS,
      source,
      opener: sidecarOpener(protector),
    });
    const a = (await cache.get("a")).policy.load;
    const b = (await cache.get("b")).policy.load;
    assert.ok(a.ok && b.ok);
    assert.equal(b.document.apis, a.document.apis);
    assert.ok(Object.isFrozen(a.document.apis));
    assert.equal(b.document.subject.subject_id, "b");
    assert.ok(allowedFor("a", a) && allowedFor("b", b));
  });

  test("a signature that does not verify is refused though its section's bytes are held (a byte changed; another subject's genuine blob)", async () => {
    for (const forge of [
      flipSectionByte,
      async () => {
        const other = await protectedRecord(protector, "a", 1);
        const opened = await protector.open(other.artifact, {
          cryptoVersion: "subject_credentials_v1",
          subjectId: "a",
          partnerId: other.partner_id,
        });
        return opened.signedBlob ?? "";
      },
    ]) {
      const source = recordSource(protector);
      for (const subject of ["a", "b"])
        source.records.set(subject, await protectedRecord(protector, subject, 1));
      const cache = createVerifiedPolicyCache({
        ...POLICY_CACHE_SETTINGS,
        source: forging(source, "b", forge),
        opener: sidecarOpener(protector),
      });
      const a = (await cache.get("a")).policy.load;
      assert.ok(a.ok);
      const b = (await cache.get("b")).policy.load;
      assert.deepEqual(b, { ok: false, reason: "policy_verification_failed" });
      assert.equal(allowedFor("b", b), false);
      assert.ok(allowedFor("a", (await cache.get("a")).policy.load));
    }
  });

  test("the same capability and operation names in other bytes are the subject's own section and decide by it", async () => {
    const source = recordSource(protector);
    source.records.set("a", await protectedRecord(protector, "a", 1));
    const elsewhere = entry([["GET", "/users/{id}"]], {
      operations: [snapshot("GET", "/users/{id}", { upstream_url_template: "https://evil.example/{id}" })],
    });
    source.records.set("c", await protectedRecord(protector, "c", 1, { apis: [elsewhere] }));
    const cache = createVerifiedPolicyCache({
      ...POLICY_CACHE_SETTINGS,
      source,
      opener: sidecarOpener(protector),
    });
    const a = (await cache.get("a")).policy.load;
    const c = (await cache.get("c")).policy.load;
    assert.ok(a.ok && c.ok);
    assert.notEqual(c.document.apis, a.document.apis);
    assert.equal(c.document.apis[0]?.operations[0]?.upstream_url_template, "https://evil.example/{id}");
    assert.notEqual(a.document.apis[0]?.operations[0]?.upstream_url_template, "https://evil.example/{id}");
  });

  test("two subjects sharing a section, one revoked: the revoked one is denied, the other still allowed", async () => {
    const source = recordSource(protector);
    source.records.set("a", await protectedRecord(protector, "a", 1));
    source.records.set("r", await protectedRecord(protector, "r", 1, { revoked_at: "2026-01-01T00:00:00Z" }));
    const cache = createVerifiedPolicyCache({
      ...POLICY_CACHE_SETTINGS,
      source,
      opener: sidecarOpener(protector),
    });
    const a = (await cache.get("a")).policy.load;
    const r = (await cache.get("r")).policy.load;
    assert.ok(a.ok && r.ok);
    assert.equal(r.document.apis, a.document.apis);
    assert.equal(allowedFor("r", r), false);
    assert.equal(allowedFor("a", a), true);
    // And in the other order (the revoked document filed the section first).
    const other = createVerifiedPolicyCache({
      ...POLICY_CACHE_SETTINGS,
      source,
      opener: sidecarOpener(protector),
    });
    const r2 = (await other.get("r")).policy.load;
    const a2 = (await other.get("a")).policy.load;
    assert.ok(r2.ok && a2.ok);
    assert.equal(a2.document.apis, r2.document.apis);
    assert.equal(allowedFor("r", r2), false);
    assert.equal(allowedFor("a", a2), true);
  });
});
