/**
 * Cross-checks against @noble/post-quantum, an independent pure-JS implementation of
 * FIPS 203/204: keys, signatures (with context) and encapsulations must agree both ways.
 */
import assert from "node:assert/strict";
import { createCipheriv, createDecipheriv, createHash, decapsulate, encapsulate } from "node:crypto";
import { describe, it } from "node:test";
import { ml_dsa65 } from "@noble/post-quantum/ml-dsa.js";
import { ml_kem768 } from "@noble/post-quantum/ml-kem.js";
import { deserializeEnvelope, encodeHeader, envelopeInfo } from "../../src/crypto/envelope.ts";
import { hpkeSuiteId, keySchedule, keyScheduleContext } from "../../src/crypto/hpke.ts";
import { generateKeyPair as generateKemKeyPair, open, seal } from "../../src/crypto/kem.ts";
import { KeyRing } from "../../src/crypto/key-ring.ts";
import {
  exportPrivateSeed,
  exportRawPublicKey,
  importPrivateSeed,
  importPublicKey,
  KEM_ALGORITHM,
  SIG_ALGORITHM,
} from "../../src/crypto/keys.ts";
import {
  decodeSignedBlob,
  SIGN_ENCRYPT_AAD,
  SIGN_ENCRYPT_CONTEXT,
  signEncrypt,
  signEncryptAsync,
} from "../../src/crypto/sign-encrypt.ts";
import { generateKeyPair as generateSigKeyPair, sign, verify } from "../../src/crypto/signature.ts";

const utf8 = (text: string) => new TextEncoder().encode(text);
const context = utf8("authority/interop/v1");
const hpkeSuite = hpkeSuiteId(0x0041, 0x0001, 0x0002);

describe("interop with @noble/post-quantum: ML-DSA-65", () => {
  const message = utf8("a policy document to sign");

  it("a signature made here (with context) verifies with noble", () => {
    const keys = generateSigKeyPair();
    const signature = sign({ privateKey: keys.privateKey, message, context });
    const publicKey = exportRawPublicKey(keys.publicKey);
    assert.equal(ml_dsa65.verify(signature, message, publicKey, { context }), true);
    assert.equal(ml_dsa65.verify(signature, message, publicKey, { context: utf8("other") }), false);
    assert.equal(ml_dsa65.verify(signature, message, publicKey), false);
  });

  it("a noble signature (with context) verifies here", () => {
    const noble = ml_dsa65.keygen();
    const signature = ml_dsa65.sign(message, noble.secretKey, { context });
    const publicKey = importPublicKey(SIG_ALGORITHM, noble.publicKey);
    assert.equal(verify({ publicKey, message, signature, context }), true);
    assert.equal(verify({ publicKey, message, signature, context: "other" }), false);
  });

  it("the exported seed gives noble the same key pair", () => {
    const keys = generateSigKeyPair();
    const noble = ml_dsa65.keygen(exportPrivateSeed(keys.privateKey));
    assert.deepEqual(Buffer.from(noble.publicKey), Buffer.from(exportRawPublicKey(keys.publicKey)));
    const signature = ml_dsa65.sign(message, noble.secretKey, { context });
    assert.equal(verify({ publicKey: keys.publicKey, message, signature, context }), true);
    const fromNobleSeed = importPrivateSeed(SIG_ALGORITHM, exportPrivateSeed(keys.privateKey));
    assert.ok(fromNobleSeed.equals(keys.privateKey));
  });
});

