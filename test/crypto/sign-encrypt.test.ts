import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import { decrypt, encrypt } from "../../src/crypto/encrypt.ts";
import { CryptoError } from "../../src/crypto/errors.ts";
import { open, seal } from "../../src/crypto/kem.ts";
import { KeyRing, signerKeyLookup } from "../../src/crypto/key-ring.ts";
import {
  canonicalDocument,
  type DecryptVerifyOptions,
  decodeSignedBlob,
  decryptVerify,
  decryptVerifyAsync,
  encodeSignedBlob,
  parseSignedDocument,
  SIGN_ENCRYPT_AAD,
  SIGN_ENCRYPT_CONTEXT,
  type SignEncryptOptions,
  type SignedDocument,
  signEncrypt,
  signEncryptAsync,
  type VerifiedMessage,
} from "../../src/crypto/sign-encrypt.ts";
import { SIGNATURE_BYTES, sign } from "../../src/crypto/signature.ts";
import { payloadDigest } from "../../src/crypto/signed-blob.ts";
import { createCryptoWorkerPool } from "../../src/crypto/worker-pool.ts";

const code = (expected: string, detail?: string) => (error: unknown) =>
  error instanceof CryptoError &&
  error.code === expected &&
  (detail === undefined || error.message.includes(detail));
const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8");

type DecryptVerifyFn = (
  envelope: string | Uint8Array,
  options: DecryptVerifyOptions,
) => Promise<VerifiedMessage>;
type SignEncryptFn = (options: SignEncryptOptions) => Promise<string>;

const pool = createCryptoWorkerPool({ size: 2 });
after(() => pool.close());

// Each behaviour is checked through the sync, the thread-pool and the worker-pool forms alike.
const modes: readonly (readonly [string, SignEncryptFn, DecryptVerifyFn])[] = [
  [
    "sync",
    async (options) => signEncrypt(options),
    async (envelope, options) => decryptVerify(envelope, options),
  ],
  ["async", signEncryptAsync, decryptVerifyAsync],
  ["worker pool", pool.signEncrypt, pool.decryptVerify],
];

const alice = KeyRing.generate({ owner: "alice" });
const bob = KeyRing.generate({ owner: "bob" });
const carol = KeyRing.generate({ owner: "carol" });
const signers = signerKeyLookup([alice, bob, carol]);
const now = new Date("2025-06-01T12:30:00.123Z");
const atBob = { recipientKeys: bob, signerKeys: signers };

const fromAlice = (plaintext: string | Uint8Array = "the policy", purpose = "policy") =>
  signEncrypt({ signer: alice.signer(), recipient: bob.recipient(), purpose, plaintext, now });

/** Bob's view of the signed blob inside an envelope addressed to him. */
const blobOf = (envelope: string) =>
  Buffer.from(open({ recipientPrivateKey: bob.current.kem.privateKey, envelope, aad: SIGN_ENCRYPT_AAD }));

/** Anyone can seal to Bob's public key: the AEAD proves nothing about the sender. */
const sealToBob = (blob: Uint8Array) =>
  seal({
    recipientPublicKey: bob.current.kem.publicKey,
    recipientKeyId: bob.current.keyId,
    plaintext: blob,
    aad: SIGN_ENCRYPT_AAD,
  });

const documentFor = (payload: Uint8Array, overrides: Partial<SignedDocument> = {}): SignedDocument => ({
  payload_length: payload.length,
  payload_sha512: payloadDigest(payload).toString("hex"),
  purpose: "policy",
  recipient_key_id: bob.current.keyId,
  signed_at: "2025-01-01T00:00:00.000+00:00",
  signer: "alice",
  signer_key_id: alice.current.keyId,
  typ: "authority.signed-document.v2",
  ...overrides,
});

/** A blob really signed by Alice, over whatever document the test wants. */
const signedByAlice = (document: SignedDocument, payload: Uint8Array, context = SIGN_ENCRYPT_CONTEXT) => {
  const bytes = canonicalDocument(document);
  const signature = sign({ privateKey: alice.current.sig.privateKey, message: bytes, context });
  return encodeSignedBlob(bytes, signature, payload);
};

const withUint32 = (blob: Buffer, offset: number, value: number) => {
  const copy = Buffer.from(blob);
  copy.writeUInt32BE(value, offset);
  return copy;
};

