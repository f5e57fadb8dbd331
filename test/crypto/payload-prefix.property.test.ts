/**
 * A payload's SHA-512 continued from a held prefix (PayloadPrefix, verifySignedBlob's
 * `heldPrefix`) against the digest of the whole payload as the oracle: whatever bytes arrive —
 * the held ones, one byte changed anywhere, shorter, longer, empty — the digest is SHA-512 of
 * exactly those bytes, and a signed blob whose payload differs anywhere from what was signed is
 * refused, whatever prefix the lookup offers.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { CryptoError } from "../../src/crypto/errors.ts";
import { KeyRing, signerKeyLookup } from "../../src/crypto/key-ring.ts";
import { prepareSignature, verifySignedBlob } from "../../src/crypto/sign-encrypt.ts";
import { sign } from "../../src/crypto/signature.ts";
import { encodeSignedBlob, PayloadPrefix, payloadDigest } from "../../src/crypto/signed-blob.ts";

const alice = KeyRing.generate({ owner: "alice" });
const signers = signerKeyLookup([alice]);
const PURPOSE = "authority-policy/v1";

function signedBlob(payload: Uint8Array): Buffer {
  const prepared = prepareSignature({
    signer: alice.signer(),
    recipient: alice,
    purpose: PURPOSE,
    plaintext: payload,
  });
  return encodeSignedBlob(prepared.document, sign(prepared.signOptions), prepared.payload);
}

/** The blob with its payload (the last `length` bytes) replaced by `payload` of the same length. */
function withPayload(blob: Buffer, payload: Uint8Array): Buffer {
  const copy = Buffer.from(blob);
  Buffer.from(payload).copy(copy, copy.length - payload.length);
  return copy;
}

/** Bytes derived from `held`: itself, one byte changed, cut, extended, or unrelated. */
const derivedArb = (held: Uint8Array) =>
  fc.oneof(
    fc.constant(Buffer.from(held)),
    fc.tuple(fc.nat(), fc.integer({ min: 1, max: 255 })).map(([at, delta]) => {
      const bytes = Buffer.from(held);
      if (bytes.length > 0) bytes[at % bytes.length] = ((bytes[at % bytes.length] ?? 0) + delta) & 0xff;
      return bytes;
    }),
    fc.nat().map((cut) => Buffer.from(held).subarray(0, held.length === 0 ? 0 : cut % held.length)),
    fc.uint8Array({ maxLength: 300 }).map((rest) => Buffer.concat([held, rest])),
    fc.uint8Array({ maxLength: 300 }).map((bytes) => Buffer.from(bytes)),
  );

describe("a payload's digest continued from a held prefix", () => {
  it("is the digest of the whole payload, whatever its bytes (property)", () => {
    fc.assert(
      fc.property(
        fc
          .uint8Array({ maxLength: 600 })
          .chain((held) => fc.tuple(fc.constant(held), derivedArb(held), fc.uint8Array({ maxLength: 300 }))),
        ([held, start, rest]) => {
          const prefix = PayloadPrefix.of(Buffer.from(held));
          const payload = Buffer.concat([start, rest]);
          assert.deepEqual(PayloadPrefix.digest(payload, prefix), payloadDigest(payload));
          // A view into a larger buffer hashes as its own bytes only.
          const framed = Buffer.concat([Buffer.from([1, 2, 3]), payload, Buffer.from([4])]);
          const view = new Uint8Array(framed.buffer, framed.byteOffset + 3, payload.length);
          assert.deepEqual(PayloadPrefix.digest(view, prefix), payloadDigest(payload));
        },
      ),
      { numRuns: 2000 },
    );
  });

  it("takes the state only from a PayloadPrefix: a look-alike object is hashed past", () => {
    const payload = Buffer.from("held bytes and the rest");
    const lookAlike = { bytes: payload.subarray(0, 10), state: "forged" } as unknown as PayloadPrefix;
    assert.deepEqual(PayloadPrefix.digest(payload, lookAlike), payloadDigest(payload));
  });

  it("a signed payload changed anywhere is refused, with the held prefix of either version offered (property)", async () => {
    const section = Buffer.from(`{"apis":[${'{"capability_id":"billing-api"},'.repeat(40)}{}]`);
    const genuine = Buffer.concat([section, Buffer.from(',"schema_version":"v1"}')]);
    const blob = signedBlob(genuine);
    const verifyWith = (bytes: Buffer, prefix: PayloadPrefix | undefined) =>
      verifySignedBlob(bytes, { signerKeys: signers, expectedPurpose: PURPOSE, heldPrefix: () => prefix });
    const held = PayloadPrefix.of(Buffer.from(section));
    const verified = await verifyWith(blob, held);
    assert.deepEqual(Buffer.from(verified.payload), genuine);
    await fc.assert(
      fc.asyncProperty(fc.nat(), fc.integer({ min: 1, max: 255 }), async (at, delta) => {
        const tampered = Buffer.from(genuine);
        const index = at % tampered.length;
        tampered[index] = ((tampered[index] ?? 0) + delta) & 0xff;
        const forged = withPayload(blob, tampered);
        // The genuine section held, and — as if an earlier policy had them — the tampered bytes.
        for (const prefix of [held, PayloadPrefix.of(tampered.subarray(0, section.length)), undefined]) {
          await assert.rejects(
            verifyWith(forged, prefix),
            (error) => error instanceof CryptoError && error.code === "crypto_bad_signature",
            `byte ${index}`,
          );
        }
      }),
      { numRuns: 150 },
    );
  });
});
