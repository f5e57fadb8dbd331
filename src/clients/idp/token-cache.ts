/**
 * Bearer tokens from the identity provider, cached per credential pair until shortly
 * before they expire, so a busy partner costs one password grant per token lifetime
 * instead of one per call. Keyed by the username and an HMAC of the password under a
 * random per-process key: the password itself is never kept, and the key cannot be
 * attacked offline. Concurrent misses for one key share a single grant (single flight).
 * A changed password takes effect at the latest when the cached token expires.
 */

import { createHmac, createSecretKey, randomBytes } from "node:crypto";
import { LRUCache } from "lru-cache";

export interface GrantedToken {
  readonly accessToken: string;
  /** Seconds; undefined when the identity provider did not say. */
  readonly expiresInSec: number | undefined;
}

export type PasswordGrant = (username: string, password: string) => Promise<GrantedToken>;

export interface TokenCacheOptions {
  /** Refresh this long before expiry (default 30 s; at most half the token's lifetime). */
  readonly refreshBeforeExpirySec?: number;
  /** Lifetime assumed when the identity provider gives no expires_in (default 60 s). */
  readonly defaultLifetimeSec?: number;
  readonly maxEntries?: number;
  readonly now?: () => number;
}

export interface TokenCache {
  get(username: string, password: string): Promise<string>;
  /** Drops `token` (e.g. after the upstream refused it); a newer token for the key is kept. */
  invalidate(username: string, password: string, token: string): void;
}

interface Entry {
  readonly token: string;
  readonly refreshAt: number;
}

export function createTokenCache(grant: PasswordGrant, options: TokenCacheOptions = {}): TokenCache {
  const now = options.now ?? Date.now;
  const skewSec = options.refreshBeforeExpirySec ?? 30;
  const defaultLifetimeSec = options.defaultLifetimeSec ?? 60;
  // A KeyObject, not a Buffer: Node re-validates Buffer keys on every createHmac.
  const hmacKey = createSecretKey(randomBytes(32));
  const keyOf = (username: string, password: string): string =>
    `${username}\u0000${createHmac("sha256", hmacKey).update(password, "utf8").digest("base64url")}`;

  // lru-cache's fetch() is the single flight: concurrent misses for one key share one grant;
  // a failed grant is not kept. A token too short-lived to reuse is handed out, never served again.
  const entries = new LRUCache<string, Entry, { readonly username: string; readonly password: string }>({
    max: options.maxEntries ?? 10_000,
    ignoreFetchAbort: true,
    fetchMethod: async (_key, _stale, { context }) => {
      const granted = await grant(context.username, context.password);
      const lifetime = granted.expiresInSec ?? defaultLifetimeSec;
      const usable = lifetime - Math.min(skewSec, lifetime / 2);
      return { token: granted.accessToken, refreshAt: usable > 0 ? now() + usable * 1000 : 0 };
    },
  });

  return {
    async get(username, password) {
      const key = keyOf(username, password);
      const entry = entries.get(key);
      if (entry !== undefined && now() < entry.refreshAt) return entry.token;
      // forceRefresh: the entry is due by `now` (the cache keeps no TTL of its own).
      const fetched = await entries.fetch(key, { context: { username, password }, forceRefresh: true });
      // Unreachable (the grant returns a token or throws); the type of fetch() allows undefined.
      if (fetched === undefined) throw new TypeError("password grant produced no token");
      return fetched.token;
    },
    invalidate(username, password, token) {
      const key = keyOf(username, password);
      if (entries.get(key)?.token === token) entries.delete(key);
    },
  };
}
