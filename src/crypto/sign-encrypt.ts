/**
 * Sign-then-encrypt with the recipient named inside the signature (defeats surreptitious
 * forwarding: a recipient cannot re-seal a sender's signed document to a third party
 * without the third party seeing it was signed for someone else).
 *
 *   inner document = canonical JSON {payload, purpose, recipient_key_id, signed_at,
 *                                    signer, signer_key_id, typ}
 *   signed blob    = 0x01 || u32 BE length || document || ML-DSA-65 signature (3309 bytes)
 *   envelope       = seal(signed blob) to the recipient key named in the document
 */

import type { KeyObject } from "node:crypto";
import { fromBase64, toBase64, toBytes, utf8 } from "./bytes.ts";
import { assertKeyId, type ParsedEnvelope } from "./envelope.ts";
import { CryptoError } from "./errors.ts";
import { open, seal, toParsedEnvelope } from "./kem.ts";
import {
  assertOwner,
  KeyRing,
  PublicKeyRing,
  type Recipient,
  type RecipientKeyLookup,
  type Signer,
  type SignerKeyLookup,
} from "./key-ring.ts";
import { SIGNATURE_BYTES, sign, verify } from "./signature.ts";

/** ML-DSA-65 context string of the inner signature, and the AEAD associated data of the envelope. */
export const SIGN_ENCRYPT_CONTEXT = "authority/sign-encrypt/v1";
export const SIGN_ENCRYPT_AAD = "authority/sign-encrypt/v1";
export const SIGNED_DOCUMENT_TYPE = "authority.signed-document.v1";
const BLOB_VERSION = 0x01;

const PURPOSE = /^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/;
const TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})$/;

export function assertPurpose(purpose: unknown): asserts purpose is string {
  if (typeof purpose !== "string" || !PURPOSE.test(purpose)) {
    throw new CryptoError("crypto_invalid_argument", {
      detail: "purpose must be 1-128 characters of [A-Za-z0-9._:/-], starting alphanumeric",
    });
  }
}

/** ISO 8601 in UTC with an explicit numeric offset, as the managed API's `signed_timestamp`. */
export function formatSignedAt(date: Date): string {
  if (!(date instanceof Date) || Number.isNaN(date.getTime())) {
    throw new CryptoError("crypto_invalid_argument", { detail: "now must be a valid Date" });
  }
  return date.toISOString().replace(/Z$/, "+00:00");
}

/** The signed inner document; field names are the wire names. */
export interface SignedDocument {
  readonly payload: string;
  readonly purpose: string;
  readonly recipient_key_id: string;
  readonly signed_at: string;
  readonly signer: string;
  readonly signer_key_id: string;
  readonly typ: typeof SIGNED_DOCUMENT_TYPE;
}

const DOCUMENT_FIELDS = [
  "payload",
  "purpose",
  "recipient_key_id",
  "signed_at",
  "signer",
  "signer_key_id",
  "typ",
] as const;

/**
 * Canonical form: keys in code-point order, no whitespace, every value a string. For such
 * objects JSON.stringify's output is exactly RFC 8785 (JCS).
 */
export function canonicalDocument(document: SignedDocument): Uint8Array {
  const ordered: Record<string, string> = {};
  for (const field of DOCUMENT_FIELDS) ordered[field] = document[field];
  return utf8(JSON.stringify(ordered));
}

export function encodeSignedBlob(document: Uint8Array, signature: Uint8Array): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt8(BLOB_VERSION, 0);
  head.writeUInt32BE(document.length, 1);
  return Buffer.concat([head, document, signature]);
}

export function decodeSignedBlob(blob: Uint8Array): { document: Buffer; signature: Buffer } {
  const buf = Buffer.from(blob.buffer, blob.byteOffset, blob.byteLength);
  if (buf.length < 5 || buf.readUInt8(0) !== BLOB_VERSION) {
    throw new CryptoError("crypto_malformed", { detail: "signed blob version" });
  }
  const length = buf.readUInt32BE(1);
  if (buf.length !== 5 + length + SIGNATURE_BYTES) {
    throw new CryptoError("crypto_malformed", { detail: "signed blob length" });
  }
  return { document: buf.subarray(5, 5 + length), signature: buf.subarray(5 + length) };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Strict parse: exactly the known fields, all strings, and the bytes already canonical. */
export function parseSignedDocument(bytes: Uint8Array): SignedDocument {
  const malformed = (detail: string) => new CryptoError("crypto_malformed", { detail });
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("utf8"));
  } catch {
    throw malformed("signed document is not JSON");
  }
  if (!isRecord(value)) throw malformed("signed document is not an object");
  const keys = Object.keys(value);
  if (
    keys.length !== DOCUMENT_FIELDS.length ||
    !DOCUMENT_FIELDS.every((field) => typeof value[field] === "string")
  ) {
    throw malformed("signed document fields");
  }
  const document = value as unknown as SignedDocument;
  if (document.typ !== SIGNED_DOCUMENT_TYPE) throw malformed("signed document type");
  if (!Buffer.from(canonicalDocument(document)).equals(Buffer.from(bytes))) {
    throw malformed("signed document is not canonical");
  }
  return document;
}

