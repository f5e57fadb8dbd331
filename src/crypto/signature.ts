/**
 * ML-DSA-65 (FIPS 204, pure mode) signatures with a context string. The context separates
 * protocols: a signature made for one context never verifies under another.
 *
 * The async forms use node:crypto's callback API, which runs the operation as a libuv
 * thread-pool job: a server keeps its event loop free and can use more than one core.
 */

import { type KeyObject, sign as nodeSign, verify as nodeVerify } from "node:crypto";
import { toBytes } from "./bytes.ts";
import { CryptoError } from "./errors.ts";
import { assertKey, generateSigKeyPair, type KeyPair, SIG_ALGORITHM } from "./keys.ts";

export const SIGNATURE_BYTES = 3309;
export const MAX_CONTEXT_BYTES = 255;

/** ML-DSA-65 key pair (Node KeyObjects; keep and reuse them rather than re-importing). */
export function generateKeyPair(): KeyPair {
  return generateSigKeyPair();
}

function contextBytes(context: string | Uint8Array): Uint8Array {
  const bytes = toBytes(context, "context");
  if (bytes.length > MAX_CONTEXT_BYTES) {
    throw new CryptoError("crypto_invalid_argument", { detail: "context is longer than 255 bytes" });
  }
  return bytes;
}

export interface SignOptions {
  readonly privateKey: KeyObject;
  readonly message: string | Uint8Array;
  /** FIPS 204 context string, at most 255 bytes (text is UTF-8 encoded). */
  readonly context: string | Uint8Array;
}

export function sign(options: SignOptions): Uint8Array {
  const key = assertKey(options.privateKey, SIG_ALGORITHM, "private");
  const context = contextBytes(options.context);
  return nodeSign(null, toBytes(options.message, "message"), { key, context });
}

export interface VerifyOptions {
  readonly publicKey: KeyObject;
  readonly message: string | Uint8Array;
  readonly signature: Uint8Array;
  readonly context: string | Uint8Array;
}

/** True only for a valid signature over exactly this message and context. */
export function verify(options: VerifyOptions): boolean {
  const key = assertKey(options.publicKey, SIG_ALGORITHM, "public");
  const context = contextBytes(options.context);
  if (!(options.signature instanceof Uint8Array) || options.signature.length !== SIGNATURE_BYTES)
    return false;
  return nodeVerify(null, toBytes(options.message, "message"), { key, context }, options.signature);
}

/** `sign` on the libuv thread pool; argument errors reject with the same codes as `sign`. */
export async function signAsync(options: SignOptions): Promise<Uint8Array> {
  const key = assertKey(options.privateKey, SIG_ALGORITHM, "private");
  const context = contextBytes(options.context);
  const message = toBytes(options.message, "message");
  return new Promise((resolve, reject) => {
    nodeSign(null, message, { key, context }, (error, signature) => {
      if (error === null) resolve(signature);
      else reject(error);
    });
  });
}

/** `verify` on the libuv thread pool: resolves true only for a valid signature. */
export async function verifyAsync(options: VerifyOptions): Promise<boolean> {
  const key = assertKey(options.publicKey, SIG_ALGORITHM, "public");
  const context = contextBytes(options.context);
  if (!(options.signature instanceof Uint8Array) || options.signature.length !== SIGNATURE_BYTES)
    return false;
  const signature = options.signature;
  const message = toBytes(options.message, "message");
  return new Promise((resolve, reject) => {
    nodeVerify(null, message, { key, context }, signature, (error, valid) => {
      if (error === null) resolve(valid);
      else reject(error);
    });
  });
}

/** Like `verify`, but a bad signature throws `crypto_bad_signature`. */
export function assertValidSignature(options: VerifyOptions): void {
  if (!verify(options)) throw new CryptoError("crypto_bad_signature");
}
