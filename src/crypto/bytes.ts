/** Byte helpers shared by the crypto modules: strict base64, UTF-8, concatenation. */

import { CryptoError } from "./errors.ts";

export function toBase64(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
}

/**
 * Standard base64 with padding, and only its canonical form: Node's decoder silently
 * skips foreign characters, accepts the URL-safe alphabet and missing padding, and ignores
 * non-zero trailing bits, which would let many strings name the same ciphertext. Encoding
 * the decoded bytes again must give the input back; that one check refuses all of those
 * (and is several times faster than a validating regular expression on large inputs).
 */
export function fromBase64(text: string, what: string): Buffer {
  if (typeof text !== "string") {
    throw new CryptoError("crypto_malformed", { detail: `${what} is not a string` });
  }
  const bytes = Buffer.from(text, "base64");
  if (bytes.toString("base64") !== text) {
    throw new CryptoError("crypto_malformed", { detail: `${what} is not canonical standard base64` });
  }
  return bytes;
}

/** Buffer.from is about twice as fast as TextEncoder on the mostly-ASCII JSON we carry. */
export function utf8(text: string): Uint8Array {
  return Buffer.from(text, "utf8");
}

/**
 * Accepts text (encoded as UTF-8) or bytes. Text with a lone surrogate is refused:
 * UTF-8 cannot carry it, so it would come back changed (as U+FFFD) after a round trip.
 */
export function toBytes(data: string | Uint8Array, what: string): Uint8Array {
  if (typeof data === "string") {
    if (!data.isWellFormed()) {
      throw new CryptoError("crypto_invalid_argument", { detail: `${what} is not well-formed Unicode` });
    }
    return utf8(data);
  }
  if (data instanceof Uint8Array) return data;
  throw new CryptoError("crypto_invalid_argument", { detail: `${what} must be a string or Uint8Array` });
}

export function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

export function concatBytes(parts: readonly Uint8Array[]): Buffer {
  return Buffer.concat(parts);
}

export function u16(value: number): Buffer {
  const out = Buffer.alloc(2);
  out.writeUInt16BE(value);
  return out;
}
