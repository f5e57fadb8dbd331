import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import {
  deserializeEnvelope,
  encodeHeader,
  envelopeInfo,
  envelopeKeyId,
  parseEnvelope,
  SUITE_MLKEM768_AES256GCM,
  serializeEnvelope,
} from "../../src/crypto/envelope.ts";
import { CryptoError } from "../../src/crypto/errors.ts";

const code = (expected: string) => (error: unknown) =>
  error instanceof CryptoError && error.code === expected;

function sample(keyId = "key-1"): { bytes: Buffer; kem: Buffer; nonce: Buffer; body: Buffer } {
  const kem = randomBytes(SUITE_MLKEM768_AES256GCM.kemCiphertextBytes);
  const nonce = randomBytes(12);
  const body = randomBytes(40);
  return {
    bytes: Buffer.concat([encodeHeader({ keyId, kemCiphertext: kem, nonce }), body]),
    kem,
    nonce,
    body,
  };
}

describe("envelope format", () => {
  it("lays out magic, version, suite, key id, KEM ciphertext, nonce, body", () => {
    const { bytes, kem, nonce, body } = sample("key-1");
    assert.equal(bytes.subarray(0, 4).toString("latin1"), "APQE");
    assert.equal(bytes[4], 1);
    assert.equal(bytes.readUInt16BE(5), 1);
    assert.equal(bytes[7], 5);
    assert.equal(bytes.subarray(8, 13).toString("latin1"), "key-1");
    assert.equal(bytes.readUInt16BE(13), 1088);
    assert.deepEqual(bytes.subarray(15, 15 + 1088), kem);
    assert.deepEqual(bytes.subarray(1103, 1115), nonce);
    assert.deepEqual(bytes.subarray(1115), body);
  });

  it("parses what it encodes, exposing info and header", () => {
    const { bytes, kem, nonce, body } = sample("pq1-0011aabb");
    const parsed = deserializeEnvelope(serializeEnvelope(bytes));
    assert.equal(parsed.keyId, "pq1-0011aabb");
    assert.equal(parsed.version, 1);
    assert.equal(parsed.suite, SUITE_MLKEM768_AES256GCM);
    assert.deepEqual(Buffer.from(parsed.kemCiphertext), kem);
    assert.deepEqual(Buffer.from(parsed.nonce), nonce);
    assert.deepEqual(parsed.body, body);
    assert.deepEqual(parsed.info, envelopeInfo("pq1-0011aabb"));
    assert.deepEqual(parsed.header, bytes.subarray(0, bytes.length - body.length));
    assert.equal(envelopeKeyId(serializeEnvelope(bytes)), "pq1-0011aabb");
  });

  it("refuses a wrong magic, unknown version and unknown suite", () => {
    const { bytes } = sample();
    const magic = Buffer.from(bytes);
    magic[0] = 0x42;
    assert.throws(() => parseEnvelope(magic), code("crypto_malformed"));
    const version = Buffer.from(bytes);
    version[4] = 2;
    assert.throws(() => parseEnvelope(version), code("crypto_unsupported"));
    const suite = Buffer.from(bytes);
    suite[6] = 9;
    assert.throws(() => parseEnvelope(suite), code("crypto_unsupported"));
  });

  it("refuses bad key ids, wrong KEM length and truncation", () => {
    const { bytes } = sample("key-1");
    const zeroId = Buffer.from(bytes);
    zeroId[7] = 0;
    assert.throws(() => parseEnvelope(zeroId), code("crypto_malformed"));
    const badChar = Buffer.from(bytes);
    badChar[9] = 0x20;
    assert.throws(() => parseEnvelope(badChar), code("crypto_malformed"));
    const kemLength = Buffer.from(bytes);
    kemLength.writeUInt16BE(1087, 13);
    assert.throws(() => parseEnvelope(kemLength), code("crypto_malformed"));
    for (const length of [0, 3, 7, 12, 20, 1114, 1130]) {
      assert.throws(
        () => parseEnvelope(bytes.subarray(0, length)),
        code("crypto_malformed"),
        `length ${length}`,
      );
    }
  });

  it("accepts only canonical standard base64", () => {
    const text = serializeEnvelope(sample().bytes);
    for (const bad of [
      `${text} `,
      ` ${text}`,
      text.replace(/\+/g, "-").replace(/\//g, "_"),
      text.replace(/=+$/, ""),
      `${text.slice(0, 100)}\n${text.slice(100)}`,
      "",
      "not base64!",
    ]) {
      if (bad === text) continue;
      assert.throws(() => deserializeEnvelope(bad), code("crypto_malformed"));
    }
  });

  it("refuses key ids that are not short printable ASCII", () => {
    for (const keyId of ["", " x", "a b", "é", "a".repeat(65), "-lead"]) {
      assert.throws(() => envelopeInfo(keyId), code("crypto_invalid_argument"), keyId);
    }
  });
});
