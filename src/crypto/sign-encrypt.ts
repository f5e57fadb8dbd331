/**
 * Sign-then-encrypt with the recipient named inside the signature (defeats surreptitious
 * forwarding: a recipient cannot re-seal a sender's signed document to a third party
 * without the third party seeing it was signed for someone else).
 *
 *   signed blob = 0x02 || u32 BE length || document || ML-DSA-65 signature || payload
 *                 (signed-blob.ts; the document binds the payload by length and SHA-512)
 *   envelope    = seal(signed blob) to the recipient key named in the document
 *
 * The sync and async forms share every step but the ML-DSA call, which the async forms
 * run on the libuv thread pool (node:crypto's callback API) so a server can use its cores.
 * The steps are also exported one by one for the worker pool (worker-pool.ts), which runs
 * all of them but the argument and key checks on worker threads.
 */

import type { KeyObject } from "node:crypto";
import { toBytes } from "./bytes.ts";
import { assertKeyId, type ParsedEnvelope, serializeEnvelope } from "./envelope.ts";
import { CryptoError } from "./errors.ts";
import { createSealer, open, openAsync, openWithContentKey, type Sealer, toParsedEnvelope } from "./kem.ts";
import {
  assertOwner,
  KeyRing,
  PublicKeyRing,
  type Recipient,
  type RecipientKeyLookup,
  type Signer,
  type SignerKeyLookup,
} from "./key-ring.ts";
import { type SignOptions, sign, signAsync, type VerifyOptions, verify, verifyAsync } from "./signature.ts";
import {
  assertPayloadMatches,
  canonicalDocument,
  decodeSignedBlob,
  PayloadPrefix,
  parseSignedDocument,
  payloadDigest,
  SIGNED_DOCUMENT_TYPE,
  type SignedDocument,
  signedBlobHead,
} from "./signed-blob.ts";

export {
  canonicalDocument,
  decodeSignedBlob,
  encodeSignedBlob,
  PayloadPrefix,
  parseSignedDocument,
  SIGNED_BLOB_VERSION,
  SIGNED_DOCUMENT_TYPE,
  type SignedDocument,
} from "./signed-blob.ts";

/**
 * ML-DSA-65 context string of the inner signature, and the AEAD associated data of the
 * envelope. They name the protocol; its wire format is versioned by the blob version and
 * the document `typ`.
 */
export const SIGN_ENCRYPT_CONTEXT = "authority/sign-encrypt/v1";
export const SIGN_ENCRYPT_AAD = "authority/sign-encrypt/v1";

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

export interface SignEncryptOptions {
  readonly signer: Signer;
  readonly recipient: Recipient | KeyRing | PublicKeyRing;
  readonly purpose: string;
  /** Text is sealed as its UTF-8 bytes; bytes are sealed as given, without a copy. */
  readonly plaintext: string | Uint8Array;
  readonly now?: Date;
}

/** Everything of a sign-encrypt but the signature and the seal (checked, hashed, timestamped). */
export interface PreparedSignature {
  readonly recipient: Recipient;
  readonly document: Uint8Array;
  readonly payload: Uint8Array;
  readonly signOptions: SignOptions;
}

/** Checks the arguments and builds the signed document; throws the `CryptoError`s of `signEncrypt`. */
export function prepareSignature(options: SignEncryptOptions): PreparedSignature {
  const { signer, purpose } = options;
  assertOwner(signer.id);
  assertKeyId(signer.keyId);
  assertPurpose(purpose);
  const recipient =
    options.recipient instanceof KeyRing || options.recipient instanceof PublicKeyRing
      ? options.recipient.recipient()
      : options.recipient;
  assertKeyId(recipient.keyId);
  const payload = toBytes(options.plaintext, "plaintext");
  const document = canonicalDocument({
    payload_length: payload.length,
    payload_sha512: payloadDigest(payload).toString("hex"),
    purpose,
    recipient_key_id: recipient.keyId,
    signed_at: formatSignedAt(options.now ?? new Date()),
    signer: signer.id,
    signer_key_id: signer.keyId,
    typ: SIGNED_DOCUMENT_TYPE,
  });
  return {
    recipient,
    document,
    payload,
    signOptions: { privateKey: signer.privateKey, message: document, context: SIGN_ENCRYPT_CONTEXT },
  };
}

