/**
 * ML-KEM-768 sealing in RFC 9180 HPKE base-mode shape (single shot, sequence number 0):
 *   (shared_secret, enc) = ML-KEM-768.Encaps(pkR)
 *   key, base_nonce      = KeySchedule(mode_base, shared_secret, info = envelope info)
 *   ciphertext           = AES-256-GCM(key, base_nonce, aad = envelope header || caller aad)
 * KEM id 0x0041 (ML-KEM-768), KDF id 0x0001 (HKDF-SHA256), AEAD id 0x0002 (AES-256-GCM).
 */

import {
  createCipheriv,
  createDecipheriv,
  createSecretKey,
  decapsulate,
  encapsulate,
  type KeyObject,
  timingSafeEqual,
} from "node:crypto";
import { asBuffer, concatBytes, toBytes } from "./bytes.ts";
import {
  assertKeyId,
  deserializeEnvelope,
  encodeHeader,
  envelopeInfo,
  type ParsedEnvelope,
  type ParsedEnvelopeHeader,
  parseEnvelope,
  SUITE_MLKEM768_AES256GCM,
  serializeEnvelope,
} from "./envelope.ts";
import { CryptoError } from "./errors.ts";
import {
  type BaseModeInputs,
  baseModeInputs,
  deriveKeyAndNonce,
  hpkeSuiteId,
  keyScheduleContext,
} from "./hpke.ts";
import { assertKey, generateKemKeyPair, KEM_ALGORITHM, type KeyPair } from "./keys.ts";

export const HPKE_KEM_ID_MLKEM768 = 0x0041;
export const HPKE_KDF_ID_HKDF_SHA256 = 0x0001;
export const HPKE_AEAD_ID_AES256GCM = 0x0002;

const SUITE = SUITE_MLKEM768_AES256GCM;
const HPKE_SUITE_ID = hpkeSuiteId(HPKE_KEM_ID_MLKEM768, HPKE_KDF_ID_HKDF_SHA256, HPKE_AEAD_ID_AES256GCM);

/** ML-KEM-768 key pair (Node KeyObjects; keep and reuse them rather than re-importing). */
export function generateKeyPair(): KeyPair {
  return generateKemKeyPair();
}

/**
 * key_schedule_context, and so every labelled HKDF input, depends only on the info, i.e. on
 * the key id: cache them, since the hashes behind them would otherwise run on every seal
 * and open.
 */
const inputsCache = new Map<string, BaseModeInputs>();
const INPUTS_CACHE_LIMIT = 1024;

function inputsFor(keyId: string, info: Buffer): BaseModeInputs {
  // info is a function of (format version, suite, key id); version 1 has one suite.
  let inputs = inputsCache.get(keyId);
  if (inputs === undefined) {
    inputs = baseModeInputs({
      suiteId: HPKE_SUITE_ID,
      context: keyScheduleContext(HPKE_SUITE_ID, info),
      keyLength: SUITE.keyBytes,
      nonceLength: SUITE.nonceBytes,
    });
    if (inputsCache.size >= INPUTS_CACHE_LIMIT) inputsCache.clear();
    inputsCache.set(keyId, inputs);
  }
  return inputs;
}

function deriveKeys(sharedSecret: Buffer, keyId: string, info: Buffer) {
  return deriveKeyAndNonce(sharedSecret, inputsFor(keyId, info));
}

/**
 * Node 24 probes a byte key given to createCipheriv with try/catch around KeyObject and
 * CryptoKey checks; the two exceptions cost twice the AES-GCM work on a 1 KB message.
 * createSecretKey takes bytes without that probe. Its native copy is cleared when freed.
 */
function aeadKey(key: Buffer): KeyObject {
  return createSecretKey(key);
}

function aadBytes(aad: string | Uint8Array | undefined): Uint8Array {
  return aad === undefined ? new Uint8Array(0) : toBytes(aad, "aad");
}

export interface SealOptions {
  readonly recipientPublicKey: KeyObject;
  readonly recipientKeyId: string;
  readonly plaintext: string | Uint8Array;
  /** Extra associated data; the same bytes must be given to `open`. Not stored in the envelope. */
  readonly aad?: string | Uint8Array;
}

