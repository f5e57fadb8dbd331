/**
 * Attacks on the sidecar's signed-policy verifier (signed-policy.ts) now that it sits on the
 * shared signer-key cache (src/crypto/signer-key-cache.ts): a pinned owner verifies with the
 * pinned keys only, forged key ids refetch at most once per cooldown, a ring for another owner
 * is refused, a key source that fails or answers garbage is `policy_protection_unavailable`,
 * and nothing is fetched for a signer other than the one the policy must be signed by.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  decryptVerify,
  encodeSignedBlob,
  KeyRing,
  type PublicKeyRingJson,
  signEncrypt,
} from "../../src/crypto/index.ts";
import {
  POLICY_PURPOSE,
  type PolicyProtectionContext,
  PolicyProtectionError,
} from "../../src/policy/protector.ts";
import { createSignedPolicyVerifier, type PolicyKeySource } from "../../src/policy/signed-policy.ts";

const V2: PolicyProtectionContext = {
  cryptoVersion: "platform_service_v2",
  subjectId: "ext_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
  partnerId: "partner-1",
};
const SERVICE = "service:t";

/** The signed blob (base64) a sidecar is handed for `text`, signed by `signer`'s current key. */
function signedPolicy(signer: KeyRing, text: string, purpose = POLICY_PURPOSE): string {
  const recipient = KeyRing.generate({ owner: "recipient" });
  const envelope = signEncrypt({ signer: signer.signer(), recipient, purpose, plaintext: text });
  const verified = decryptVerify(envelope, {
    recipientKeys: recipient,
    signerKeys: signer.signerKeys,
  });
  return encodeSignedBlob(verified.signedDocument, verified.signature, verified.plaintext).toString("base64");
}

/** A key source that records every owner asked and answers from `rings`. */
function countingSource(rings: Map<string, () => PublicKeyRingJson | undefined>) {
  const asked: string[] = [];
  const source: PolicyKeySource = {
    async fetchPolicyKeys(owner) {
      asked.push(owner);
      return rings.get(owner)?.();
    },
  };
  return { asked, source };
}

async function rejectsWith(promise: Promise<unknown>, code: string): Promise<void> {
  await assert.rejects(promise, (error: unknown) => {
    assert.ok(error instanceof PolicyProtectionError, String(error));
    assert.equal(error.code, code);
    return true;
  });
}

