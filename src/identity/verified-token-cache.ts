/**
 * Verified bearer tokens, remembered by the SHA-256 of the token (the token itself is never
 * kept) so a client repeating its token costs one hash instead of a signature check. An entry
 * is served until the token's own expiry or `maxAgeMs`, whichever is first: a key removed from
 * the issuer's JWKS stops being trusted within `maxAgeMs`. A token the verifier refused, or one
 * without an expiry, is never served from here. Concurrent first sightings of one token share
 * one verification (lru-cache's fetch()); the number of entries is bounded (LRU eviction).
 * The one cache of verified tokens of every server (authority, crypto service, sidecar).
 */

import { hash } from "node:crypto";
import { LRUCache } from "lru-cache";
import { growingBound } from "../core/growing-bound.ts";
import { positiveIntegerOption } from "../core/positive-integer.ts";

export interface VerifiedTokenCacheOptions<T> {
  readonly verify: (token: string) => Promise<T>;
  /** Epoch ms at which the verified token expires; undefined: the token is not remembered. */
  readonly expiresAtMs: (verified: T) => number | undefined;
  /** Longest time an entry is served without verifying again. */
  readonly maxAgeMs: number;
  /** Default 10000 tokens. */
  readonly maxEntries?: number;
  readonly now?: () => number;
}

export interface VerifiedTokenCache<T> {
  /** The remembered verification of `token` if still valid, without waiting; else undefined. */
  peek(token: string): T | undefined;
  /** The remembered verification, or the verifier's answer (a refusal is thrown, not kept). */
  verify(token: string): Promise<T>;
  readonly size: number;
}

interface Entry<T> {
  readonly verified: T;
  /** Epoch ms (by `now`) from which the entry is not served. */
  readonly until: number;
}

export function createVerifiedTokenCache<T>(options: VerifiedTokenCacheOptions<T>): VerifiedTokenCache<T> {
  const maxEntries = positiveIntegerOption(options.maxEntries, 10_000, "maxEntries");
  if (!(options.maxAgeMs > 0)) throw new TypeError("maxAgeMs must be positive");
  const now = options.now ?? Date.now;
  // No TTL inside lru-cache: `until` is checked on every read against `now`, so the clock is ours.
  const entries = new LRUCache<string, Entry<T>, string>({
    ...growingBound(maxEntries),
    // A token evicted while its verification runs still answers the callers waiting on it.
    ignoreFetchAbort: true,
    fetchMethod: async (_digest, _stale, { context: token }) => {
      const at = now();
      const verified = await options.verify(token);
      const expiresAt = options.expiresAtMs(verified);
      return { verified, until: expiresAt === undefined ? 0 : Math.min(expiresAt, at + options.maxAgeMs) };
    },
  });

  const fresh = (digest: string): T | undefined => {
    const entry = entries.get(digest);
    if (entry === undefined) return undefined;
    if (now() < entry.until) return entry.verified;
    entries.delete(digest);
    return undefined;
  };

  return {
    get size() {
      return entries.size;
    },
    peek(token) {
      return typeof token === "string" ? fresh(digestOf(token)) : undefined;
    },
    async verify(token) {
      // Not a string: the verifier refuses it; nothing to remember.
      if (typeof token !== "string") return options.verify(token);
      const digest = digestOf(token);
      const hit = fresh(digest);
      if (hit !== undefined) return hit;
      const entry = await entries.fetch(digest, { context: token, forceRefresh: true });
      // Unreachable (fetchMethod returns an entry or throws); the type of fetch() allows undefined.
      if (entry === undefined) throw new TypeError("token verification produced nothing");
      // Verified, but already past its `until` (or never to be kept): answer it, do not keep it.
      if (!(now() < entry.until) && entries.peek(digest) === entry) entries.delete(digest);
      return entry.verified;
    },
  };
}

/** One-shot digest: no Hash object per request. */
function digestOf(token: string): string {
  return hash("sha256", token, "base64url");
}
