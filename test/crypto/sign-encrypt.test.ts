import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { decrypt, encrypt } from "../../src/crypto/encrypt.ts";
import { CryptoError } from "../../src/crypto/errors.ts";
import { open, seal } from "../../src/crypto/kem.ts";
import { KeyRing, signerKeyLookup } from "../../src/crypto/key-ring.ts";
import {
  canonicalDocument,
  decodeSignedBlob,
  decryptVerify,
  encodeSignedBlob,
  parseSignedDocument,
  SIGN_ENCRYPT_AAD,
  SIGN_ENCRYPT_CONTEXT,
  type SignedDocument,
  signEncrypt,
} from "../../src/crypto/sign-encrypt.ts";
import { sign } from "../../src/crypto/signature.ts";

const code = (expected: string) => (error: unknown) =>
  error instanceof CryptoError && error.code === expected;
const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8");

describe("sign-encrypt / decrypt-verify", () => {
  const alice = KeyRing.generate({ owner: "alice" });
  const bob = KeyRing.generate({ owner: "bob" });
  const carol = KeyRing.generate({ owner: "carol" });
  const signers = signerKeyLookup([alice, bob, carol]);
  const now = new Date("2025-06-01T12:30:00.123Z");

  const fromAlice = (plaintext: string | Uint8Array = "the policy", purpose = "policy") =>
    signEncrypt({ signer: alice.signer(), recipient: bob.recipient(), purpose, plaintext, now });

  it("round-trips and reports signer, key ids, time and purpose", () => {
    const result = decryptVerify(fromAlice(), {
      recipientKeys: bob.recipientKeys,
      signerKeys: signers,
      expectedPurpose: "policy",
      expectedRecipientKeyId: bob.current.keyId,
    });
    assert.equal(text(result.plaintext), "the policy");
    assert.equal(result.signer, "alice");
    assert.equal(result.signerKeyId, alice.current.keyId);
    assert.equal(result.recipientKeyId, bob.current.keyId);
    assert.equal(result.purpose, "policy");
    assert.equal(result.signedAt, "2025-06-01T12:30:00.123+00:00");
    assert.equal(new Date(result.signedAt).getTime(), now.getTime());
  });

  it("binary plaintexts round-trip byte for byte", () => {
    const bytes = Uint8Array.from({ length: 300 }, (_, i) => i % 256);
    const result = decryptVerify(fromAlice(bytes), { recipientKeys: bob, signerKeys: signers });
    assert.deepEqual(Uint8Array.from(result.plaintext), bytes);
  });

  it("wrong purpose fails with crypto_wrong_purpose", () => {
    assert.throws(
      () =>
        decryptVerify(fromAlice(), { recipientKeys: bob, signerKeys: signers, expectedPurpose: "billing" }),
      code("crypto_wrong_purpose"),
    );
  });

  it("an envelope for another key id fails with crypto_wrong_recipient before decrypting", () => {
    assert.throws(
      () =>
        decryptVerify(fromAlice(), {
          recipientKeys: bob,
          signerKeys: signers,
          expectedRecipientKeyId: carol.current.keyId,
        }),
      code("crypto_wrong_recipient"),
    );
  });

  it("a recipient without the key fails with crypto_unknown_key", () => {
    assert.throws(
      () => decryptVerify(fromAlice(), { recipientKeys: carol, signerKeys: signers }),
      code("crypto_unknown_key"),
    );
  });

  it("surreptitious forwarding is detected: Bob re-seals Alice's signed document to Carol", () => {
    const blob = open({
      recipientPrivateKey: bob.current.kem.privateKey,
      envelope: fromAlice(),
      aad: SIGN_ENCRYPT_AAD,
    });
    const forwarded = seal({
      recipientPublicKey: carol.current.kem.publicKey,
      recipientKeyId: carol.current.keyId,
      plaintext: blob,
      aad: SIGN_ENCRYPT_AAD,
    });
    assert.throws(
      () => decryptVerify(forwarded, { recipientKeys: carol, signerKeys: signers }),
      code("crypto_wrong_recipient"),
    );
  });

  it("an unknown signer or key version fails with crypto_unknown_signer", () => {
    assert.throws(
      () => decryptVerify(fromAlice(), { recipientKeys: bob, signerKeys: bob.signerKeys }),
      code("crypto_unknown_signer"),
    );
    assert.throws(
      () => decryptVerify(fromAlice(), { recipientKeys: bob, signerKeys: () => undefined }),
      code("crypto_unknown_signer"),
    );
  });

  it("a signature by another key fails with crypto_bad_signature", () => {
    // The directory maps "alice" to Carol's key: the signature cannot verify.
    const impostor = (signerId: string) => (signerId === "alice" ? carol.current.sig.publicKey : undefined);
    assert.throws(
      () => decryptVerify(fromAlice(), { recipientKeys: bob, signerKeys: impostor }),
      code("crypto_bad_signature"),
    );
  });

  it("an altered signed document fails with crypto_bad_signature", () => {
    const blob = open({
      recipientPrivateKey: bob.current.kem.privateKey,
      envelope: fromAlice(),
      aad: SIGN_ENCRYPT_AAD,
    });
    const { document, signature } = decodeSignedBlob(blob);
    const parsed = parseSignedDocument(document);
    const altered = canonicalDocument({ ...parsed, purpose: "admin" });
    const resealed = seal({
      recipientPublicKey: bob.current.kem.publicKey,
      recipientKeyId: bob.current.keyId,
      plaintext: encodeSignedBlob(altered, signature),
      aad: SIGN_ENCRYPT_AAD,
    });
    assert.throws(
      () => decryptVerify(resealed, { recipientKeys: bob, signerKeys: signers }),
      code("crypto_bad_signature"),
    );
  });

  it("a signature made under another context fails with crypto_bad_signature", () => {
    const document: SignedDocument = {
      payload: Buffer.from("x").toString("base64"),
      purpose: "policy",
      recipient_key_id: bob.current.keyId,
      signed_at: "2025-01-01T00:00:00.000+00:00",
      signer: "alice",
      signer_key_id: alice.current.keyId,
      typ: "authority.signed-document.v1",
    };
    const bytes = canonicalDocument(document);
    const signature = sign({ privateKey: alice.current.sig.privateKey, message: bytes, context: "other/v1" });
    const envelope = seal({
      recipientPublicKey: bob.current.kem.publicKey,
      recipientKeyId: bob.current.keyId,
      plaintext: encodeSignedBlob(bytes, signature),
      aad: SIGN_ENCRYPT_AAD,
    });
    assert.throws(
      () => decryptVerify(envelope, { recipientKeys: bob, signerKeys: signers }),
      code("crypto_bad_signature"),
    );
    const good = sign({
      privateKey: alice.current.sig.privateKey,
      message: bytes,
      context: SIGN_ENCRYPT_CONTEXT,
    });
    const goodEnvelope = seal({
      recipientPublicKey: bob.current.kem.publicKey,
      recipientKeyId: bob.current.keyId,
      plaintext: encodeSignedBlob(bytes, good),
      aad: SIGN_ENCRYPT_AAD,
    });
    assert.equal(
      text(decryptVerify(goodEnvelope, { recipientKeys: bob, signerKeys: signers }).plaintext),
      "x",
    );
  });

  it("non-canonical or incomplete documents are malformed", () => {
    const doc = '{"payload":"eA==","purpose":"p"}';
    assert.throws(() => parseSignedDocument(Buffer.from(doc)), code("crypto_malformed"));
    const base: SignedDocument = {
      payload: "eA==",
      purpose: "p",
      recipient_key_id: "k",
      signed_at: "2025-01-01T00:00:00.000+00:00",
      signer: "alice",
      signer_key_id: "k",
      typ: "authority.signed-document.v1",
    };
    const spaced = JSON.stringify(base, null, 1);
    assert.throws(() => parseSignedDocument(Buffer.from(spaced)), code("crypto_malformed"));
    assert.deepEqual(parseSignedDocument(canonicalDocument(base)), base);
    assert.throws(() => decodeSignedBlob(Buffer.from("x")), code("crypto_malformed"));
  });

  it("plain ciphertexts and signed ciphertexts do not open as each other", () => {
    assert.throws(() => decrypt(bob, fromAlice()), code("crypto_decrypt_failed"));
    assert.throws(
      () => decryptVerify(encrypt(bob, "plain"), { recipientKeys: bob, signerKeys: signers }),
      code("crypto_decrypt_failed"),
    );
  });

  it("verifies with a retired signer key after the signer rotates", () => {
    const dave = KeyRing.generate({ owner: "dave" });
    const envelope = signEncrypt({ signer: dave.signer(), recipient: bob, purpose: "p", plaintext: "old" });
    dave.rotate();
    const result = decryptVerify(envelope, { recipientKeys: bob, signerKeys: dave.signerKeys });
    assert.equal(text(result.plaintext), "old");
    assert.notEqual(result.signerKeyId, dave.current.keyId);
  });

  it("validates its arguments", () => {
    assert.throws(
      () => signEncrypt({ signer: alice.signer(), recipient: bob, purpose: "has space", plaintext: "x" }),
      code("crypto_invalid_argument"),
    );
    assert.throws(
      () =>
        signEncrypt({
          signer: alice.signer(),
          recipient: bob,
          purpose: "p",
          plaintext: "x",
          now: new Date(Number.NaN),
        }),
      code("crypto_invalid_argument"),
    );
    assert.throws(
      () =>
        signEncrypt({
          signer: { ...alice.signer(), privateKey: alice.current.kem.privateKey },
          recipient: bob,
          purpose: "p",
          plaintext: "x",
        }),
      code("crypto_invalid_key"),
    );
  });
});
