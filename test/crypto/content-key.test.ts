/**
 * Content keys (kem.ts unwrapContentKey / openWithContentKey, sign-encrypt.ts
 * decryptVerifyWithContentKey): what a key holder hands out in place of a plaintext opens that
 * one envelope and nothing else, and its holder still cannot pass off a message the signer
 * did not sign.
 */
import assert from "node:assert/strict";
import { createCipheriv } from "node:crypto";
import { describe, it } from "node:test";
import fc from "fast-check";
import { deserializeEnvelope, parseEnvelope, parseEnvelopeHeader } from "../../src/crypto/envelope.ts";
import { CryptoError } from "../../src/crypto/errors.ts";
import { open, openWithContentKey, seal, unwrapContentKey } from "../../src/crypto/kem.ts";
import { KeyRing, signerKeyLookup } from "../../src/crypto/key-ring.ts";
import {
  canonicalDocument,
  decodeSignedBlob,
  decryptVerifyAsync,
  decryptVerifyWithContentKey,
  encodeSignedBlob,
  parseSignedDocument,
  SIGN_ENCRYPT_AAD,
  signEncrypt,
} from "../../src/crypto/sign-encrypt.ts";

const code = (expected: string) => (error: unknown) =>
  error instanceof CryptoError && error.code === expected;

const alice = KeyRing.generate({ owner: "alice" });
const bob = KeyRing.generate({ owner: "bob" });
const aliceKey = alice.recipientKeys(alice.current.keyId);
if (aliceKey === undefined) throw new Error("no key");
const signers = signerKeyLookup([alice, bob]);
const asyncSigners = async (signer: string, keyId: string) => signers(signer, keyId);

/** Seals `blob` again under a known content key and the same header: what a key holder can make. */
function resealed(envelopeText: string, contentKey: Buffer, blob: Uint8Array): Buffer {
  const parsed = deserializeEnvelope(envelopeText);
  const cipher = createCipheriv("aes-256-gcm", contentKey, parsed.nonce, { authTagLength: 16 });
  cipher.setAAD(Buffer.concat([parsed.header, Buffer.from(SIGN_ENCRYPT_AAD)]));
  return Buffer.concat([parsed.header, cipher.update(blob), cipher.final(), cipher.getAuthTag()]);
}

