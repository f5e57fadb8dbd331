import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { decrypt, encrypt } from "../../src/crypto/encrypt.ts";
import { CryptoError } from "../../src/crypto/errors.ts";
import { generateKeyPair, open, seal } from "../../src/crypto/kem.ts";
import { KeyRing } from "../../src/crypto/key-ring.ts";
import {
  decryptVerify,
  decryptVerifyAsync,
  SIGN_ENCRYPT_AAD,
  signEncrypt,
  signEncryptAsync,
} from "../../src/crypto/sign-encrypt.ts";

const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8");

const bytesArb = fc.uint8Array({ maxLength: 4096 });
const stringArb = fc.oneof(
  fc.string({ unit: "grapheme", maxLength: 300 }),
  fc.string({ unit: "binary", maxLength: 300 }).filter((s) => s.isWellFormed()),
);

describe("property: any plaintext round-trips", () => {
  const keys = generateKeyPair();
  const alice = KeyRing.generate({ owner: "alice" });
  const bob = KeyRing.generate({ owner: "bob" });

  it("seal/open, bytes", () => {
    fc.assert(
      fc.property(bytesArb, (plaintext) => {
        const envelope = seal({ recipientPublicKey: keys.publicKey, recipientKeyId: "k1", plaintext });
        assert.deepEqual(
          Uint8Array.from(open({ recipientPrivateKey: keys.privateKey, envelope })),
          plaintext,
        );
      }),
      { numRuns: 100 },
    );
  });

  it("seal/open, unicode strings", () => {
    fc.assert(
      fc.property(stringArb, fc.string({ maxLength: 40 }), (plaintext, aad) => {
        const envelope = seal({ recipientPublicKey: keys.publicKey, recipientKeyId: "k1", plaintext, aad });
        assert.equal(text(open({ recipientPrivateKey: keys.privateKey, envelope, aad })), plaintext);
      }),
      { numRuns: 100 },
    );
  });

  it("encrypt/decrypt on a key ring", () => {
    fc.assert(
      fc.property(fc.oneof(bytesArb, stringArb), (plaintext) => {
        const out = decrypt(bob, encrypt(bob, plaintext));
        if (typeof plaintext === "string") assert.equal(text(out), plaintext);
        else assert.deepEqual(Uint8Array.from(out), plaintext);
      }),
      { numRuns: 50 },
    );
  });

  it("signEncrypt/decryptVerify, bytes and unicode strings", () => {
    fc.assert(
      fc.property(fc.oneof(bytesArb, stringArb), (plaintext) => {
        const envelope = signEncrypt({ signer: alice.signer(), recipient: bob, purpose: "prop", plaintext });
        const result = decryptVerify(envelope, {
          recipientKeys: bob,
          signerKeys: alice.signerKeys,
          expectedPurpose: "prop",
        });
        if (typeof plaintext === "string") assert.equal(text(result.plaintext), plaintext);
        else assert.deepEqual(Uint8Array.from(result.plaintext), plaintext);
        assert.equal(result.signer, "alice");
      }),
      { numRuns: 60 },
    );
  });

  it("signEncryptAsync/decryptVerifyAsync agree with the sync forms", async () => {
    await fc.assert(
      fc.asyncProperty(fc.oneof(bytesArb, stringArb), async (plaintext) => {
        const options = { signer: alice.signer(), recipient: bob, purpose: "prop", plaintext };
        const verifyOptions = { recipientKeys: bob, signerKeys: alice.signerKeys, expectedPurpose: "prop" };
        const expected =
          typeof plaintext === "string" ? Buffer.from(plaintext, "utf8") : Buffer.from(plaintext);
        const viaAsync = await decryptVerifyAsync(await signEncryptAsync(options), verifyOptions);
        const mixed = decryptVerify(await signEncryptAsync(options), verifyOptions);
        const mixedBack = await decryptVerifyAsync(signEncrypt(options), verifyOptions);
        for (const result of [viaAsync, mixed, mixedBack]) {
          assert.deepEqual(Buffer.from(result.plaintext), expected);
          assert.equal(result.signer, "alice");
        }
      }),
      { numRuns: 20 },
    );
  });

  it("any single-byte change of a signed blob, re-sealed to the recipient, is rejected", () => {
    const envelope = signEncrypt({
      signer: alice.signer(),
      recipient: bob,
      purpose: "prop",
      plaintext: "p".repeat(500),
    });
    const blob = Buffer.from(
      open({ recipientPrivateKey: bob.current.kem.privateKey, envelope, aad: SIGN_ENCRYPT_AAD }),
    );
    const recipient = bob.recipient();
    fc.assert(
      fc.property(fc.nat({ max: blob.length - 1 }), fc.integer({ min: 1, max: 255 }), (index, mask) => {
        const tampered = Buffer.from(blob);
        tampered[index] = (tampered[index] ?? 0) ^ mask;
        const resealed = seal({
          recipientPublicKey: recipient.publicKey,
          recipientKeyId: recipient.keyId,
          plaintext: tampered,
          aad: SIGN_ENCRYPT_AAD,
        });
        assert.throws(
          () => decryptVerify(resealed, { recipientKeys: bob, signerKeys: alice.signerKeys }),
          (error: unknown) => error instanceof CryptoError,
        );
      }),
      { numRuns: 150 },
    );
  });

  it("any single-byte change of an envelope is rejected with a typed error", () => {
    const envelope = Buffer.from(
      seal({ recipientPublicKey: keys.publicKey, recipientKeyId: "k1", plaintext: "fixed plaintext" }),
      "base64",
    );
    fc.assert(
      fc.property(fc.nat({ max: envelope.length - 1 }), fc.integer({ min: 1, max: 255 }), (index, mask) => {
        const tampered = Buffer.from(envelope);
        tampered[index] = (tampered[index] ?? 0) ^ mask;
        assert.throws(
          () => open({ recipientPrivateKey: keys.privateKey, envelope: tampered }),
          (error: unknown) => error instanceof CryptoError,
        );
      }),
      { numRuns: 200 },
    );
  });

  it("strings with lone surrogates are refused rather than altered", () => {
    fc.assert(
      // A low surrogate first or a high surrogate last can never be half of a pair.
      fc.property(fc.string({ unit: "binary", maxLength: 50 }), fc.boolean(), (a, atStart) => {
        const plaintext = atStart ? `\udfff${a}` : `${a}\ud800`;
        assert.throws(
          () => seal({ recipientPublicKey: keys.publicKey, recipientKeyId: "k1", plaintext }),
          (error: unknown) => error instanceof CryptoError && error.code === "crypto_invalid_argument",
        );
      }),
      { numRuns: 30 },
    );
  });
});
