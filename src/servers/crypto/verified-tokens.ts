/**
 * A JwtVerifier that remembers tokens it has already verified (identity/verified-token-cache.ts:
 * by SHA-256 of the token, until the token expires or `maxAgeMs` passes, whichever is first).
 * The managed API sends the same cached token on every call, so the signature check would
 * otherwise run thousands of times per second for one answer.
 */

import type { JwtVerifier } from "../../identity/jwt-verifier.ts";
import { createVerifiedTokenCache } from "../../identity/verified-token-cache.ts";

export interface VerifiedTokenCacheOptions {
  readonly maxAgeMs: number;
  readonly maxEntries?: number;
  readonly now?: () => number;
}

export function cachingVerifier(verifier: JwtVerifier, options: VerifiedTokenCacheOptions): JwtVerifier {
  if (options.maxAgeMs <= 0) return verifier;
  const cache = createVerifiedTokenCache({
    verify: (token) => verifier.verify(token),
    expiresAtMs: (verified) => verified.expiresAt.getTime(),
    maxAgeMs: options.maxAgeMs,
    ...(options.maxEntries === undefined ? {} : { maxEntries: options.maxEntries }),
    ...(options.now === undefined ? {} : { now: options.now }),
  });
  return { issuer: verifier.issuer, verify: (token) => cache.verify(token) };
}
