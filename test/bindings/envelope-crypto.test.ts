import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  argumentsDigest,
  buildEnvelopeClaims,
  PARTNER_PROFILE_V2,
  partnerSigner,
} from "../../src/bindings/envelope.ts";
import {
  createKeyRingEnvelopeCrypto,
  EnvelopeCryptoUnavailableError,
} from "../../src/bindings/envelope-crypto.ts";
import { signEncrypt } from "../../src/crypto/index.ts";
import type { KeyRingSource } from "../../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../../src/policy/process-key-rings.ts";

const partners = new Set(["acme", "globex"]);

function setup(keyRings: KeyRingSource = createProcessKeyRings()) {
  return {
    keyRings,
    crypto: createKeyRingEnvelopeCrypto({
      keyRings,
      serviceIdentity: "env-1",
      partnerExists: async (id) => partners.has(id),
    }),
  };
}

const claims = buildEnvelopeClaims({
  profile: PARTNER_PROFILE_V2,
  issuer: "https://authority.example",
  partnerId: "acme",
  bindingId: "b1",
  operationId: "getCustomer",
  permissionId: "customers:get:/customers/{customerId}",
  argsDigest: argumentsDigest({ path: { customerId: "cus_1" } }),
  now: new Date(),
});

describe("envelope crypto", () => {
  it("seals for the service identity, signed by the partner, and opens again", async () => {
    const { crypto } = setup();
    const envelope = await crypto.seal(claims, "acme", PARTNER_PROFILE_V2);
    const opened = await crypto.open(envelope, "acme", PARTNER_PROFILE_V2);
    assert.equal(opened.ok, true);
    if (opened.ok) {
      assert.deepEqual(JSON.parse(opened.plaintext), claims);
      assert.equal(opened.signer, "partner:acme");
    }
    assert.ok(!envelope.includes("getCustomer"), "the envelope is encrypted");
  });

  it("tells a valid signature of another partner from a forgery", async () => {
    const { crypto } = setup();
    const envelope = await crypto.seal(claims, "globex", PARTNER_PROFILE_V2);
    assert.deepEqual(await crypto.open(envelope, "acme", PARTNER_PROFILE_V2), {
      ok: false,
      failure: "signer_mismatch",
    });
  });

  it("refuses tampered envelopes, foreign keys, other purposes and unknown signers", async () => {
    const { crypto, keyRings } = setup();
    const envelope = await crypto.seal(claims, "acme", PARTNER_PROFILE_V2);
    const bytes = Buffer.from(envelope, "base64");
    bytes[bytes.length - 5] = (bytes[bytes.length - 5] ?? 0) ^ 1;
    const service = await keyRings.keyRing("service:env-1");
    const acme = await keyRings.keyRing(partnerSigner("acme"));
    const unknownPartner = await keyRings.keyRing(partnerSigner("initech"));
    const candidates = [
      bytes.toString("base64"),
      "",
      "bm90IGFuIGVudmVsb3Bl",
      // Sealed to the right service, signed by the right partner, but for another purpose.
      signEncrypt({
        signer: acme.signer(),
        recipient: service,
        purpose: "authority-policy",
        plaintext: "{}",
      }),
      // Signed by a ring of a name that is no partner.
      signEncrypt({
        signer: unknownPartner.signer(),
        recipient: service,
        purpose: PARTNER_PROFILE_V2.purpose,
        plaintext: JSON.stringify(claims),
      }),
      // Sealed to another environment's service identity.
      await setup().crypto.seal(claims, "acme", PARTNER_PROFILE_V2),
    ];
    for (const candidate of candidates) {
      assert.deepEqual(await crypto.open(candidate, "acme", PARTNER_PROFILE_V2), {
        ok: false,
        failure: "invalid_signature",
      });
    }
  });

  it("reports unavailable keys as unavailable, not as a bad envelope", async () => {
    const broken: KeyRingSource = {
      keyRing: async () => {
        throw new Error("key store down");
      },
    };
    const { crypto } = setup(broken);
    await assert.rejects(crypto.seal(claims, "acme", PARTNER_PROFILE_V2), EnvelopeCryptoUnavailableError);
    await assert.rejects(crypto.open("AAAA", "acme", PARTNER_PROFILE_V2), EnvelopeCryptoUnavailableError);
  });
});