describe("interop with @noble/post-quantum: ML-KEM-768", () => {
  it("noble encapsulates to a key exported here; it decapsulates here to the same secret", () => {
    const keys = generateKemKeyPair();
    const { cipherText, sharedSecret } = ml_kem768.encapsulate(exportRawPublicKey(keys.publicKey));
    assert.deepEqual(decapsulate(keys.privateKey, cipherText), Buffer.from(sharedSecret));
  });

  it("Node encapsulates to a noble key; noble decapsulates to the same secret", () => {
    const noble = ml_kem768.keygen();
    const publicKey = importPublicKey(KEM_ALGORITHM, noble.publicKey);
    const { sharedKey, ciphertext } = encapsulate(publicKey);
    assert.deepEqual(Buffer.from(ml_kem768.decapsulate(ciphertext, noble.secretKey)), sharedKey);
  });

  it("the exported 64-byte seed gives noble the same key pair", () => {
    const keys = generateKemKeyPair();
    const noble = ml_kem768.keygen(exportPrivateSeed(keys.privateKey));
    assert.deepEqual(Buffer.from(noble.publicKey), Buffer.from(exportRawPublicKey(keys.publicKey)));
  });

  it("an envelope built with noble's encapsulation opens here", () => {
    const keys = generateKemKeyPair();
    const keyId = "interop-1";
    const { cipherText, sharedSecret } = ml_kem768.encapsulate(exportRawPublicKey(keys.publicKey));
    const info = envelopeInfo(keyId);
    const { key, baseNonce } = keySchedule({
      suiteId: hpkeSuite,
      sharedSecret,
      context: keyScheduleContext(hpkeSuite, info),
      keyLength: 32,
      nonceLength: 12,
    });
    const header = encodeHeader({ keyId, kemCiphertext: cipherText, nonce: baseNonce });
    const cipher = createCipheriv("aes-256-gcm", key, baseNonce);
    cipher.setAAD(header);
    const body = Buffer.concat([cipher.update("built by noble"), cipher.final(), cipher.getAuthTag()]);
    const envelope = Buffer.concat([header, body]).toString("base64");
    assert.equal(
      Buffer.from(open({ recipientPrivateKey: keys.privateKey, envelope })).toString(),
      "built by noble",
    );
  });

  it("an envelope sealed here opens with noble's decapsulation", () => {
    const keys = generateKemKeyPair();
    const noble = ml_kem768.keygen(exportPrivateSeed(keys.privateKey));
    const envelope = deserializeEnvelope(
      seal({ recipientPublicKey: keys.publicKey, recipientKeyId: "interop-2", plaintext: "sealed by node" }),
    );
    const sharedSecret = ml_kem768.decapsulate(envelope.kemCiphertext, noble.secretKey);
    const { key, baseNonce } = keySchedule({
      suiteId: hpkeSuite,
      sharedSecret,
      context: keyScheduleContext(hpkeSuite, envelope.info),
      keyLength: 32,
      nonceLength: 12,
    });
    assert.deepEqual(baseNonce, Buffer.from(envelope.nonce));
    const decipher = createDecipheriv("aes-256-gcm", key, baseNonce);
    decipher.setAAD(envelope.header);
    decipher.setAuthTag(envelope.body.subarray(-16));
    const plaintext = Buffer.concat([decipher.update(envelope.body.subarray(0, -16)), decipher.final()]);
    assert.equal(plaintext.toString(), "sealed by node");
  });

  it("the signature inside a sign-encrypt envelope (sync and async) verifies with noble", async () => {
    const alice = KeyRing.generate({ owner: "alice" });
    const bob = KeyRing.generate({ owner: "bob" });
    const plaintext = "hi ".repeat(5000);
    const options = { signer: alice.signer(), recipient: bob, purpose: "p", plaintext };
    const publicKey = exportRawPublicKey(alice.current.sig.publicKey);
    for (const envelope of [signEncrypt(options), await signEncryptAsync(options)]) {
      const blob = open({ recipientPrivateKey: bob.current.kem.privateKey, envelope, aad: SIGN_ENCRYPT_AAD });
      const { document, signature, payload } = decodeSignedBlob(blob);
      assert.equal(
        ml_dsa65.verify(signature, document, publicKey, { context: utf8(SIGN_ENCRYPT_CONTEXT) }),
        true,
      );
      // What noble verified binds the payload that travels beside it.
      const signed = JSON.parse(Buffer.from(document).toString("utf8"));
      assert.equal(signed.payload_length, payload.length);
      assert.equal(signed.payload_sha512, createHash("sha512").update(payload).digest("hex"));
      assert.equal(Buffer.from(payload).toString("utf8"), plaintext);
    }
  });
});