/** Encapsulates and encrypts the blob's head and document; the signature and payload follow. */
function startSeal(prepared: PreparedSignature): Sealer {
  const sealer = createSealer({
    recipientPublicKey: prepared.recipient.publicKey,
    recipientKeyId: prepared.recipient.keyId,
    aad: SIGN_ENCRYPT_AAD,
  });
  sealer.update(signedBlobHead(prepared.document.length));
  sealer.update(prepared.document);
  return sealer;
}

function finishSeal(sealer: Sealer, signature: Uint8Array, payload: Uint8Array): string {
  sealer.update(signature);
  sealer.update(payload);
  return serializeEnvelope(sealer.finish());
}

/** Signs and seals a prepared document (the synchronous second half of `signEncrypt`). */
export function signPrepared(prepared: PreparedSignature): string {
  const signature = sign(prepared.signOptions);
  return finishSeal(startSeal(prepared), signature, prepared.payload);
}

/** Signs a document naming signer, recipient, purpose and time, then seals it; returns base64. */
export function signEncrypt(options: SignEncryptOptions): string {
  return signPrepared(prepareSignature(options));
}

/**
 * `signEncrypt` with the ML-DSA signing on the libuv thread pool; the encapsulation and the
 * encryption of the head run meanwhile. Resolves to the same kind of envelope and rejects
 * with the same `CryptoError` codes. A Uint8Array plaintext is read in place after the
 * signature is made: do not change it before the promise settles.
 */
export async function signEncryptAsync(options: SignEncryptOptions): Promise<string> {
  const prepared = prepareSignature(options);
  const signing = signAsync(prepared.signOptions);
  let sealer: Sealer;
  try {
    sealer = startSeal(prepared);
  } catch (error) {
    // The signing job may fail too; its rejection must not go unhandled.
    signing.catch(() => undefined);
    throw error;
  }
  return finishSeal(sealer, await signing, prepared.payload);
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
  /** A view into the decrypted blob (no copy). */
  readonly plaintext: Uint8Array;
  readonly signer: string;
  readonly signerKeyId: string;
  /** ISO 8601 with offset, as signed. */
  readonly signedAt: string;
  readonly recipientKeyId: string;
  readonly purpose: string;
  /**
   * The signed document and its ML-DSA signature (views into the decrypted blob): with the
   * plaintext they re-form the signed blob (`encodeSignedBlob`), which anyone holding the
   * signer's public key can verify without the recipient's key (`verifySignedBlob`).
   */
  readonly signedDocument: Uint8Array;
  readonly signature: Uint8Array;
  /**
   * The whole signed blob, which `plaintext`, `signedDocument` and `signature` are views into:
   * what `encodeSignedBlob` of them would build, without the copy. Wiping it wipes the plaintext.
   */
  readonly signedBlob: Uint8Array;
}

/** The envelope parsed and its recipient key found: the first checks of `decryptVerify`. */
export interface AddressedEnvelope {
  readonly parsed: ParsedEnvelope;
  readonly privateKey: KeyObject;
}

/** Envelope form, expected recipient, recipient key known, in that order. */
export function addressedEnvelope(
  envelope: string | Uint8Array | ParsedEnvelope,
  options: Pick<DecryptVerifyOptions, "recipientKeys" | "expectedRecipientKeyId">,
): AddressedEnvelope {
  const parsed = toParsedEnvelope(envelope);
  if (options.expectedRecipientKeyId !== undefined && parsed.keyId !== options.expectedRecipientKeyId) {
    throw new CryptoError("crypto_wrong_recipient");
  }
  const lookup =
    options.recipientKeys instanceof KeyRing ? options.recipientKeys.recipientKeys : options.recipientKeys;
  const privateKey: KeyObject | undefined = lookup(parsed.keyId);
  if (privateKey === undefined) throw new CryptoError("crypto_unknown_key");
  return { parsed, privateKey };
}