const withByte = (blob: Buffer, index: number, value: number) => {
  const copy = Buffer.from(blob);
  copy[index] = value;
  return copy;
};

const flipped = (blob: Buffer, index: number) => {
  const copy = Buffer.from(blob);
  copy[index] = (copy[index] ?? 0) ^ 0x01;
  return copy;
};

for (const [mode, signEncryptFn, decryptVerifyFn] of modes) {
  describe(`sign-encrypt / decrypt-verify (${mode})`, () => {
    const sealAsAlice = (plaintext: string | Uint8Array, purpose = "policy") =>
      signEncryptFn({ signer: alice.signer(), recipient: bob.recipient(), purpose, plaintext, now });

    it("round-trips and reports signer, key ids, time and purpose", async () => {
      const result = await decryptVerifyFn(await sealAsAlice("the policy"), {
        ...atBob,
        recipientKeys: bob.recipientKeys,
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

    it("round-trips binary, empty, multi-byte text and 100 KB payloads byte for byte", async () => {
      const binary = Uint8Array.from({ length: 300 }, (_, i) => i % 256);
      const large = Uint8Array.from({ length: 100 * 1024 }, (_, i) => (i * 31) % 251);
      for (const bytes of [binary, new Uint8Array(0), large]) {
        const result = await decryptVerifyFn(await sealAsAlice(bytes), atBob);
        assert.deepEqual(Uint8Array.from(result.plaintext), bytes);
      }
      const unicode = "politique ✓ — 政策 🔐";
      assert.equal(text((await decryptVerifyFn(await sealAsAlice(unicode), atBob)).plaintext), unicode);
    });

    it("reads what the other form wrote", async () => {
      const mine = await sealAsAlice("either way");
      assert.equal(text(decryptVerify(mine, atBob).plaintext), "either way");
      assert.equal(text((await decryptVerifyAsync(mine, atBob)).plaintext), "either way");
      assert.equal(text((await decryptVerifyFn(fromAlice("from sync"), atBob)).plaintext), "from sync");
      const fromAsync = await signEncryptAsync({
        signer: alice.signer(),
        recipient: bob,
        purpose: "p",
        plaintext: "x",
      });
      assert.equal(text((await decryptVerifyFn(fromAsync, atBob)).plaintext), "x");
    });

    it("the blob carries a small signed document, the signature and the raw payload", async () => {
      const payload = Buffer.alloc(5000, 0x61);
      const { document, signature, payload: carried } = decodeSignedBlob(blobOf(await sealAsAlice(payload)));
      assert.equal(signature.length, SIGNATURE_BYTES);
      assert.deepEqual(carried, payload);
      assert.ok(document.length < 600);
      const parsed = parseSignedDocument(document);
      assert.equal(parsed.payload_length, 5000);
      assert.equal(parsed.payload_sha512, payloadDigest(payload).toString("hex"));
      assert.equal(parsed.typ, "authority.signed-document.v2");
    });

    it("wrong purpose fails with crypto_wrong_purpose", async () => {
      await assert.rejects(
        decryptVerifyFn(fromAlice(), { ...atBob, expectedPurpose: "billing" }),
        code("crypto_wrong_purpose"),
      );
    });

    it("an envelope for another key id fails with crypto_wrong_recipient before decrypting", async () => {
      await assert.rejects(
        decryptVerifyFn(fromAlice(), { ...atBob, expectedRecipientKeyId: carol.current.keyId }),
        code("crypto_wrong_recipient"),
      );
    });

    it("a recipient without the key fails with crypto_unknown_key", async () => {
      await assert.rejects(
        decryptVerifyFn(fromAlice(), { recipientKeys: carol, signerKeys: signers }),
        code("crypto_unknown_key"),
      );
    });

    it("surreptitious forwarding is detected: Bob re-seals Alice's signed blob to Carol", async () => {
      const forwarded = seal({
        recipientPublicKey: carol.current.kem.publicKey,
        recipientKeyId: carol.current.keyId,
        plaintext: blobOf(fromAlice()),
        aad: SIGN_ENCRYPT_AAD,
      });
      await assert.rejects(
        decryptVerifyFn(forwarded, { recipientKeys: carol, signerKeys: signers }),
        code("crypto_wrong_recipient"),
      );
    });

    it("an unknown signer or key version fails with crypto_unknown_signer", async () => {
      await assert.rejects(
        decryptVerifyFn(fromAlice(), { recipientKeys: bob, signerKeys: bob.signerKeys }),
        code("crypto_unknown_signer"),
      );
      await assert.rejects(
        decryptVerifyFn(fromAlice(), { recipientKeys: bob, signerKeys: () => undefined }),
        code("crypto_unknown_signer"),
      );
    });

    it("a signature by another key fails with crypto_bad_signature", async () => {
      // The directory maps "alice" to Carol's key: the signature cannot verify.
      const impostor = (signerId: string) => (signerId === "alice" ? carol.current.sig.publicKey : undefined);
      await assert.rejects(
        decryptVerifyFn(fromAlice(), { recipientKeys: bob, signerKeys: impostor }),
        code("crypto_bad_signature"),
      );
    });

    it("a signer lookup returning a key of the wrong type fails with crypto_invalid_key", async () => {
      await assert.rejects(
        decryptVerifyFn(fromAlice(), { recipientKeys: bob, signerKeys: () => alice.current.kem.publicKey }),
        code("crypto_invalid_key"),
      );
    });

    describe("every tampering of the signed blob fails with its code", () => {
      const payload = Buffer.from(`${"x".repeat(8000)}the payload that was signed`);
      const original = blobOf(fromAlice(payload));
      const { document, signature } = decodeSignedBlob(original);
      const signatureStart = 5 + document.length;
      const payloadStart = signatureStart + SIGNATURE_BYTES;
      const other = blobOf(fromAlice(Buffer.from(`${"y".repeat(8000)}the payload that was signed`)));
      const otherParts = decodeSignedBlob(other);
      const v1Document = Buffer.from(
        JSON.stringify({
          payload: payload.toString("base64"),
          purpose: "policy",
          recipient_key_id: bob.current.keyId,
          signed_at: "2025-01-01T00:00:00.000+00:00",
          signer: "alice",
          signer_key_id: alice.current.keyId,
          typ: "authority.signed-document.v1",
        }),
      );
      const v1Signature = sign({
        privateKey: alice.current.sig.privateKey,
        message: v1Document,
        context: SIGN_ENCRYPT_CONTEXT,
      });
      const v1Head = Buffer.alloc(5);
      v1Head.writeUInt8(1, 0);
      v1Head.writeUInt32BE(v1Document.length, 1);

      const cases: readonly (readonly [string, Buffer, string, string?])[] = [
        ["untouched blob re-sealed by anyone still verifies (control)", original, "ok"],
        [
          "document changed, still canonical",
          encodeSignedBlob(
            canonicalDocument({ ...parseSignedDocument(document), purpose: "admins" }),
            signature,
            payload,
          ),
          "crypto_bad_signature",
        ],
        ["document byte changed (no longer JSON)", flipped(original, 5), "crypto_malformed"],
        [
          "digest no longer hex",
          withByte(original, 5 + document.indexOf("payload_sha512") + 20, 0x47),
          "crypto_malformed",
        ],
        ["signature byte changed", flipped(original, signatureStart + 1000), "crypto_bad_signature"],
        [
          "payload byte changed",
          flipped(original, payloadStart + 3),
          "crypto_bad_signature",
          "payload digest",
        ],
        [
          "last payload byte changed",
          flipped(original, original.length - 1),
          "crypto_bad_signature",
          "payload digest",
        ],
        ["payload one byte shorter", original.subarray(0, -1), "crypto_bad_signature", "payload length"],
        [
          "payload one byte longer",
          Buffer.concat([original, Buffer.of(0)]),
          "crypto_bad_signature",
          "payload length",
        ],
        [
          "payload swapped in from another valid envelope",
          Buffer.concat([original.subarray(0, payloadStart), otherParts.payload]),
          "crypto_bad_signature",
          "payload digest",
        ],
        [
          "signature and payload swapped in from another valid envelope",
          encodeSignedBlob(document, otherParts.signature, otherParts.payload),
          "crypto_bad_signature",
        ],
        ["length field + 1", withUint32(original, 1, document.length + 1), "crypto_malformed"],
        ["length field - 1", withUint32(original, 1, document.length - 1), "crypto_malformed"],
        ["length field 0", withUint32(original, 1, 0), "crypto_malformed"],
        ["length field past the end", withUint32(original, 1, 0xffffffff), "crypto_malformed"],
        ["length field within the blob but over 4096", withUint32(original, 1, 4097), "crypto_malformed"],
        [
          "blob truncated inside the signature",
          original.subarray(0, signatureStart + 100),
          "crypto_malformed",
        ],
        ["blob truncated inside the document", original.subarray(0, 40), "crypto_malformed"],
        ["blob truncated inside the head", original.subarray(0, 3), "crypto_malformed"],
        ["empty blob", Buffer.alloc(0), "crypto_malformed"],
        ["version byte 3", Buffer.concat([Buffer.of(3), original.subarray(1)]), "crypto_unsupported"],
        [
          "a version-1 blob (payload inside the document), validly signed",
          Buffer.concat([v1Head, v1Document, v1Signature]),
          "crypto_unsupported",
        ],
      ];

      for (const [name, blob, expected, detail] of cases) {
        it(`${name}: ${expected}`, async () => {
          const envelope = sealToBob(blob);
          if (expected === "ok") {
            assert.deepEqual(Buffer.from((await decryptVerifyFn(envelope, atBob)).plaintext), payload);
          } else {
            await assert.rejects(decryptVerifyFn(envelope, atBob), code(expected, detail));
          }
        });
      }
    });

    describe("documents Alice really signed, but that do not fit the blob or the protocol", () => {
      const payload = Buffer.from("signed payload");
      const cases: readonly (readonly [string, Buffer, string, string?])[] = [
        [
          "length that differs from the payload (digest right)",
          signedByAlice(documentFor(payload, { payload_length: payload.length + 1 }), payload),
          "crypto_bad_signature",
          "payload length",
        ],
        [
          "digest of another payload of the same length",
          signedByAlice(documentFor(Buffer.from("signed paylaod")), payload),
          "crypto_bad_signature",
          "payload digest",
        ],
        [
          "another context string",
          signedByAlice(documentFor(payload), payload, "other/v1"),
          "crypto_bad_signature",
        ],
        [
          "addressed to Carol's key",
          signedByAlice(documentFor(payload, { recipient_key_id: carol.current.keyId }), payload),
          "crypto_wrong_recipient",
        ],
        [
          "signed_at that is not an ISO timestamp with offset",
          signedByAlice(documentFor(payload, { signed_at: "yesterday" }), payload),
          "crypto_malformed",
          "signed_at",
        ],
        ["everything right (control)", signedByAlice(documentFor(payload), payload), "ok"],
      ];
      for (const [name, blob, expected, detail] of cases) {
        it(`${name}: ${expected}`, async () => {
          const envelope = sealToBob(blob);
          if (expected === "ok") {
            assert.deepEqual(Buffer.from((await decryptVerifyFn(envelope, atBob)).plaintext), payload);
          } else {
            await assert.rejects(decryptVerifyFn(envelope, atBob), code(expected, detail));
          }
        });
      }
    });

    it("a truncated or altered envelope fails before any signature work", async () => {
      const bytes = Buffer.from(fromAlice(), "base64");
      await assert.rejects(decryptVerifyFn(bytes.subarray(0, 500), atBob), code("crypto_malformed"));
      await assert.rejects(decryptVerifyFn(bytes.subarray(0, -1), atBob), code("crypto_decrypt_failed"));
      await assert.rejects(
        decryptVerifyFn(flipped(bytes, bytes.length - 40), atBob),
        code("crypto_decrypt_failed"),
      );
      await assert.rejects(decryptVerifyFn(`${fromAlice()} `, atBob), code("crypto_malformed"));
    });

    it("plain ciphertexts and signed ciphertexts do not open as each other", async () => {
      assert.throws(() => decrypt(bob, fromAlice()), code("crypto_decrypt_failed"));
      await assert.rejects(decryptVerifyFn(encrypt(bob, "plain"), atBob), code("crypto_decrypt_failed"));
    });

    it("verifies with a retired signer key after the signer rotates", async () => {
      const dave = KeyRing.generate({ owner: "dave" });
      const envelope = await signEncryptFn({
        signer: dave.signer(),
        recipient: bob,
        purpose: "p",
        plaintext: "old",
      });
      dave.rotate();
      const result = await decryptVerifyFn(envelope, { recipientKeys: bob, signerKeys: dave.signerKeys });
      assert.equal(text(result.plaintext), "old");
      assert.notEqual(result.signerKeyId, dave.current.keyId);
    });

    it("validates its arguments", async () => {
      const base = { signer: alice.signer(), recipient: bob, purpose: "p", plaintext: "x" };
      await assert.rejects(signEncryptFn({ ...base, purpose: "has space" }), code("crypto_invalid_argument"));
      await assert.rejects(
        signEncryptFn({ ...base, now: new Date(Number.NaN) }),
        code("crypto_invalid_argument"),
      );
      await assert.rejects(signEncryptFn({ ...base, plaintext: "\ud800" }), code("crypto_invalid_argument"));
      await assert.rejects(
        signEncryptFn({ ...base, signer: { ...alice.signer(), privateKey: alice.current.kem.privateKey } }),
        code("crypto_invalid_key"),
      );
      await assert.rejects(
        signEncryptFn({
          ...base,
          recipient: { keyId: bob.current.keyId, publicKey: bob.current.sig.publicKey },
        }),
        code("crypto_invalid_key"),
      );
    });
  });
}

describe("signed document parsing is strict", () => {
  const base = documentFor(Buffer.from("x"));
  const canonical = Buffer.from(canonicalDocument(base)).toString("utf8");
  const refused: readonly (readonly [string, string])[] = [
    ["incomplete", '{"payload_length":1,"purpose":"p"}'],
    ["whitespace", JSON.stringify(base, null, 1)],
    ["length as a string", canonical.replace('"payload_length":1', '"payload_length":"1"')],
    ["length in exponent form", canonical.replace('"payload_length":1', '"payload_length":1e0')],
    ["length with a fraction", canonical.replace('"payload_length":1', '"payload_length":1.5')],
    ["negative length", canonical.replace('"payload_length":1', '"payload_length":-1')],
    ["unsafe integer length", canonical.replace('"payload_length":1', '"payload_length":9007199254740993')],
    ["upper-case digest", canonical.replace(base.payload_sha512, base.payload_sha512.toUpperCase())],
    ["short digest", canonical.replace(base.payload_sha512, base.payload_sha512.slice(2))],
    ["version-1 type", canonical.replace("signed-document.v2", "signed-document.v1")],
    ["an extra field", canonical.replace('{"payload_length"', '{"extra":"x","payload_length"')],
    [
      "keys out of order",
      canonical.replace(/^\{("payload_length":1),("payload_sha512":"[0-9a-f]+")/, "{$2,$1"),
    ],
    ["not an object", "[]"],
    ["too long", `{"pad":"${"a".repeat(5000)}"}`],
  ];

  it("accepts the canonical document", () => {
    assert.deepEqual(parseSignedDocument(Buffer.from(canonical)), base);
  });

  for (const [name, textForm] of refused) {
    it(`refuses ${name}`, () => {
      assert.notEqual(textForm, canonical);
      assert.throws(() => parseSignedDocument(Buffer.from(textForm)), code("crypto_malformed"));
    });
  }
});

describe("signEncryptAsync / decryptVerifyAsync under concurrency", () => {
  it("16 concurrent calls each way give each caller its own result", async () => {
    const inputs = Array.from({ length: 16 }, (_, i) => `payload number ${i} `.repeat(i * 40 + 1));
    const envelopes = await Promise.all(
      inputs.map((plaintext, i) =>
        signEncryptAsync({ signer: alice.signer(), recipient: bob, purpose: `p${i}`, plaintext }),
      ),
    );
    const results = await Promise.all(
      envelopes.map((envelope, i) => decryptVerifyAsync(envelope, { ...atBob, expectedPurpose: `p${i}` })),
    );
    assert.deepEqual(
      results.map((result) => text(result.plaintext)),
      inputs,
    );
  });

  it("fails by rejecting, never by throwing synchronously, and leaves no unhandled rejection", async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on("unhandledRejection", onUnhandled);
    try {
      // Both the signer key and the recipient key are wrong: the signing job and the
      // sealing fail independently.
      const pending = signEncryptAsync({
        signer: { ...alice.signer(), privateKey: alice.current.kem.privateKey },
        recipient: { keyId: bob.current.keyId, publicKey: bob.current.sig.publicKey },
        purpose: "p",
        plaintext: "x",
      });
      await assert.rejects(pending, code("crypto_invalid_key"));
      await assert.rejects(decryptVerifyAsync("not base64!", atBob), code("crypto_malformed"));
      await new Promise((resolve) => setTimeout(resolve, 20));
      assert.deepEqual(unhandled, []);
    } finally {
      process.off("unhandledRejection", onUnhandled);
    }
  });
});
