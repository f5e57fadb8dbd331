/**
 * The four actions on already-loaded key material. No I/O and no clock (the signing time
 * is passed in); ML-DSA signing and verification run on the libuv thread pool (the async
 * forms of src/crypto) so one process uses every core. Crypto-layer failures become the
 * service's public reasons here, so no CryptoError message or detail reaches a caller.
 */

import { CryptoServiceError } from "../../clients/crypto-service/reasons.ts";
import {
  type DecryptPayload,
  type DecryptVerifyPayload,
  type EncryptPayload,
  encodeBinaryBody,
  type SignEncryptPayload,
  type UnwrapPayload,
} from "../../clients/crypto-service/wire.ts";
import {
  CryptoError,
  decrypt,
  decryptVerifyAsync,
  deserializeEnvelopeHeader,
  encrypt,
  type KeyRing,
  type Recipient,
  type SignEncryptOptions,
  type SignerKeyLookup,
  signEncryptAsync,
  unwrapContentKey,
  type VerifiedMessage,
} from "../../crypto/index.ts";
import type { PoolDecryptVerifyOptions } from "../../crypto/worker-pool.ts";

const textDecoder = new TextDecoder("utf-8", { fatal: true });

/**
 * Where the two signature actions run: `signEncryptAsync` / `decryptVerifyAsync` (ML-DSA on
 * the libuv thread pool), or a crypto worker pool (the whole operation off the event loop).
 */
export interface SignatureEngine {
  signEncrypt(options: SignEncryptOptions): Promise<string>;
  /** `likelySigner` is a hint a worker pool uses (PoolDecryptVerifyOptions); others ignore it. */
  decryptVerify(envelope: string | Uint8Array, options: PoolDecryptVerifyOptions): Promise<VerifiedMessage>;
}

export const threadPoolEngine: SignatureEngine = {
  signEncrypt: signEncryptAsync,
  decryptVerify: decryptVerifyAsync,
};

/** Maps a crypto-layer failure to what the caller may learn; anything else is rethrown. */
export function publicCryptoFailure(error: unknown): unknown {
  if (!(error instanceof CryptoError)) return error;
  switch (error.code) {
    case "crypto_malformed":
    case "crypto_unsupported":
    case "crypto_decrypt_failed":
    case "crypto_unknown_key":
    case "crypto_wrong_recipient":
      // One answer for all of them: which check failed must not become an oracle.
      return new CryptoServiceError("invalid_ciphertext", { cause: error });
    case "crypto_bad_signature":
    case "crypto_unknown_signer":
      return new CryptoServiceError("invalid_signature", { cause: error });
    case "crypto_wrong_purpose":
      return new CryptoServiceError("wrong_purpose", { cause: error });
    case "crypto_invalid_argument":
      return new CryptoServiceError("invalid_request", {
        message: "A field is invalid (text must be well-formed Unicode; purpose 1-128 of [A-Za-z0-9._:/-]).",
        cause: error,
      });
    default:
      return error;
  }
}

function guarded<T>(run: () => T): T {
  try {
    return run();
  } catch (error) {
    throw publicCryptoFailure(error);
  }
}

async function guardedAsync<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    throw publicCryptoFailure(error);
  }
}

function readText(bytes: Uint8Array): string {
  try {
    return textDecoder.decode(bytes);
  } catch (cause) {
    throw new CryptoServiceError("not_text", { cause });
  }
}

function toText(bytes: Uint8Array): string {
  try {
    return readText(bytes);
  } finally {
    bytes.fill(0);
  }
}

export function encryptAction(ring: KeyRing, data: string): EncryptPayload {
  return guarded(() => ({ encrypted_data: encrypt(ring, data), key_id: ring.current.keyId }));
}

export function decryptAction(ring: KeyRing, encryptedData: string): DecryptPayload {
  return { decrypted_data: toText(guarded(() => decrypt(ring, encryptedData))) };
}

export interface SignEncryptInput {
  readonly signer: KeyRing;
  readonly recipient: Recipient;
  readonly data: string;
  readonly purpose: string;
  readonly now: Date;
}

export async function signEncryptAction(
  input: SignEncryptInput,
  engine: SignatureEngine = threadPoolEngine,
): Promise<SignEncryptPayload> {
  const signer = input.signer.signer();
  const encrypted = await guardedAsync(() =>
    engine.signEncrypt({
      signer,
      recipient: input.recipient,
      purpose: input.purpose,
      plaintext: input.data,
      now: input.now,
    }),
  );
  return {
    encrypted_data: encrypted,
    key_id: input.recipient.keyId,
    signer_key_id: signer.keyId,
    purpose: input.purpose,
  };
}