/** Decrypted and parsed, signature not yet checked: nothing here is trusted but the key id. */
export interface DecryptedSigned {
  readonly envelopeKeyId: string;
  /** The whole decrypted blob, wiped if any later check fails. */
  readonly blob: Uint8Array;
  readonly document: SignedDocument;
  readonly documentBytes: Uint8Array;
  readonly signature: Uint8Array;
  readonly payload: Uint8Array;
}

/** Blob and document form of a decrypted blob; the blob is wiped if the form is wrong. */
function decrypted(envelopeKeyId: string, blob: Uint8Array): DecryptedSigned {
  try {
    const { document: documentBytes, signature, payload } = decodeSignedBlob(blob);
    const document = parseSignedDocument(documentBytes);
    return { envelopeKeyId, blob, document, documentBytes, signature, payload };
  } catch (error) {
    blob.fill(0);
    throw error;
  }
}

/** Decryption, blob and document form; the blob is wiped if the form is wrong. */
export function decryptSigned(addressed: AddressedEnvelope): DecryptedSigned {
  const { parsed, privateKey } = addressed;
  return decrypted(
    parsed.keyId,
    open({ recipientPrivateKey: privateKey, envelope: parsed, aad: SIGN_ENCRYPT_AAD }),
  );
}

/**
 * `decryptSigned` with the envelope's content key, unwrapped by the holder of the recipient's
 * private key, in place of that key. Nothing is trusted yet: the signature comes next.
 */
export function decryptSignedWithContentKey(
  envelope: ParsedEnvelope,
  contentKey: Uint8Array,
): DecryptedSigned {
  return decrypted(envelope.keyId, openWithContentKey(envelope, contentKey, SIGN_ENCRYPT_AAD));
}

/** Ready to verify: the signer's key was found for the (still untrusted) signer name. */
export interface OpenedSigned extends DecryptedSigned {
  readonly verifyOptions: VerifyOptions;
}

/**
 * Pairs a decrypted blob with its signer's verification key (`undefined`: not trusted,
 * `crypto_unknown_signer`). The blob is wiped on failure.
 */
export function withSignerKey(decrypted: DecryptedSigned, signerKey: KeyObject | undefined): OpenedSigned {
  if (signerKey === undefined) {
    decrypted.blob.fill(0);
    throw new CryptoError("crypto_unknown_signer");
  }
  return {
    ...decrypted,
    verifyOptions: {
      publicKey: signerKey,
      message: decrypted.documentBytes,
      signature: decrypted.signature,
      context: SIGN_ENCRYPT_CONTEXT,
    },
  };
}

function openSigned(
  envelope: string | Uint8Array | ParsedEnvelope,
  options: DecryptVerifyOptions,
): OpenedSigned {
  return withLookedUpSigner(decryptSigned(addressedEnvelope(envelope, options)), options);
}

/** `openSigned` with the decapsulation on the libuv thread pool. */
async function openSignedAsync(
  envelope: string | Uint8Array | ParsedEnvelope,
  options: DecryptVerifyOptions,
): Promise<OpenedSigned> {
  const { parsed, privateKey } = addressedEnvelope(envelope, options);
  const blob = await openAsync({ recipientPrivateKey: privateKey, envelope: parsed, aad: SIGN_ENCRYPT_AAD });
  return withLookedUpSigner(decrypted(parsed.keyId, blob), options);
}

