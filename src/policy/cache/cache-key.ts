import { createSecretKey, hkdfSync, type KeyObject } from "node:crypto";
import { PolicyCacheError } from "./errors.ts";

/**
 * The sidecar's cache key: 32 random bytes, written base64 in a file that only the sidecars
 * share (a Kubernetes Secret). Redis never sees it. Two subkeys are derived from it with
 * HKDF-SHA256 so the encryption key and the MAC key are independent.
 */
export interface CacheKeys {
  /** AES-256-GCM: keeps cached policy contents confidential from whoever reads Redis. */
  readonly encryption: KeyObject;
  /** HMAC-SHA256 over the whole entry: integrity, checked before anything is decrypted. */
  readonly mac: KeyObject;
}

export const CACHE_KEY_BYTES = 32;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** Parses the key file's text: base64 (standard alphabet, padded), surrounding whitespace ignored. */
export function parseCacheKey(text: string): Uint8Array {
  if (typeof text !== "string") throw new PolicyCacheError("invalid_cache_key", "cache key must be text");
  const trimmed = text.trim();
  if (!BASE64.test(trimmed)) throw new PolicyCacheError("invalid_cache_key", "cache key must be base64");
  const bytes = Buffer.from(trimmed, "base64");
  if (bytes.length !== CACHE_KEY_BYTES) {
    throw new PolicyCacheError("invalid_cache_key", `cache key must decode to ${CACHE_KEY_BYTES} bytes`);
  }
  return new Uint8Array(bytes);
}

function subkey(key: Uint8Array, info: string): KeyObject {
  return createSecretKey(Buffer.from(hkdfSync("sha256", key, Buffer.alloc(0), info, 32)));
}

export function deriveCacheKeys(key: Uint8Array): CacheKeys {
  if (!(key instanceof Uint8Array) || key.length !== CACHE_KEY_BYTES) {
    throw new PolicyCacheError("invalid_cache_key", `cache key must be ${CACHE_KEY_BYTES} bytes`);
  }
  return {
    encryption: subkey(key, "authority-sidecar-cache-v1 encryption"),
    mac: subkey(key, "authority-sidecar-cache-v1 mac"),
  };
}