export interface SignEncryptOptions {
  readonly signer: Signer;
  readonly recipient: Recipient | KeyRing | PublicKeyRing;
  readonly purpose: string;
  readonly plaintext: string | Uint8Array;
  readonly now?: Date;
}

/** Signs a document naming signer, recipient, purpose and time, then seals it; returns base64. */
export function signEncrypt(options: SignEncryptOptions): string {
  const { signer, purpose } = options;
  assertOwner(signer.id);
  assertKeyId(signer.keyId);
  assertPurpose(purpose);
  const recipient =
    options.recipient instanceof KeyRing || options.recipient instanceof PublicKeyRing
      ? options.recipient.recipient()
      : options.recipient;
  assertKeyId(recipient.keyId);
  const document = canonicalDocument({
    payload: toBase64(toBytes(options.plaintext, "plaintext")),
    purpose,
    recipient_key_id: recipient.keyId,
    signed_at: formatSignedAt(options.now ?? new Date()),
    signer: signer.id,
    signer_key_id: signer.keyId,
    typ: SIGNED_DOCUMENT_TYPE,
  });
  const signature = sign({ privateKey: signer.privateKey, message: document, context: SIGN_ENCRYPT_CONTEXT });
  return seal({
    recipientPublicKey: recipient.publicKey,
    recipientKeyId: recipient.keyId,
    plaintext: encodeSignedBlob(document, signature),
    aad: SIGN_ENCRYPT_AAD,
  });
}

export interface DecryptVerifyOptions {
  /** KEM private key by key id (a KeyRing's `recipientKeys`, or the ring itself). */
  readonly recipientKeys: RecipientKeyLookup | KeyRing;
  /** ML-DSA public key of a signer's key version, or undefined when not trusted. */
  readonly signerKeys: SignerKeyLookup;
  readonly expectedPurpose?: string;
  readonly expectedRecipientKeyId?: string;
}

export interface VerifiedMessage {
  readonly plaintext: Uint8Array;
  readonly signer: string;
  readonly signerKeyId: string;
  /** ISO 8601 with offset, as signed. */
  readonly signedAt: string;
  readonly recipientKeyId: string;
  readonly purpose: string;
}

/**
 * Opens and verifies. Checks, in order: envelope form, expected recipient, recipient key
 * known, decryption, signed-document form, signer known, signature, inner recipient equals
 * outer recipient, purpose. Nothing from the document is trusted before the signature.
 */
export function decryptVerify(
  envelope: string | Uint8Array | ParsedEnvelope,
  options: DecryptVerifyOptions,
): VerifiedMessage {
  const parsed = toParsedEnvelope(envelope);
  if (options.expectedRecipientKeyId !== undefined && parsed.keyId !== options.expectedRecipientKeyId) {
    throw new CryptoError("crypto_wrong_recipient");
  }
  const lookup =
    options.recipientKeys instanceof KeyRing ? options.recipientKeys.recipientKeys : options.recipientKeys;
  const privateKey: KeyObject | undefined = lookup(parsed.keyId);
  if (privateKey === undefined) throw new CryptoError("crypto_unknown_key");
  const blob = open({ recipientPrivateKey: privateKey, envelope: parsed, aad: SIGN_ENCRYPT_AAD });
  const { document: documentBytes, signature } = decodeSignedBlob(blob);
  const document = parseSignedDocument(documentBytes);
  const signerKey = options.signerKeys(document.signer, document.signer_key_id);
  if (signerKey === undefined) throw new CryptoError("crypto_unknown_signer");
  if (!verify({ publicKey: signerKey, message: documentBytes, signature, context: SIGN_ENCRYPT_CONTEXT })) {
    throw new CryptoError("crypto_bad_signature");
  }
  if (document.recipient_key_id !== parsed.keyId) throw new CryptoError("crypto_wrong_recipient");
  if (options.expectedPurpose !== undefined && document.purpose !== options.expectedPurpose) {
    throw new CryptoError("crypto_wrong_purpose");
  }
  if (!TIMESTAMP.test(document.signed_at) || Number.isNaN(Date.parse(document.signed_at))) {
    throw new CryptoError("crypto_malformed", { detail: "signed_at" });
  }
  return {
    plaintext: fromBase64(document.payload, "payload"),
    signer: document.signer,
    signerKeyId: document.signer_key_id,
    signedAt: document.signed_at,
    recipientKeyId: document.recipient_key_id,
    purpose: document.purpose,
  };
}