/** The signer's key, looked up by the (unverified) name and key id of the document. */
function withLookedUpSigner(decrypted: DecryptedSigned, options: DecryptVerifyOptions): OpenedSigned {
  let signerKey: KeyObject | undefined;
  try {
    // The signer name and key id are used only to find the key that must verify them.
    signerKey = options.signerKeys(decrypted.document.signer, decrypted.document.signer_key_id);
  } catch (error) {
    decrypted.blob.fill(0);
    throw error;
  }
  return withSignerKey(decrypted, signerKey);
}

/**
 * Verifies synchronously and runs the checks after the signature (the second half of
 * `decryptVerify`, for a caller that looked the signer's key up itself).
 */
export function verifyOpened(
  opened: OpenedSigned,
  options: Pick<DecryptVerifyOptions, "expectedPurpose">,
): VerifiedMessage {
  let valid: boolean;
  try {
    valid = verify(opened.verifyOptions);
  } catch (error) {
    opened.blob.fill(0);
    throw error;
  }
  return completeVerified(opened, valid, () => payloadDigest(opened.payload), options);
}

/** The checks after the signature, in order; the plaintext is released only if all pass. */
function completeVerified(
  opened: OpenedSigned,
  signatureValid: boolean,
  digest: () => Buffer,
  options: Pick<DecryptVerifyOptions, "expectedPurpose">,
): VerifiedMessage {
  const { document } = opened;
  try {
    if (!signatureValid) throw new CryptoError("crypto_bad_signature");
    assertPayloadMatches(document, opened.payload.length, digest());
    if (document.recipient_key_id !== opened.envelopeKeyId) throw new CryptoError("crypto_wrong_recipient");
    if (options.expectedPurpose !== undefined && document.purpose !== options.expectedPurpose) {
      throw new CryptoError("crypto_wrong_purpose");
    }
    if (!TIMESTAMP.test(document.signed_at) || Number.isNaN(Date.parse(document.signed_at))) {
      throw new CryptoError("crypto_malformed", { detail: "signed_at" });
    }
  } catch (error) {
    opened.blob.fill(0);
    throw error;
  }
  return {
    plaintext: opened.payload,
    signer: document.signer,
    signerKeyId: document.signer_key_id,
    signedAt: document.signed_at,
    recipientKeyId: document.recipient_key_id,
    purpose: document.purpose,
    signedDocument: opened.documentBytes,
    signature: opened.signature,
    signedBlob: opened.blob,
  };
}

/**
 * Opens and verifies. Checks, in order: envelope form, expected recipient, recipient key
 * known, decryption, blob and document form, signer known, signature over the document,
 * payload length and digest, inner recipient equals outer recipient, purpose, time.
 * Nothing from the document is trusted before the signature.
 */
export function decryptVerify(
  envelope: string | Uint8Array | ParsedEnvelope,
  options: DecryptVerifyOptions,
): VerifiedMessage {
  return verifyOpened(openSigned(envelope, options), options);
}

/**
 * `decryptVerify` with the ML-KEM decapsulation and the ML-DSA verification on the libuv
 * thread pool; the payload is hashed meanwhile (its digest is compared only after the
 * signature has verified). Same result and same `CryptoError` codes as `decryptVerify`.
 */
export async function decryptVerifyAsync(
  envelope: string | Uint8Array | ParsedEnvelope,
  options: DecryptVerifyOptions,
): Promise<VerifiedMessage> {
  return verifyOpenedAsync(await openSignedAsync(envelope, options), options);
}

/** `verifyOpened` with the ML-DSA verification on the libuv thread pool. */
export async function verifyOpenedAsync(
  opened: OpenedSigned,
  options: Pick<DecryptVerifyOptions, "expectedPurpose">,
): Promise<VerifiedMessage> {
  const verification = verifyAsync(opened.verifyOptions);
  const digest = payloadDigest(opened.payload);
  let valid: boolean;
  try {
    valid = await verification;
  } catch (error) {
    opened.blob.fill(0);
    throw error;
  }
  return completeVerified(opened, valid, () => digest, options);
}