export type SealerOptions = Omit<SealOptions, "plaintext">;

/**
 * Sealing with the plaintext fed in parts: a caller whose plaintext is a header followed
 * by a large payload encrypts both where they lie instead of concatenating them first.
 */
export interface Sealer {
  /** Encrypts the next part of the plaintext. */
  update(part: Uint8Array): void;
  /** Ends the plaintext and returns the whole envelope; the sealer cannot be used again. */
  finish(): Buffer;
}

export function createSealer(options: SealerOptions): Sealer {
  const publicKey = assertKey(options.recipientPublicKey, KEM_ALGORITHM, "public");
  assertKeyId(options.recipientKeyId);
  const aad = aadBytes(options.aad);
  const info = envelopeInfo(options.recipientKeyId, SUITE);
  const { sharedKey, ciphertext } = encapsulate(publicKey);
  const { key, baseNonce } = deriveKeys(sharedKey, options.recipientKeyId, info);
  sharedKey.fill(0);
  const header = encodeHeader({ keyId: options.recipientKeyId, kemCiphertext: ciphertext, nonce: baseNonce });
  // The cipher holds its own copy of the key: ours is wiped at once.
  const cipher = createCipheriv("aes-256-gcm", aeadKey(key), baseNonce, { authTagLength: SUITE.tagBytes });
  key.fill(0);
  cipher.setAAD(aad.length === 0 ? header : concatBytes([header, aad]));
  const parts: Buffer[] = [header];
  return {
    update(part) {
      parts.push(cipher.update(part));
    },
    finish() {
      parts.push(cipher.final(), cipher.getAuthTag());
      return concatBytes(parts);
    },
  };
}

/** Encrypts to one recipient; returns the envelope bytes. */
export function sealBytes(options: SealOptions): Buffer {
  const sealer = createSealer(options);
  sealer.update(toBytes(options.plaintext, "plaintext"));
  return sealer.finish();
}

/** Encrypts to one recipient; returns the envelope as standard base64. */
export function seal(options: SealOptions): string {
  return serializeEnvelope(sealBytes(options));
}

export interface OpenOptions {
  readonly recipientPrivateKey: KeyObject;
  /** Standard base64, raw bytes, or an envelope already parsed. */
  readonly envelope: string | Uint8Array | ParsedEnvelope;
  readonly aad?: string | Uint8Array;
  /** When given, an envelope addressed to another key id fails with `crypto_wrong_recipient`. */
  readonly recipientKeyId?: string;
}

export function toParsedEnvelope(envelope: string | Uint8Array | ParsedEnvelope): ParsedEnvelope {
  if (typeof envelope === "string") return deserializeEnvelope(envelope);
  if (envelope instanceof Uint8Array) return parseEnvelope(envelope);
  return envelope;
}

/**
 * The envelope's AEAD key: decapsulation and the key schedule, and the check that the
 * header's nonce is the one the schedule derives. It opens this envelope only (HPKE single
 * shot: one key, one nonce, one message) and is what a key holder hands out in place of
 * the plaintext (docs/crypto.md, "Content keys"). The caller wipes it after use.
 */
export function unwrapContentKey(privateKey: KeyObject, header: ParsedEnvelopeHeader): Buffer {
  assertKey(privateKey, KEM_ALGORITHM, "private");
  let sharedSecret: Buffer;
  try {
    // ML-KEM rejects implicitly: a wrong key or altered ciphertext yields an unrelated
    // secret, which then fails the nonce check here or the AEAD tag when opening.
    sharedSecret = decapsulate(privateKey, header.kemCiphertext);
  } catch (cause) {
    throw decapsulationFailed(cause);
  }
  return contentKeyOf(sharedSecret, header);
}

/**
 * `unwrapContentKey` with the decapsulation on the libuv thread pool (node:crypto's callback
 * form); the same checks and the same `CryptoError`s.
 */
