import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { deserializeEnvelope } from "../../src/crypto/envelope.ts";
import { CryptoError } from "../../src/crypto/errors.ts";
import { createSealer, generateKeyPair, open, openAsync, seal, sealBytes } from "../../src/crypto/kem.ts";
import { generateKeyPair as generateSigKeyPair } from "../../src/crypto/signature.ts";

const code = (expected: string) => (error: unknown) =>
  error instanceof CryptoError && error.code === expected;
const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8");

describe("ML-KEM-768 seal/open", () => {
  const recipient = generateKeyPair();
  const keyId = "bob-v1";

  it("round-trips text, bytes and the empty plaintext", () => {
    const envelope = seal({
      recipientPublicKey: recipient.publicKey,
      recipientKeyId: keyId,
      plaintext: "héllo ✓",
    });
    assert.equal(text(open({ recipientPrivateKey: recipient.privateKey, envelope })), "héllo ✓");
    const bytes = Uint8Array.from([0, 1, 2, 255]);
    const sealed = sealBytes({
      recipientPublicKey: recipient.publicKey,
      recipientKeyId: keyId,
      plaintext: bytes,
    });
    assert.deepEqual(
      Uint8Array.from(open({ recipientPrivateKey: recipient.privateKey, envelope: sealed })),
      bytes,
    );
    const empty = seal({ recipientPublicKey: recipient.publicKey, recipientKeyId: keyId, plaintext: "" });
    assert.equal(open({ recipientPrivateKey: recipient.privateKey, envelope: empty }).length, 0);
  });

  it("uses a fresh encapsulation per message", () => {
    const a = seal({ recipientPublicKey: recipient.publicKey, recipientKeyId: keyId, plaintext: "same" });
    const b = seal({ recipientPublicKey: recipient.publicKey, recipientKeyId: keyId, plaintext: "same" });
    assert.notEqual(a, b);
    assert.notDeepEqual(deserializeEnvelope(a).nonce, deserializeEnvelope(b).nonce);
  });

  it("binds the caller's associated data", () => {
    const envelope = seal({
      recipientPublicKey: recipient.publicKey,
      recipientKeyId: keyId,
      plaintext: "x",
      aad: "ctx-a",
    });
    assert.equal(text(open({ recipientPrivateKey: recipient.privateKey, envelope, aad: "ctx-a" })), "x");
    assert.throws(
      () => open({ recipientPrivateKey: recipient.privateKey, envelope, aad: "ctx-b" }),
      code("crypto_decrypt_failed"),
    );
    assert.throws(
      () => open({ recipientPrivateKey: recipient.privateKey, envelope }),
      code("crypto_decrypt_failed"),
    );
  });

  it("fails for another recipient's private key", () => {
    const other = generateKeyPair();
    const envelope = seal({
      recipientPublicKey: recipient.publicKey,
      recipientKeyId: keyId,
      plaintext: "secret",
    });
    assert.throws(
      () => open({ recipientPrivateKey: other.privateKey, envelope }),
      code("crypto_decrypt_failed"),
    );
    assert.throws(
      () => open({ recipientPrivateKey: recipient.privateKey, envelope, recipientKeyId: "carol-v1" }),
      code("crypto_wrong_recipient"),
    );
  });

  it("openAsync (decapsulation on the thread pool) opens and refuses exactly as open", async () => {
    const envelope = Buffer.from(
      seal({
        recipientPublicKey: recipient.publicKey,
        recipientKeyId: keyId,
        plaintext: "secret",
        aad: "ctx",
      }),
      "base64",
    );
    const options = { recipientPrivateKey: recipient.privateKey, envelope, aad: "ctx" };
    assert.deepEqual(Buffer.from(await openAsync(options)), Buffer.from(open(options)));
    const failure = (run: () => unknown) => {
      try {
        run();
        return "opened";
      } catch (error) {
        return error instanceof CryptoError ? error.code : "other";
      }
    };
    const asyncFailure = async (run: () => Promise<unknown>) => {
      try {
        await run();
        return "opened";
      } catch (error) {
        return error instanceof CryptoError ? error.code : "other";
      }
    };
    // Every byte of the envelope changed, one at a time (a stride keeps the test short), a
    // foreign key, another aad, another expected recipient.
    const variants: Array<Parameters<typeof open>[0]> = [
      { ...options, recipientPrivateKey: generateKeyPair().privateKey },
      { ...options, aad: "other" },
      { ...options, recipientKeyId: "carol-v1" },
    ];
    for (let position = 0; position < envelope.length; position += 7) {
      const changed = Buffer.from(envelope);
      changed[position] = (changed[position] ?? 0) ^ 0x40;
      variants.push({ ...options, envelope: changed });
    }
    for (const variant of variants) {
      const expected = failure(() => open(variant));
      assert.notEqual(expected, "opened");
      assert.equal(await asyncFailure(() => openAsync(variant)), expected);
    }
  });

  it("refuses keys of the wrong algorithm or type", () => {
    const sig = generateSigKeyPair();
    assert.throws(
      () => seal({ recipientPublicKey: sig.publicKey, recipientKeyId: keyId, plaintext: "x" }),
      code("crypto_invalid_key"),
    );
    assert.throws(
      () => seal({ recipientPublicKey: recipient.privateKey, recipientKeyId: keyId, plaintext: "x" }),
      code("crypto_invalid_key"),
    );
    const envelope = seal({ recipientPublicKey: recipient.publicKey, recipientKeyId: keyId, plaintext: "x" });
    assert.throws(
      () => open({ recipientPrivateKey: recipient.publicKey, envelope }),
      code("crypto_invalid_key"),
    );
    assert.throws(
      () => seal({ recipientPublicKey: recipient.publicKey, recipientKeyId: keyId, plaintext: "\ud800" }),
      code("crypto_invalid_argument"),
    );
  });

  describe("tampering with each part fails cleanly", () => {
    const plaintext = "attack at dawn; the quick brown fox jumps over the lazy dog";
    const original = sealBytes({ recipientPublicKey: recipient.publicKey, recipientKeyId: keyId, plaintext });
    const parsed = deserializeEnvelope(original.toString("base64"));
    const kemStart = 8 + keyId.length + 2;
    const nonceStart = kemStart + 1088;
    const bodyStart = nonceStart + 12;
    const tagStart = original.length - 16;

    const cases: Array<[string, number, string]> = [
      ["magic", 1, "crypto_malformed"],
      ["format version", 4, "crypto_unsupported"],
      ["suite id", 6, "crypto_unsupported"],
      ["key id length", 7, "crypto_malformed"],
      ["key id", 8, "crypto_decrypt_failed"],
      ["KEM ciphertext length", kemStart - 1, "crypto_malformed"],
      ["KEM ciphertext (first byte)", kemStart, "crypto_decrypt_failed"],
      ["KEM ciphertext (last byte)", nonceStart - 1, "crypto_decrypt_failed"],
      ["nonce", nonceStart + 5, "crypto_decrypt_failed"],
      ["body (first byte)", bodyStart, "crypto_decrypt_failed"],
      ["body (last byte)", tagStart - 1, "crypto_decrypt_failed"],
      ["tag (first byte)", tagStart, "crypto_decrypt_failed"],
      ["tag (last byte)", original.length - 1, "crypto_decrypt_failed"],
    ];

    it("the layout assumed here is the envelope's", () => {
      assert.equal(parsed.header.length, bodyStart);
      assert.equal(parsed.body.length, Buffer.byteLength(plaintext) + 16);
    });

    for (const [part, offset, expected] of cases) {
      it(`${part} → ${expected}`, () => {
        const tampered = Buffer.from(original);
        // Flip the lowest bit: for the key id this keeps it a valid id ("bob-v1" → "cob-v1").
        tampered[offset] = (tampered[offset] ?? 0) ^ 0x01;
        let result: Uint8Array | undefined;
        assert.throws(() => {
          result = open({ recipientPrivateKey: recipient.privateKey, envelope: tampered.toString("base64") });
        }, code(expected));
        assert.equal(result, undefined);
      });
    }

    it("truncation and extension fail", () => {
      for (const bytes of [
        original.subarray(0, original.length - 1),
        Buffer.concat([original, Buffer.of(0)]),
      ]) {
        assert.throws(
          () => open({ recipientPrivateKey: recipient.privateKey, envelope: bytes }),
          (error: unknown) =>
            error instanceof CryptoError &&
            ["crypto_malformed", "crypto_decrypt_failed"].includes(error.code),
        );
      }
      assert.throws(
        () =>
          open({ recipientPrivateKey: recipient.privateKey, envelope: original.subarray(0, bodyStart + 15) }),
        code("crypto_malformed"),
      );
    });

    it("errors never carry plaintext", () => {
      const tampered = Buffer.from(original);
      tampered[bodyStart] = (tampered[bodyStart] ?? 0) ^ 0xff;
      try {
        open({ recipientPrivateKey: recipient.privateKey, envelope: tampered });
        assert.fail("expected a failure");
      } catch (error) {
        assert.ok(error instanceof CryptoError);
        assert.ok(!error.message.includes("attack"));
        assert.ok(!JSON.stringify({ ...error, message: error.message }).includes("attack"));
      }
    });
  });
});

