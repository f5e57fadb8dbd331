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

/**
 * Runs a node:crypto sign or verify call that takes a `{ key, context }` options object.
 * Node 24 tells a KeyObject or CryptoKey from an options object with try/catch, so each
 * such call throws and catches two TypeErrors internally, and capturing their stack
 * traces is most of the call's cost on the event loop (about 10 µs, more under deep
 * async stacks). Node discards those errors; without a stack to capture they are cheap.
 * Arguments are checked before the call, so an error it throws itself is not expected.
 */
function withoutStackTraces<T>(run: () => T): T {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return run();
  } finally {
    Error.stackTraceLimit = limit;
  }
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
  const message = toBytes(options.message, "message");
  return withoutStackTraces(() => nodeSign(null, message, { key, context }));
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
  const message = toBytes(options.message, "message");
  const signature = options.signature;
  return withoutStackTraces(() => nodeVerify(null, message, { key, context }, signature));
}

/** `sign` on the libuv thread pool; argument errors reject with the same codes as `sign`. */
export async function signAsync(options: SignOptions): Promise<Uint8Array> {
  const key = assertKey(options.privateKey, SIG_ALGORITHM, "private");
  const context = contextBytes(options.context);
  const message = toBytes(options.message, "message");
  return new Promise((resolve, reject) => {
    withoutStackTraces(() =>
      nodeSign(null, message, { key, context }, (error, signature) => {
        if (error === null) resolve(signature);
        else reject(error);
      }),
    );
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
    withoutStackTraces(() =>
      nodeVerify(null, message, { key, context }, signature, (error, valid) => {
        if (error === null) resolve(valid);
        else reject(error);
      }),
    );
  });
}

/** Like `verify`, but a bad signature throws `crypto_bad_signature`. */
export function assertValidSignature(options: VerifyOptions): void {
  if (!verify(options)) throw new CryptoError("crypto_bad_signature");
}