describe("content keys", () => {
  it("open exactly what the private key opens", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 2048 }), fc.option(fc.string()), (plaintext, aad) => {
        const envelope = seal({
          recipientPublicKey: alice.current.kem.publicKey,
          recipientKeyId: alice.current.keyId,
          plaintext,
          ...(aad === null ? {} : { aad }),
        });
        const parsed = deserializeEnvelope(envelope);
        const key = unwrapContentKey(aliceKey, parseEnvelopeHeader(parsed.header));
        const viaKey = openWithContentKey(parsed, key, aad ?? undefined);
        assert.deepEqual(
          Buffer.from(viaKey),
          Buffer.from(open({ recipientPrivateKey: aliceKey, envelope, ...(aad === null ? {} : { aad }) })),
        );
      }),
      { numRuns: 50 },
    );
  });

  it("do not open another envelope to the same recipient", () => {
    const seal1 = seal({
      recipientPublicKey: alice.current.kem.publicKey,
      recipientKeyId: alice.current.keyId,
      plaintext: "one",
    });
    const seal2 = seal({
      recipientPublicKey: alice.current.kem.publicKey,
      recipientKeyId: alice.current.keyId,
      plaintext: "two",
    });
    const key1 = unwrapContentKey(aliceKey, deserializeEnvelope(seal1));
    assert.throws(() => openWithContentKey(deserializeEnvelope(seal2), key1), code("crypto_decrypt_failed"));
  });

  it("are refused for a header that was altered anywhere, or opened nothing", () => {
    const envelope = seal({
      recipientPublicKey: alice.current.kem.publicKey,
      recipientKeyId: alice.current.keyId,
      plaintext: "secret",
    });
    const bytes = Buffer.from(envelope, "base64");
    const headerLength = deserializeEnvelope(envelope).header.length;
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: headerLength - 1 }),
        fc.integer({ min: 1, max: 255 }),
        (at, flip) => {
          const altered = Buffer.from(bytes);
          altered[at] = (altered[at] ?? 0) ^ flip;
          let parsed: ReturnType<typeof parseEnvelope>;
          try {
            parsed = parseEnvelope(altered);
          } catch (error) {
            assert.ok(error instanceof CryptoError);
            return;
          }
          const recipient = alice.recipientKeys(parsed.keyId);
          if (recipient === undefined) return; // a changed key id names no key: refused before any work
          let key: Buffer;
          try {
            key = unwrapContentKey(recipient, parsed);
          } catch (error) {
            assert.ok(code("crypto_decrypt_failed")(error));
            return;
          }
          assert.throws(() => openWithContentKey(parsed, key), code("crypto_decrypt_failed"));
        },
      ),
      { numRuns: 200 },
    );
  });

  it("parse a header exactly: a whole envelope, a truncated header or foreign bytes are refused", () => {
    const envelope = seal({
      recipientPublicKey: alice.current.kem.publicKey,
      recipientKeyId: alice.current.keyId,
      plaintext: "x",
    });
    const parsed = deserializeEnvelope(envelope);
    assert.equal(parseEnvelopeHeader(parsed.header).keyId, alice.current.keyId);
    assert.throws(() => parseEnvelopeHeader(Buffer.from(envelope, "base64")), code("crypto_malformed"));
    assert.throws(() => parseEnvelopeHeader(parsed.header.subarray(0, -1)), code("crypto_malformed"));
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 1300 }), (bytes) => {
        try {
          parseEnvelopeHeader(bytes);
        } catch (error) {
          assert.ok(error instanceof CryptoError);
        }
      }),
    );
  });

  it("decrypt-verify with a content key gives what decrypt-verify with the private key gives", async () => {
    const envelope = signEncrypt({
      signer: bob.signer(),
      recipient: alice,
      purpose: "policy",
      plaintext: '{"a":1}',
    });
    const parsed = deserializeEnvelope(envelope);
    const key = unwrapContentKey(aliceKey, parsed);
    const viaKey = await decryptVerifyWithContentKey(parsed, key, {
      signerKeys: asyncSigners,
      expectedPurpose: "policy",
    });
    const direct = await decryptVerifyAsync(envelope, {
      recipientKeys: alice,
      signerKeys: signers,
      expectedPurpose: "policy",
    });
    assert.deepEqual(
      { ...viaKey, plaintext: Buffer.from(viaKey.plaintext) },
      { ...direct, plaintext: Buffer.from(direct.plaintext) },
    );
    await assert.rejects(
      decryptVerifyWithContentKey(parsed, key, { signerKeys: asyncSigners, expectedPurpose: "other" }),
      code("crypto_wrong_purpose"),
    );
    await assert.rejects(
      decryptVerifyWithContentKey(parsed, key, { signerKeys: async () => undefined }),
      code("crypto_unknown_signer"),
    );
    await assert.rejects(
      decryptVerifyWithContentKey(parsed, key, {
        signerKeys: async () => {
          throw new Error("key source down");
        },
      }),
      /key source down/,
    );
  });

  it("its holder cannot pass off an altered document or payload: the signature still decides", async () => {
    const envelope = signEncrypt({
      signer: bob.signer(),
      recipient: alice,
      purpose: "policy",
      plaintext: "allow: read",
    });
    const parsed = deserializeEnvelope(envelope);
    const key = unwrapContentKey(aliceKey, parsed);
    const blob = openWithContentKey(parsed, key, SIGN_ENCRYPT_AAD);
    const { document, signature, payload } = decodeSignedBlob(blob);

    const otherPayload = resealed(
      envelope,
      key,
      encodeSignedBlob(document, signature, Buffer.from("allow: *")),
    );
    await assert.rejects(
      decryptVerifyWithContentKey(parseEnvelope(otherPayload), key, { signerKeys: asyncSigners }),
      (error: unknown) => error instanceof CryptoError,
    );

    const fields = parseSignedDocument(document);
    const otherDocument = canonicalDocument({ ...fields, purpose: "admin" });
    const forged = resealed(envelope, key, encodeSignedBlob(otherDocument, signature, payload));
    await assert.rejects(
      decryptVerifyWithContentKey(parseEnvelope(forged), key, { signerKeys: asyncSigners }),
      code("crypto_bad_signature"),
    );
  });
});
