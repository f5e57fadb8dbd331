/**
 * ML-KEM-768 and ML-DSA-65 key objects: generation, type checks, and raw byte forms.
 * Raw forms are what other implementations (FIPS 203/204 encodings, @noble/post-quantum)
 * use: public keys as the encapsulation / verification key bytes, private keys as seeds.
 */

import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from "node:crypto";
import { asBuffer, fromBase64 } from "./bytes.ts";
import { CryptoError } from "./errors.ts";

export const KEM_ALGORITHM = "ml-kem-768";
export const SIG_ALGORITHM = "ml-dsa-65";
export type KeyAlgorithm = typeof KEM_ALGORITHM | typeof SIG_ALGORITHM;

/** Byte lengths of FIPS 203 / FIPS 204 encodings for the two parameter sets. */
export const KEY_SIZES = {
  [KEM_ALGORITHM]: { publicKey: 1184, seed: 64 },
  [SIG_ALGORITHM]: { publicKey: 1952, seed: 32 },
} as const;

export interface KeyPair {
  readonly publicKey: KeyObject;
  readonly privateKey: KeyObject;
}

export function generateKemKeyPair(): KeyPair {
  return generateKeyPairSync(KEM_ALGORITHM);
}

export function generateSigKeyPair(): KeyPair {
  return generateKeyPairSync(SIG_ALGORITHM);
}

export function assertKey(key: unknown, algorithm: KeyAlgorithm, type: "public" | "private"): KeyObject {
  if (
    typeof key !== "object" ||
    key === null ||
    !("asymmetricKeyType" in key) ||
    (key as KeyObject).asymmetricKeyType !== algorithm ||
    (key as KeyObject).type !== type
  ) {
    throw new CryptoError("crypto_invalid_key", { detail: `expected an ${algorithm} ${type} key` });
  }
  return key as KeyObject;
}

/** The FIPS encoding of a public key (ek for ML-KEM, pk for ML-DSA). */
export function exportRawPublicKey(key: KeyObject): Uint8Array {
  if (key.type !== "public") throw new CryptoError("crypto_invalid_key", { detail: "expected a public key" });
  return key.export({ format: "raw-public" });
}

/**
 * The private seed: 64 bytes (d || z) for ML-KEM-768, 32 bytes (xi) for ML-DSA-65. It is the
 * compact form FIPS 203/204 key generation starts from; noble's `keygen(seed)` accepts it.
 */
export function exportPrivateSeed(key: KeyObject): Uint8Array {
  if (key.type !== "private")
    throw new CryptoError("crypto_invalid_key", { detail: "expected a private key" });
  return key.export({ format: "raw-seed" });
}

function rawBytes(input: Uint8Array | string, what: string): Uint8Array {
  return typeof input === "string" ? fromBase64(input, what) : input;
}

/** The raw bytes of a public key of the algorithm's length (bytes or standard base64), not imported. */
export function assertPublicKeyLength(algorithm: KeyAlgorithm, raw: Uint8Array | string): Uint8Array {
  const bytes = rawBytes(raw, "public key");
  if (bytes.length !== KEY_SIZES[algorithm].publicKey) {
    throw new CryptoError("crypto_invalid_key", { detail: `${algorithm} public key length` });
  }
  return bytes;
}

/** Imports a raw public key (bytes or standard base64). */
export function importPublicKey(algorithm: KeyAlgorithm, raw: Uint8Array | string): KeyObject {
  const bytes = assertPublicKeyLength(algorithm, raw);
  try {
    return createPublicKey({ key: asBuffer(bytes), format: "raw-public", asymmetricKeyType: algorithm });
  } catch (cause) {
    throw new CryptoError("crypto_invalid_key", { detail: `${algorithm} public key`, cause });
  }
}

/** Imports a private key from its seed (bytes or standard base64). */
export function importPrivateSeed(algorithm: KeyAlgorithm, seed: Uint8Array | string): KeyObject {
  const bytes = rawBytes(seed, "private seed");
  if (bytes.length !== KEY_SIZES[algorithm].seed) {
    throw new CryptoError("crypto_invalid_key", { detail: `${algorithm} seed length` });
  }
  try {
    return createPrivateKey({ key: asBuffer(bytes), format: "raw-seed", asymmetricKeyType: algorithm });
  } catch (cause) {
    throw new CryptoError("crypto_invalid_key", { detail: `${algorithm} seed`, cause });
  }
}

/** The public half of a private key (derived, not stored). */
export function publicKeyOf(privateKey: KeyObject): KeyObject {
  return createPublicKey(privateKey);
}
