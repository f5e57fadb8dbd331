import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  decrypt,
  decryptVerify,
  decryptVerifyAsync,
  encrypt,
  isCryptoError,
  Kek,
  KeyRing,
  PublicKeyRing,
  signEncrypt,
  signEncryptAsync,
  signerKeyLookup,
  unwrapKeyRing,
  wrapKeyRing,
} from "../../src/crypto/index.ts";

describe("crypto public API", () => {
  it("covers a service's whole flow: rings, wrapping, public export, e/d and s+e/d+v", () => {
    const kek = Kek.generate().kek;
    const partner = KeyRing.generate({ owner: "partner:acme" });
    const stored = JSON.stringify(wrapKeyRing(partner, kek));
    const service = unwrapKeyRing(JSON.parse(stored), kek);
    const published = PublicKeyRing.import(JSON.parse(JSON.stringify(service.exportPublic())));

    const ciphertext = encrypt(published, "plain data");
    assert.equal(Buffer.from(decrypt(service, ciphertext)).toString(), "plain data");

    const signed = signEncrypt({
      signer: service.signer(),
      recipient: published,
      purpose: "managed",
      plaintext: "data",
    });
    const result = decryptVerify(signed, {
      recipientKeys: service,
      signerKeys: signerKeyLookup([published]),
      expectedPurpose: "managed",
    });
    assert.equal(Buffer.from(result.plaintext).toString(), "data");
    assert.equal(result.signer, "partner:acme");
    assert.match(result.signedAt, /\+00:00$/);

    try {
      decrypt(service, `${ciphertext.slice(0, -8)}AAAAAAA=`);
      assert.fail("expected a failure");
    } catch (error) {
      assert.ok(isCryptoError(error));
      assert.equal(error.code, "crypto_decrypt_failed");
    }
  });

  it("exports the thread-pool forms of sign-encrypt and decrypt-verify", async () => {
    const ring = KeyRing.generate({ owner: "partner:acme" });
    const signed = await signEncryptAsync({
      signer: ring.signer(),
      recipient: ring,
      purpose: "managed",
      plaintext: "data",
    });
    const options = { recipientKeys: ring, signerKeys: ring.signerKeys, expectedPurpose: "managed" };
    const result = await decryptVerifyAsync(signed, options);
    assert.equal(Buffer.from(result.plaintext).toString(), "data");
    assert.equal(Buffer.from(decryptVerify(signed, options).plaintext).toString(), "data");
  });
});