describe("sealing a plaintext given in parts", () => {
  const recipient = generateKeyPair();
  const options = { recipientPublicKey: recipient.publicKey, recipientKeyId: "parts-1", aad: "label" };

  it("opens to the concatenation of the parts, with the same aad", () => {
    const parts = [Buffer.from("head|"), new Uint8Array(0), Buffer.alloc(70_000, 7), Buffer.from("|tail")];
    const sealer = createSealer(options);
    for (const part of parts) sealer.update(part);
    const envelope = sealer.finish();
    const opened = open({ recipientPrivateKey: recipient.privateKey, envelope, aad: "label" });
    assert.deepEqual(Buffer.from(opened), Buffer.concat(parts));
    assert.throws(
      () => open({ recipientPrivateKey: recipient.privateKey, envelope, aad: "other" }),
      code("crypto_decrypt_failed"),
    );
  });

  it("a sealer fed nothing seals the empty plaintext", () => {
    const envelope = createSealer(options).finish();
    assert.equal(open({ recipientPrivateKey: recipient.privateKey, envelope, aad: "label" }).length, 0);
  });

  it("validates its key and key id before encapsulating", () => {
    assert.throws(
      () => createSealer({ ...options, recipientPublicKey: recipient.privateKey }),
      code("crypto_invalid_key"),
    );
    assert.throws(
      () => createSealer({ ...options, recipientKeyId: "bad id" }),
      code("crypto_invalid_argument"),
    );
  });
});
