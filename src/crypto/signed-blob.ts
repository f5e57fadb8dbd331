/**
 * The signed blob that sign-encrypt seals, format version 2. Pure: bytes in, bytes out.
 *
 *   signed blob = 0x02 || u32 BE document length d || document (d bytes)
 *                 || ML-DSA-65 signature (3309 bytes) || payload (the rest)
 *   document    = canonical JSON {payload_length, payload_sha512, purpose, recipient_key_id,
 *                                 signed_at, signer, signer_key_id, typ}
 *
 * The signature covers only the small document, which binds the payload by its length and
 * SHA-512 digest: signing and verifying cost the same for any payload size, and the payload
 * travels as raw bytes rather than as base64 inside JSON. See docs/crypto.md §3.
 */

import { createHash, type Hash, timingSafeEqual } from "node:crypto";
import { isRecord } from "../core/own-property.ts";
import { asBuffer, utf8 } from "./bytes.ts";
import { CryptoError } from "./errors.ts";
import { SIGNATURE_BYTES } from "./signature.ts";

export const SIGNED_DOCUMENT_TYPE = "authority.signed-document.v2";
export const SIGNED_BLOB_VERSION = 0x02;
/** Version byte + u32 document length. */
export const SIGNED_BLOB_HEAD_BYTES = 5;
/**
 * Far above any document signEncrypt writes (its fields are bounded to well under 2 KB);
 * it keeps an unauthenticated blob from making the parser read a large JSON text before
 * the signature is checked.
 */
export const MAX_DOCUMENT_BYTES = 4096;
export const PAYLOAD_DIGEST_ALGORITHM = "sha512";

const DIGEST_HEX = /^[0-9a-f]{128}$/;

/** The signed inner document; field names are the wire names. */
export interface SignedDocument {
  readonly payload_length: number;
  /** Lowercase hex SHA-512 of the payload bytes. */
  readonly payload_sha512: string;
  readonly purpose: string;
  readonly recipient_key_id: string;
  readonly signed_at: string;
  readonly signer: string;
  readonly signer_key_id: string;
  readonly typ: typeof SIGNED_DOCUMENT_TYPE;
}

/** In code-point order, which is the order RFC 8785 (JCS) writes them. */
const DOCUMENT_FIELDS = [
  "payload_length",
  "payload_sha512",
  "purpose",
  "recipient_key_id",
  "signed_at",
  "signer",
  "signer_key_id",
  "typ",
] as const;

const STRING_FIELDS = DOCUMENT_FIELDS.filter((field) => field !== "payload_length");

export function payloadDigest(payload: Uint8Array): Buffer {
  return createHash(PAYLOAD_DIGEST_ALGORITHM).update(payload).digest();
}

/**
 * Bytes that many payloads start with (a policy's shared `apis` section) and the payload
 * digest's state after them, made here only: whoever holds one cannot pair the state with
 * other bytes. `bytes` is kept, not copied — hand it a private copy that nobody writes to.
 */
export class PayloadPrefix {
  readonly #bytes: Buffer;
  readonly #state: Hash;

  private constructor(bytes: Buffer) {
    this.#bytes = bytes;
    this.#state = createHash(PAYLOAD_DIGEST_ALGORITHM).update(bytes);
  }

  static of(bytes: Uint8Array): PayloadPrefix {
    return new PayloadPrefix(asBuffer(bytes));
  }

  /**
   * payloadDigest(payload) from the held state when the payload starts with exactly the held
   * bytes (compared byte for byte), hashing only the rest; otherwise hashed whole.
   */
  static digest(payload: Uint8Array, prefix: PayloadPrefix | undefined): Buffer {
    if (!(prefix instanceof PayloadPrefix)) return payloadDigest(payload);
    const bytes = prefix.#bytes;
    const view = asBuffer(payload);
    if (view.length < bytes.length || !view.subarray(0, bytes.length).equals(bytes))
      return payloadDigest(payload);
    return prefix.#state.copy().update(view.subarray(bytes.length)).digest();
  }
}

/**
 * Canonical form: keys in code-point order, no whitespace, string values and one
 * non-negative safe integer. For such objects JSON.stringify's output is exactly RFC 8785.
 */