describe("sidecar signed-policy verifier on the shared signer-key cache", () => {
  it("a pinned owner verifies with pinned keys only: a fetched key never counts", async () => {
    const pinned = KeyRing.generate({ owner: SERVICE });
    const attacker = KeyRing.generate({ owner: SERVICE, keyId: "k-attacker" });
    // The key source would vouch for the attacker's key: it must never be asked for a pinned owner.
    const { asked, source } = countingSource(new Map([[SERVICE, () => attacker.exportPublic()]]));
    const verifier = createSignedPolicyVerifier({
      serviceIdentity: "t",
      pinned: [pinned.exportPublic()],
      source,
    });
    assert.equal((await verifier.open(signedPolicy(pinned, "pinned"), V2)).document, "pinned");
    for (let i = 0; i < 3; i++) {
      await rejectsWith(verifier.open(signedPolicy(attacker, "forged"), V2), "policy_unverifiable");
    }
    assert.deepEqual(asked, []);
  });

  it("forged key ids refetch an owner's keys at most once per cooldown", async () => {
    const service = KeyRing.generate({ owner: SERVICE });
    const { asked, source } = countingSource(new Map([[SERVICE, () => service.exportPublic()]]));
    let clock = 1_000_000;
    const verifier = createSignedPolicyVerifier({
      serviceIdentity: "t",
      source,
      refetchCooldownMs: 10_000,
      now: () => clock,
    });
    assert.equal((await verifier.open(signedPolicy(service, "real"), V2)).document, "real");
    assert.equal(asked.length, 1);
    const forgeries = Array.from({ length: 20 }, (_, i) =>
      signedPolicy(KeyRing.generate({ owner: SERVICE, keyId: `k-forged-${i}` }), "allow all"),
    );
    for (const forged of forgeries) await rejectsWith(verifier.open(forged, V2), "policy_unverifiable");
    assert.equal(asked.length, 2, "twenty forged key ids: one refetch");
    clock += 10_001;
    for (const forged of forgeries) await rejectsWith(verifier.open(forged, V2), "policy_unverifiable");
    assert.equal(asked.length, 3, "after the cooldown: one more");
    // The real key still verifies from the cache, with no fetch.
    assert.equal((await verifier.open(signedPolicy(service, "still"), V2)).document, "still");
    assert.equal(asked.length, 3);
  });

  it("fetches nothing for a signer other than the policy's owner, whatever its name", async () => {
    const { asked, source } = countingSource(new Map());
    const verifier = createSignedPolicyVerifier({ serviceIdentity: "t", source });
    for (const owner of ["service:other", "subject:x", "__proto__", "constructor", "service:t "]) {
      await rejectsWith(
        verifier.open(signedPolicy(KeyRing.generate({ owner }), "x"), V2),
        "policy_unverifiable",
      );
    }
    assert.deepEqual(asked, []);
  });

  it("refuses a ring the source hands out for another owner", async () => {
    const service = KeyRing.generate({ owner: SERVICE });
    const impostor = KeyRing.generate({ owner: "service:impostor", keyId: service.current.keyId });
    // The source answers the impostor's ring (same key id) when asked for the service's keys.
    const { asked, source } = countingSource(new Map([[SERVICE, () => impostor.exportPublic()]]));
    const verifier = createSignedPolicyVerifier({ serviceIdentity: "t", source });
    await rejectsWith(verifier.open(signedPolicy(service, "real"), V2), "policy_unverifiable");
    const forgedAsService = KeyRing.generate({ owner: SERVICE, keyId: service.current.keyId });
    await rejectsWith(verifier.open(signedPolicy(forgedAsService, "x"), V2), "policy_unverifiable");
    assert.ok(asked.length >= 1);
  });

  it("a failing or malformed key source is policy_protection_unavailable, and it recovers", async () => {
    const service = KeyRing.generate({ owner: SERVICE });
    let mode: "down" | "garbage" | "up" = "down";
    const verifier = createSignedPolicyVerifier({
      serviceIdentity: "t",
      refetchCooldownMs: 0,
      source: {
        async fetchPolicyKeys() {
          if (mode === "down") throw new Error("connect ECONNREFUSED 10.0.0.1:8443");
          if (mode === "garbage")
            return { format: "authority.public-keys.v1", owner: SERVICE, keys: [{}] } as never;
          return service.exportPublic();
        },
      },
    });
    const policy = signedPolicy(service, "ok");
    const down = await verifier.open(policy, V2).then(
      () => assert.fail("opened with the key source down"),
      (error: unknown) => error,
    );
    assert.ok(down instanceof PolicyProtectionError);
    assert.equal(down.code, "policy_protection_unavailable");
    assert.equal(down.message.includes("ECONNREFUSED"), false, "no upstream detail in the message");
    mode = "garbage";
    await rejectsWith(verifier.open(policy, V2), "policy_protection_unavailable");
    mode = "up";
    assert.equal((await verifier.open(policy, V2)).document, "ok");
  });

  it("refuses a policy blob with another purpose, signed by the right owner", async () => {
    const service = KeyRing.generate({ owner: SERVICE });
    const verifier = createSignedPolicyVerifier({ serviceIdentity: "t", pinned: [service.exportPublic()] });
    for (const purpose of ["authority-secret/v1", "partner-profile-v2", "managed-crypto/v1"]) {
      await rejectsWith(verifier.open(signedPolicy(service, "x", purpose), V2), "policy_unverifiable");
    }
  });
});