/** A signer's verification key that may have to be fetched (public keys only). */
export type AsyncSignerKeyLookup = (signerId: string, keyId: string) => Promise<KeyObject | undefined>;

/**
 * `decryptVerifyAsync` for a caller that holds the envelope's content key — unwrapped for it
 * by the holder of the recipient's private key — and the signers' public keys. The checks
 * after decryption are the same, in the same order, with the same `CryptoError` codes.
 */
export async function decryptVerifyWithContentKey(
  envelope: ParsedEnvelope,
  contentKey: Uint8Array,
  options: { readonly signerKeys: AsyncSignerKeyLookup; readonly expectedPurpose?: string },
): Promise<VerifiedMessage> {
  const opened = decryptSignedWithContentKey(envelope, contentKey);
  let signerKey: KeyObject | undefined;
  try {
    // The signer name and key id are used only to find the key that must verify them.
    signerKey = await options.signerKeys(opened.document.signer, opened.document.signer_key_id);
  } catch (error) {
    opened.blob.fill(0);
    throw error;
  }
  return verifyOpenedAsync(withSignerKey(opened, signerKey), options);
}

export interface VerifySignedBlobOptions {
  /** ML-DSA public key of a signer's key version, or undefined when not trusted. */
  readonly signerKeys: SignerKeyLookup;
  readonly expectedPurpose: string;
  /**
   * Bytes the payload may start with, and the digest's state after them (a policy's held
   * `apis` section): only the rest of the payload is hashed when it starts with exactly
   * those bytes. Only a candidate: the bytes are compared here, and the state is one
   * PayloadPrefix made over them, so no answer can change what the digest is.
   */
  readonly heldPrefix?: (payload: Uint8Array) => PayloadPrefix | undefined;
}

/** A signed blob whose signature verified: the signed facts and the payload (a view into the blob). */
export interface VerifiedSignedBlob {
  readonly payload: Uint8Array;
  readonly signer: string;
  readonly signerKeyId: string;
  readonly signedAt: string;
  readonly purpose: string;
}

/**
 * Verifies a signed blob as it is inside a sign-encrypt envelope (0x02 || length || document
 * || signature || payload), with the signer's public key only: no recipient key is needed,
 * so a holder of public keys can check what a key holder decrypted for it. Checks, in order:
 * blob and document form, signer known, signature (same context string as sign-encrypt),
 * payload length and digest, purpose, time. The recipient named in the document is not
 * checked: the blob is no longer sealed to anyone.
 */
export async function verifySignedBlob(
  blob: Uint8Array,
  options: VerifySignedBlobOptions,
): Promise<VerifiedSignedBlob> {
  const { document: documentBytes, signature, payload } = decodeSignedBlob(blob);
  const document = parseSignedDocument(documentBytes);
  const publicKey = options.signerKeys(document.signer, document.signer_key_id);
  if (publicKey === undefined) throw new CryptoError("crypto_unknown_signer");
  const valid = await verifyAsync({
    publicKey,
    message: documentBytes,
    signature,
    context: SIGN_ENCRYPT_CONTEXT,
  });
  if (!valid) throw new CryptoError("crypto_bad_signature");
  assertPayloadMatches(
    document,
    payload.length,
    PayloadPrefix.digest(payload, options.heldPrefix?.(payload)),
  );
  if (document.purpose !== options.expectedPurpose) throw new CryptoError("crypto_wrong_purpose");
  if (!TIMESTAMP.test(document.signed_at) || Number.isNaN(Date.parse(document.signed_at))) {
    throw new CryptoError("crypto_malformed", { detail: "signed_at" });
  }
  return {
    payload,
    signer: document.signer,
    signerKeyId: document.signer_key_id,
    signedAt: document.signed_at,
    purpose: document.purpose,
  };
}