export function canonicalDocument(document: SignedDocument): Uint8Array {
  const ordered: Record<string, string | number> = {};
  for (const field of DOCUMENT_FIELDS) ordered[field] = document[field];
  return utf8(JSON.stringify(ordered));
}

/**
 * Strict parse: exactly the known fields with their types, a well-formed digest, and the
 * bytes already canonical (so one document has one byte form, and "1e3" or "1.0" for a
 * length is refused).
 */
export function parseSignedDocument(bytes: Uint8Array): SignedDocument {
  const malformed = (detail: string) => new CryptoError("crypto_malformed", { detail });
  if (bytes.length > MAX_DOCUMENT_BYTES) throw malformed("signed document is too long");
  let value: unknown;
  try {
    value = JSON.parse(asBuffer(bytes).toString("utf8"));
  } catch {
    throw malformed("signed document is not JSON");
  }
  if (!isRecord(value)) throw malformed("signed document is not an object");
  const length = value.payload_length;
  if (
    Object.keys(value).length !== DOCUMENT_FIELDS.length ||
    !STRING_FIELDS.every((field) => typeof value[field] === "string") ||
    typeof length !== "number" ||
    !Number.isSafeInteger(length) ||
    length < 0
  ) {
    throw malformed("signed document fields");
  }
  const document = value as unknown as SignedDocument;
  if (document.typ !== SIGNED_DOCUMENT_TYPE) throw malformed("signed document type");
  if (!DIGEST_HEX.test(document.payload_sha512)) throw malformed("payload digest");
  if (!asBuffer(canonicalDocument(document)).equals(asBuffer(bytes))) {
    throw malformed("signed document is not canonical");
  }
  return document;
}

export function signedBlobHead(documentLength: number): Buffer {
  const head = Buffer.alloc(SIGNED_BLOB_HEAD_BYTES);
  head.writeUInt8(SIGNED_BLOB_VERSION, 0);
  head.writeUInt32BE(documentLength, 1);
  return head;
}

/**
 * The blob in one buffer. signEncrypt does not call this: it feeds the same four parts to
 * the cipher one after another, so the payload is never copied into a blob first.
 */
export function encodeSignedBlob(document: Uint8Array, signature: Uint8Array, payload: Uint8Array): Buffer {
  return Buffer.concat([signedBlobHead(document.length), document, signature, payload]);
}

export interface SignedBlobParts {
  readonly document: Buffer;
  readonly signature: Buffer;
  /** A view into the blob, not a copy. */
  readonly payload: Buffer;
}

export function decodeSignedBlob(blob: Uint8Array): SignedBlobParts {
  const buf = asBuffer(blob);
  if (buf.length < SIGNED_BLOB_HEAD_BYTES) {
    throw new CryptoError("crypto_malformed", { detail: "signed blob is truncated" });
  }
  // Version 1 (payload as base64 inside the document) was never deployed and is not read.
  if (buf.readUInt8(0) !== SIGNED_BLOB_VERSION) {
    throw new CryptoError("crypto_unsupported", { detail: "signed blob version" });
  }
  const documentLength = buf.readUInt32BE(1);
  if (documentLength > MAX_DOCUMENT_BYTES) {
    throw new CryptoError("crypto_malformed", { detail: "signed document is too long" });
  }
  const signatureStart = SIGNED_BLOB_HEAD_BYTES + documentLength;
  const payloadStart = signatureStart + SIGNATURE_BYTES;
  if (buf.length < payloadStart) {
    throw new CryptoError("crypto_malformed", { detail: "signed blob is truncated" });
  }
  return {
    document: buf.subarray(SIGNED_BLOB_HEAD_BYTES, signatureStart),
    signature: buf.subarray(signatureStart, payloadStart),
    payload: buf.subarray(payloadStart),
  };
}

/**
 * Checks the payload against the signed length and digest; call it only after the
 * document's signature has verified. A payload the signature does not cover is a bad
 * signature, whichever of the two differs.
 */
export function assertPayloadMatches(document: SignedDocument, payloadLength: number, digest: Buffer): void {
  if (payloadLength !== document.payload_length) {
    throw new CryptoError("crypto_bad_signature", { detail: "payload length" });
  }
  if (!timingSafeEqual(digest, Buffer.from(document.payload_sha512, "hex"))) {
    throw new CryptoError("crypto_bad_signature", { detail: "payload digest" });
  }
}
