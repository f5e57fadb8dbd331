import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { CryptoServiceError } from "../../../src/clients/crypto-service/reasons.ts";
import { splitBinaryBody } from "../../../src/clients/crypto-service/wire.ts";
import { KeyRing, signerKeyLookup } from "../../../src/crypto/key-ring.ts";
import { signEncrypt, type VerifiedMessage } from "../../../src/crypto/sign-encrypt.ts";
import {
  binaryAnswer,
  decryptVerifyAction,
  jsonAnswer,
  type SignatureEngine,
  threadPoolEngine,
} from "../../../src/servers/crypto/actions.ts";

// decrypt-verify answers with the verified blob itself (no copy of it): whatever the outcome,
// the blob holding the plaintext is wiped once the answer no longer needs it.

const ring = KeyRing.generate({ owner: "partner" });
const signerKeys = signerKeyLookup([ring]);

/** threadPoolEngine, remembering what it verified so the test can look at those bytes after. */
function watchingEngine(): { engine: SignatureEngine; seen: VerifiedMessage[] } {
  const seen: VerifiedMessage[] = [];
  return {
    seen,
    engine: {
      signEncrypt: threadPoolEngine.signEncrypt,
      async decryptVerify(envelope, options) {
        const verified = await threadPoolEngine.decryptVerify(envelope, options);
        seen.push(verified);
        return verified;
      },
    },
  };
}

const sealed = (plaintext: string | Uint8Array) =>
  signEncrypt({ signer: ring.signer(), recipient: ring, purpose: "p", plaintext });
const input = (encryptedData: string, signedBlob?: boolean) => ({
  ring,
  encryptedData,
  signerKeys,
  expectedPurpose: "p",
  ...(signedBlob === undefined ? {} : { signedBlob }),
});
const wiped = (bytes: Uint8Array) => bytes.every((byte) => byte === 0);

describe("decrypt-verify action", () => {
  it("answers the verified blob, which the binary answer carries and then wipes", async () => {
    const { engine, seen } = watchingEngine();
    const answer = await decryptVerifyAction(input(sealed("secret text")), engine);
    assert.equal(answer.payload.decrypted_data, "secret text");
    const blob = seen[0]?.signedBlob;
    assert.ok(blob !== undefined && !wiped(blob));
    assert.equal(answer.signedBlob?.buffer, blob.buffer);
    const before = Buffer.from(blob);
    const body = binaryAnswer(answer);
    assert.deepEqual(Buffer.from(splitBinaryBody(body).bytes), before);
    assert.ok(wiped(blob));
  });

  it("wipes the blob after the JSON answer encodes it", async () => {
    const { engine, seen } = watchingEngine();
    const answer = await decryptVerifyAction(input(sealed("secret text")), engine);
    const json = jsonAnswer(answer);
    assert.equal(typeof json.signed_blob, "string");
    assert.ok(seen[0] !== undefined && wiped(seen[0].signedBlob));
  });

  it('wipes the blob at once when the caller said "signed_blob": false', async () => {
    const { engine, seen } = watchingEngine();
    const answer = await decryptVerifyAction(input(sealed("secret text"), false), engine);
    assert.equal(answer.signedBlob, undefined);
    assert.equal(answer.payload.decrypted_data, "secret text");
    assert.ok(seen[0] !== undefined && wiped(seen[0].signedBlob));
  });

  it("wipes the blob when the plaintext is not text", async () => {
    const { engine, seen } = watchingEngine();
    await assert.rejects(
      decryptVerifyAction(input(sealed(Uint8Array.from([0x68, 0xff, 0xfe]))), engine),
      (error: unknown) => error instanceof CryptoServiceError && error.reason === "not_text",
    );
    assert.ok(seen[0] !== undefined && wiped(seen[0].signedBlob));
  });
});