export async function unwrapContentKeyAsync(
  privateKey: KeyObject,
  header: ParsedEnvelopeHeader,
): Promise<Buffer> {
  assertKey(privateKey, KEM_ALGORITHM, "private");
  const sharedSecret = await new Promise<Buffer>((resolve, reject) => {
    try {
      decapsulate(privateKey, header.kemCiphertext, (error, secret) => {
        if (error === null || error === undefined) resolve(secret);
        else reject(decapsulationFailed(error));
      });
    } catch (cause) {
      reject(decapsulationFailed(cause));
    }
  });
  return contentKeyOf(sharedSecret, header);
}

function decapsulationFailed(cause: unknown): CryptoError {
  return new CryptoError("crypto_decrypt_failed", { detail: "decapsulation", cause });
}

/** The key schedule and the nonce check; the shared secret is wiped. */
function contentKeyOf(sharedSecret: Buffer, header: ParsedEnvelopeHeader): Buffer {
  const { key, baseNonce } = deriveKeys(sharedSecret, header.keyId, header.info);
  sharedSecret.fill(0);
  if (!timingSafeEqual(baseNonce, asBuffer(header.nonce))) {
    key.fill(0);
    throw new CryptoError("crypto_decrypt_failed");
  }
  return key;
}

/**
 * Decrypts an envelope with its content key (`unwrapContentKey`). Returns the plaintext only
 * after the tag has been checked: any change to the header, body or tag throws, with no
 * output. The key is not wiped here.
 */
export function openWithContentKey(
  envelope: ParsedEnvelope,
  contentKey: Uint8Array,
  aad?: string | Uint8Array,
): Uint8Array {
  if (contentKey.length !== SUITE.keyBytes) {
    throw new CryptoError("crypto_invalid_argument", { detail: "content key has the wrong length" });
  }
  const associated = aadBytes(aad);
  const tagStart = envelope.body.length - SUITE.tagBytes;
  const decipher = createDecipheriv("aes-256-gcm", aeadKey(asBuffer(contentKey)), envelope.nonce, {
    authTagLength: SUITE.tagBytes,
  });
  decipher.setAAD(associated.length === 0 ? envelope.header : concatBytes([envelope.header, associated]));
  decipher.setAuthTag(envelope.body.subarray(tagStart));
  const head = decipher.update(envelope.body.subarray(0, tagStart));
  try {
    const tail = decipher.final();
    return tail.length === 0 ? head : concatBytes([head, tail]);
  } catch (cause) {
    // GCM hands out unauthenticated plaintext from update(): wipe it before failing.
    head.fill(0);
    throw new CryptoError("crypto_decrypt_failed", { cause });
  }
}

/**
 * Decrypts an envelope. Returns the plaintext only after the tag has been checked: any
 * change to the header, key id, KEM ciphertext, nonce, body or tag throws, with no output.
 */
export function open(options: OpenOptions): Uint8Array {
  const { privateKey, envelope } = addressed(options);
  return openWith(unwrapContentKey(privateKey, envelope), envelope, options.aad);
}

/** `open` with the decapsulation on the libuv thread pool; the same checks and errors. */
export async function openAsync(options: OpenOptions): Promise<Uint8Array> {
  const { privateKey, envelope } = addressed(options);
  return openWith(await unwrapContentKeyAsync(privateKey, envelope), envelope, options.aad);
}

function addressed(options: OpenOptions): { privateKey: KeyObject; envelope: ParsedEnvelope } {
  const privateKey = assertKey(options.recipientPrivateKey, KEM_ALGORITHM, "private");
  const envelope = toParsedEnvelope(options.envelope);
  if (options.recipientKeyId !== undefined && envelope.keyId !== options.recipientKeyId) {
    throw new CryptoError("crypto_wrong_recipient");
  }
  return { privateKey, envelope };
}

/** Opens with the content key, which is wiped after. */
function openWith(key: Buffer, envelope: ParsedEnvelope, aad: OpenOptions["aad"]): Uint8Array {
  try {
    return openWithContentKey(envelope, key, aad);
  } finally {
    key.fill(0);
  }
}