export interface DecryptVerifyInput {
  readonly ring: KeyRing;
  readonly encryptedData: string | Uint8Array;
  readonly signerKeys: SignerKeyLookup;
  /** The signer expected to have signed (the caller itself, usually): see PoolDecryptVerifyOptions. */
  readonly likelySigner?: PoolDecryptVerifyOptions["likelySigner"];
  readonly expectedPurpose: string | undefined;
  /** Whether to return the signed blob (default true). */
  readonly signedBlob?: boolean;
}

/**
 * decrypt-verify's answer before it goes on the wire: the payload without `signed_blob`, and
 * the signed blob's bytes when they were asked for (`jsonAnswer` / `binaryAnswer` encode and
 * wipe them: the blob holds the plaintext).
 */
export interface DecryptVerifyAnswer {
  readonly kind: "decrypt-verify";
  readonly payload: DecryptVerifyPayload;
  readonly signedBlob: Buffer | undefined;
}

/**
 * Every reported field comes from the verified signed document: `signed_by` and
 * `signed_timestamp` are what the signer signed, never anything the caller sent.
 */
export async function decryptVerifyAction(
  input: DecryptVerifyInput,
  engine: SignatureEngine = threadPoolEngine,
): Promise<DecryptVerifyAnswer> {
  const verified = await guardedAsync(() =>
    engine.decryptVerify(input.encryptedData, {
      recipientKeys: input.ring,
      signerKeys: input.signerKeys,
      ...(input.likelySigner === undefined ? {} : { likelySigner: input.likelySigner }),
      ...(input.expectedPurpose === undefined ? {} : { expectedPurpose: input.expectedPurpose }),
    }),
  );
  // The signed blob (document, signature, plaintext) lets the caller hand the content on to a
  // party that checks the signature with public keys only (spec note 3: the original signature).
  // It is the verified blob itself (the plaintext is a view into it): wiped here when it is
  // not asked for or the text is refused, else by the answer that carries it.
  const whole = verified.signedBlob;
  let decrypted: string;
  try {
    decrypted = readText(verified.plaintext);
  } catch (error) {
    whole.fill(0);
    throw error;
  }
  let signedBlob: Buffer | undefined;
  if (input.signedBlob === false) whole.fill(0);
  else signedBlob = Buffer.from(whole.buffer, whole.byteOffset, whole.byteLength);
  return {
    kind: "decrypt-verify",
    payload: {
      decrypted_data: decrypted,
      is_valid_signature: true,
      signed_by: verified.signer,
      signed_timestamp: verified.signedAt,
      signer_key_id: verified.signerKeyId,
      recipient_key_id: verified.recipientKeyId,
      purpose: verified.purpose,
    },
    signedBlob,
  };
}

/** The JSON payload: `signed_blob` as base64 when asked for; the blob's bytes are wiped. */
export function jsonAnswer(answer: DecryptVerifyAnswer): DecryptVerifyPayload {
  const { signedBlob } = answer;
  if (signedBlob === undefined) return answer.payload;
  const text = signedBlob.toString("base64");
  signedBlob.fill(0);
  return { ...answer.payload, signed_blob: text };
}

/** The binary answer (BINARY_ACTION_TYPE): the payload as head, the signed blob as bytes; wiped after. */
export function binaryAnswer(answer: DecryptVerifyAnswer): Buffer {
  const { signedBlob } = answer;
  const body = encodeBinaryBody(answer.payload, signedBlob ?? new Uint8Array(0));
  signedBlob?.fill(0);
  return body;
}

/**
 * The content key of one envelope addressed to the caller's ring, handed out instead of the
 * plaintext (KMS-style), so a caller that verifies the signature itself need not send the
 * whole ciphertext. It opens that envelope and no other. Which kind of envelope it is and
 * whether its signature holds are the caller's checks: the key goes only to the recipient.
 */
export function unwrapAction(ring: KeyRing, envelopeHeader: string): UnwrapPayload {
  return guarded(() => {
    const header = deserializeEnvelopeHeader(envelopeHeader);
    const privateKey = ring.recipientKeys(header.keyId);
    if (privateKey === undefined) throw new CryptoError("crypto_unknown_key");
    const key = unwrapContentKey(privateKey, header);
    try {
      return { content_key: key.toString("base64"), key_id: header.keyId };
    } finally {
      key.fill(0);
    }
  });
}
