/**
 * The versioned binary ciphertext format and its strict parser. Pure: bytes in, bytes out.
 *
 *   magic "APQE" (4) | version (1) | suite (2, BE) | key id length (1) | key id (ASCII)
 *   | KEM ciphertext length (2, BE) | KEM ciphertext | nonce (12) | AEAD ciphertext || tag (16)
 *
 * Everything before the nonce's end is the header, authenticated as AEAD associated data;
 * the part before the KEM ciphertext length is the HPKE `info`. See docs/crypto.md.
 */

import { concatBytes, fromBase64, toBase64, u16 } from "./bytes.ts";
import { CryptoError } from "./errors.ts";

export const ENVELOPE_MAGIC = Buffer.from("APQE", "latin1");
export const ENVELOPE_VERSION = 1;

export interface Suite {
  readonly id: number;
  readonly name: string;
  readonly kemCiphertextBytes: number;
  readonly nonceBytes: number;
  readonly tagBytes: number;
  readonly keyBytes: number;
}

/** ML-KEM-768 + HKDF-SHA256 + AES-256-GCM: the only suite of format version 1. */
export const SUITE_MLKEM768_AES256GCM: Suite = Object.freeze({
  id: 0x0001,
  name: "ML-KEM-768/HKDF-SHA256/AES-256-GCM",
  kemCiphertextBytes: 1088,
  nonceBytes: 12,
  tagBytes: 16,
  keyBytes: 32,
});

const suites: ReadonlyMap<number, Suite> = new Map([[SUITE_MLKEM768_AES256GCM.id, SUITE_MLKEM768_AES256GCM]]);

const KEY_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/;

/** Key ids travel in clear in every ciphertext: short, printable ASCII, never secret. */
export function assertKeyId(keyId: unknown): asserts keyId is string {
  if (typeof keyId !== "string" || !KEY_ID.test(keyId)) {
    throw new CryptoError("crypto_invalid_argument", {
      detail: "key id must be 1-64 characters of [A-Za-z0-9._:-], starting alphanumeric",
    });
  }
}

export interface EnvelopeHeaderParts {
  readonly keyId: string;
  readonly kemCiphertext: Uint8Array;
  readonly nonce: Uint8Array;
}

/** The header alone (magic .. nonce): what a key holder needs to unwrap the content key. */
export interface ParsedEnvelopeHeader extends EnvelopeHeaderParts {
  readonly version: number;
  readonly suite: Suite;
  /** magic .. key id: the HPKE `info` the key schedule binds. */
  readonly info: Buffer;
  /** magic .. nonce: the AEAD associated data. */
  readonly header: Buffer;
}

export interface ParsedEnvelope extends ParsedEnvelopeHeader {
  /** AEAD ciphertext followed by the tag. */
  readonly body: Buffer;
}

/** The header prefix that is fixed before encapsulation (bound into the key schedule). */
export function envelopeInfo(keyId: string, suite: Suite = SUITE_MLKEM768_AES256GCM): Buffer {
  assertKeyId(keyId);
  const id = Buffer.from(keyId, "latin1");
  return concatBytes([ENVELOPE_MAGIC, Buffer.of(ENVELOPE_VERSION), u16(suite.id), Buffer.of(id.length), id]);
}

export function encodeHeader(parts: EnvelopeHeaderParts, suite: Suite = SUITE_MLKEM768_AES256GCM): Buffer {
  if (parts.kemCiphertext.length !== suite.kemCiphertextBytes || parts.nonce.length !== suite.nonceBytes) {
    throw new CryptoError("crypto_invalid_argument", {
      detail: "KEM ciphertext or nonce has the wrong length",
    });
  }
  return concatBytes([
    envelopeInfo(parts.keyId, suite),
    u16(parts.kemCiphertext.length),
    parts.kemCiphertext,
    parts.nonce,
  ]);
}

function malformed(detail: string): CryptoError {
  return new CryptoError("crypto_malformed", { detail });
}

/** Parses the header at the start of `buf`; `bodyBytes` is the least that must follow it. */
function parseHeaderOf(buf: Buffer, bodyBytes: (suite: Suite) => number): ParsedEnvelopeHeader {
  if (buf.length < 8 || !buf.subarray(0, 4).equals(ENVELOPE_MAGIC)) throw malformed("bad magic");
  const version = buf.readUInt8(4);
  if (version !== ENVELOPE_VERSION) throw new CryptoError("crypto_unsupported", { detail: "format version" });
  const suite = suites.get(buf.readUInt16BE(5));
  if (suite === undefined) throw new CryptoError("crypto_unsupported", { detail: "algorithm suite" });
  const keyIdLength = buf.readUInt8(7);
  let offset = 8;
  if (buf.length < offset + keyIdLength + 2) throw malformed("truncated key id");
  const keyId = buf.toString("latin1", offset, offset + keyIdLength);
  if (!KEY_ID.test(keyId)) throw malformed("bad key id");
  offset += keyIdLength;
  const info = buf.subarray(0, offset);
  const kemLength = buf.readUInt16BE(offset);
  offset += 2;
  if (kemLength !== suite.kemCiphertextBytes) throw malformed("bad KEM ciphertext length");
  if (buf.length < offset + kemLength + suite.nonceBytes + bodyBytes(suite)) throw malformed("truncated");
  const kemCiphertext = buf.subarray(offset, offset + kemLength);
  offset += kemLength;
  const nonce = buf.subarray(offset, offset + suite.nonceBytes);
  offset += suite.nonceBytes;
  return { version, suite, keyId, kemCiphertext, nonce, info, header: buf.subarray(0, offset) };
}

function asBufferView(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

export function parseEnvelope(bytes: Uint8Array): ParsedEnvelope {
  const buf = asBufferView(bytes);
  const header = parseHeaderOf(buf, (suite) => suite.tagBytes);
  return { ...header, body: buf.subarray(header.header.length) };
}

/** Parses exactly a header: nothing may follow the nonce. */
export function parseEnvelopeHeader(bytes: Uint8Array): ParsedEnvelopeHeader {
  const parsed = parseHeaderOf(asBufferView(bytes), () => 0);
  if (parsed.header.length !== bytes.byteLength) throw malformed("bytes after the header");
  return parsed;
}

/** Standard base64 of the envelope bytes: the "base64 ciphertext" of the managed API. */
export function serializeEnvelope(bytes: Uint8Array): string {
  return toBase64(bytes);
}

export function deserializeEnvelope(text: string): ParsedEnvelope {
  return parseEnvelope(fromBase64(text, "envelope"));
}

/** A header as standard base64 (what a content-key unwrap is asked with). */
export function deserializeEnvelopeHeader(text: string): ParsedEnvelopeHeader {
  return parseEnvelopeHeader(fromBase64(text, "envelope header"));
}

/** The key id a base64 envelope is addressed to, for routing before any key is touched. */
export function envelopeKeyId(text: string): string {
  return deserializeEnvelope(text).keyId;
}
