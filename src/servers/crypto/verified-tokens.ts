/**
 * A JwtVerifier that remembers tokens it has already verified, keyed by a SHA-256 of the
 * token (the token itself is not kept). The managed API sends the same cached token on
 * every call, so the signature check would otherwise run thousands of times per second
 * for one answer. An entry lives until the token expires or `maxAgeMs` passes, whichever
 * is first, which bounds how long a key removed from the JWKS keeps a token accepted.
 */

import { createHash } from "node:crypto";
import { LRUCache } from "lru-cache";
import type { JwtVerifier, VerifiedToken } from "../../identity/jwt-verifier.ts";

export interface VerifiedTokenCacheOptions {
  readonly maxAgeMs: number;
  readonly maxEntries?: number;
  readonly now?: () => number;
}

interface Entry {
  readonly token: VerifiedToken;
  readonly until: number;
}

export function cachingVerifier(verifier: JwtVerifier, options: VerifiedTokenCacheOptions): JwtVerifier {
  if (options.maxAgeMs <= 0) return verifier;
  const now = options.now ?? Date.now;
  const cache = new LRUCache<string, Entry>({ max: options.maxEntries ?? 10_000 });
  return {
    issuer: verifier.issuer,
    async verify(token) {
      const key = typeof token === "string" ? createHash("sha256").update(token).digest("base64url") : "";
      const at = now();
      const hit = cache.get(key);
      if (hit !== undefined && at < hit.until) return hit.token;
      const verified = await verifier.verify(token);
      cache.set(key, {
        token: verified,
        until: Math.min(verified.expiresAt.getTime(), at + options.maxAgeMs),
      });
      return verified;
    },
  };
}
