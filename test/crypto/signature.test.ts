import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { CryptoError } from "../../src/crypto/errors.ts";
import { generateKeyPair as generateKemKeyPair } from "../../src/crypto/kem.ts";
import {
  assertValidSignature,
  generateKeyPair,
  SIGNATURE_BYTES,
  sign,
  signAsync,
  verify,
  verifyAsync,
} from "../../src/crypto/signature.ts";

const code = (expected: string) => (error: unknown) =>
  error instanceof CryptoError && error.code === expected;

describe("ML-DSA-65 with a context string", () => {
  const keys = generateKeyPair();
  const message = "policy document";
  const context = "authority/test/v1";

  it("verifies a signature over the same message and context", () => {
    const signature = sign({ privateKey: keys.privateKey, message, context });
    assert.equal(signature.length, SIGNATURE_BYTES);
    assert.equal(verify({ publicKey: keys.publicKey, message, signature, context }), true);
    assertValidSignature({ publicKey: keys.publicKey, message, signature, context });
  });

  it("rejects another context, message, key or a damaged signature", () => {
    const signature = sign({ privateKey: keys.privateKey, message, context });
    assert.equal(
      verify({ publicKey: keys.publicKey, message, signature, context: "authority/other/v1" }),
      false,
    );
    assert.equal(verify({ publicKey: keys.publicKey, message, signature, context: "" }), false);
    assert.equal(verify({ publicKey: keys.publicKey, message: `${message}.`, signature, context }), false);
    assert.equal(verify({ publicKey: generateKeyPair().publicKey, message, signature, context }), false);
    const damaged = Uint8Array.from(signature);
    damaged[100] = (damaged[100] ?? 0) ^ 1;
    assert.equal(verify({ publicKey: keys.publicKey, message, signature: damaged, context }), false);
    assert.equal(
      verify({ publicKey: keys.publicKey, message, signature: signature.subarray(1), context }),
      false,
    );
    assert.throws(
      () => assertValidSignature({ publicKey: keys.publicKey, message, signature: damaged, context }),
      code("crypto_bad_signature"),
    );
  });

  it("accepts a context of 255 bytes and refuses 256", () => {
    const long = new Uint8Array(255).fill(7);
    const signature = sign({ privateKey: keys.privateKey, message, context: long });
    assert.equal(verify({ publicKey: keys.publicKey, message, signature, context: long }), true);
    assert.throws(
      () => sign({ privateKey: keys.privateKey, message, context: new Uint8Array(256) }),
      code("crypto_invalid_argument"),
    );
    assert.throws(
      () => verify({ publicKey: keys.publicKey, message, signature, context: "é".repeat(128) }),
      code("crypto_invalid_argument"),
    );
  });

  it("refuses keys of the wrong algorithm or type", () => {
    const kem = generateKemKeyPair();
    assert.throws(() => sign({ privateKey: kem.privateKey, message, context }), code("crypto_invalid_key"));
    assert.throws(() => sign({ privateKey: keys.publicKey, message, context }), code("crypto_invalid_key"));
    const signature = sign({ privateKey: keys.privateKey, message, context });
    assert.throws(
      () => verify({ publicKey: keys.privateKey, message, signature, context }),
      code("crypto_invalid_key"),
    );
  });
});

describe("ML-DSA-65 on the thread pool (node:crypto callback form)", () => {
  const keys = generateKeyPair();
  const message = "policy document";
  const context = "authority/test/v1";

  it("signAsync honours the context: the signature verifies only under that context", async () => {
    const signature = await signAsync({ privateKey: keys.privateKey, message, context });
    assert.equal(signature.length, SIGNATURE_BYTES);
    assert.equal(verify({ publicKey: keys.publicKey, message, signature, context }), true);
    assert.equal(
      verify({ publicKey: keys.publicKey, message, signature, context: "authority/other/v1" }),
      false,
    );
    assert.equal(verify({ publicKey: keys.publicKey, message, signature, context: "" }), false);
  });

  it("verifyAsync honours the context and agrees with verify", async () => {
    const signature = sign({ privateKey: keys.privateKey, message, context });
    assert.equal(await verifyAsync({ publicKey: keys.publicKey, message, signature, context }), true);
    assert.equal(
      await verifyAsync({ publicKey: keys.publicKey, message, signature, context: "authority/other/v1" }),
      false,
    );
    assert.equal(await verifyAsync({ publicKey: keys.publicKey, message, signature, context: "" }), false);
    assert.equal(
      await verifyAsync({ publicKey: keys.publicKey, message: `${message}.`, signature, context }),
      false,
    );
    const damaged = Uint8Array.from(signature);
    damaged[100] = (damaged[100] ?? 0) ^ 1;
    assert.equal(
      await verifyAsync({ publicKey: keys.publicKey, message, signature: damaged, context }),
      false,
    );
    assert.equal(
      await verifyAsync({ publicKey: keys.publicKey, message, signature: signature.subarray(1), context }),
      false,
    );
  });

  it("many concurrent jobs each give the right answer", async () => {
    const messages = Array.from({ length: 16 }, (_, i) => `message ${i}`);
    const signatures = await Promise.all(
      messages.map((m) => signAsync({ privateKey: keys.privateKey, message: m, context })),
    );
    const results = await Promise.all(
      signatures.flatMap((signature, i) => [
        verifyAsync({ publicKey: keys.publicKey, message: messages[i] ?? "", signature, context }),
        verifyAsync({ publicKey: keys.publicKey, message: messages[(i + 1) % 16] ?? "", signature, context }),
      ]),
    );
    assert.deepEqual(
      results,
      messages.flatMap(() => [true, false]),
    );
  });

  it("argument errors reject with the same codes as the sync forms", async () => {
    const kem = generateKemKeyPair();
    await assert.rejects(
      signAsync({ privateKey: kem.privateKey, message, context }),
      code("crypto_invalid_key"),
    );
    await assert.rejects(
      signAsync({ privateKey: keys.privateKey, message, context: new Uint8Array(256) }),
      code("crypto_invalid_argument"),
    );
    const signature = sign({ privateKey: keys.privateKey, message, context });
    await assert.rejects(
      verifyAsync({ publicKey: keys.privateKey, message, signature, context }),
      code("crypto_invalid_key"),
    );
  });
});
