import { hash } from "node:crypto";
import { LRUCache } from "lru-cache";
import { positiveIntegerOption } from "../core/positive-integer.ts";
import { TokenVerificationError } from "../identity/errors.ts";
import type { VerifiedToken } from "../identity/jwt-verifier.ts";
import { createVerifiedTokenCache as createSharedCache } from "../identity/verified-token-cache.ts";

/**
 * Verified bearer tokens as principals, in the verified-token cache every server uses
 * (identity/verified-token-cache.ts: by SHA-256 of the token, until the token's `exp` and at
 * most `maxAgeMs`, one verification for concurrent callers). The sidecar adds two things: a
 * hit is answered synchronously (the decision path stays synchronous), and rejections are
 * remembered briefly (`rejectTtlMs`) so a flood of one bad token costs one check per
 * interval; an unreachable JWKS (`jwks_unavailable`) is never remembered.
 */

export interface TokenVerifier {
  verify(token: string): Promise<VerifiedToken>;
  /** Fetches what verification needs (the JWKS) ahead of the first token; see JwtVerifier. */
  warm?(): Promise<void>;
}

export interface CachedPrincipal {
  readonly subject: string;
  readonly partnerId: string | undefined;
  /** May stand for platform_vouched subjects (its issuer's setting). */
  readonly vouchable: boolean;
  /** Epoch ms after which the cache entry is not used. */
  readonly validUntil: number;
}

export interface VerifiedTokenCacheOptions {
  readonly verifier: TokenVerifier;
  /** Default 10000 tokens. */
  readonly maxEntries?: number;
  /** Default 300000 ms. */
  readonly maxAgeMs?: number;
  /** Default 2000 ms. */
  readonly rejectTtlMs?: number;
  readonly now?: () => number;
}

export type TokenCheck =
  | { readonly ok: true; readonly principal: CachedPrincipal; readonly cached: boolean }
  | { readonly ok: false; readonly unavailable: boolean };

export interface VerifiedTokenCache {
  /** A cached answer comes back as it is (no promise): the decision path stays synchronous. */
  check(token: string): TokenCheck | Promise<TokenCheck>;
  readonly size: number;
}

const REJECTED: TokenCheck = Object.freeze({ ok: false, unavailable: false });

export function createVerifiedTokenCache(options: VerifiedTokenCacheOptions): VerifiedTokenCache {
  if (typeof options?.verifier?.verify !== "function") throw new TypeError("verifier is required");
  const { verifier } = options;
  const max = positiveIntegerOption(options.maxEntries, 10_000, "maxEntries");
  const maxAgeMs = positiveIntegerOption(options.maxAgeMs, 300_000, "maxAgeMs");
  const rejectTtlMs = positiveIntegerOption(options.rejectTtlMs, 2_000, "rejectTtlMs");
  const now = options.now ?? Date.now;
  const accepted = createSharedCache<CachedPrincipal>({
    maxEntries: max,
    maxAgeMs,
    now,
    expiresAtMs: (principal) => principal.validUntil,
    verify: async (token) => {
      const verified = await verifier.verify(token);
      return {
        subject: verified.subject,
        // Read strictly by the verifier: a malformed partner claim made the token invalid.
        partnerId: verified.partnerId,
        vouchable: verified.vouchable !== false,
        validUntil: Math.min(verified.expiresAt.getTime(), now() + maxAgeMs),
      };
    },
  });
  const rejected = new LRUCache<string, number>({ max });

  const verify = async (digest: string, token: string): Promise<TokenCheck> => {
    try {
      return { ok: true, principal: await accepted.verify(token), cached: false };
    } catch (error) {
      const unavailable = error instanceof TokenVerificationError && error.unavailable;
      if (!unavailable) rejected.set(digest, now() + rejectTtlMs);
      return { ok: false, unavailable };
    }
  };

  return {
    get size() {
      return accepted.size;
    },
    check(token) {
      const principal = accepted.peek(token);
      if (principal !== undefined) return { ok: true, principal, cached: true };
      // One-shot digest: no Hash object per request.
      const digest = hash("sha256", token, "base64");
      const rejectedUntil = rejected.get(digest);
      if (rejectedUntil !== undefined) {
        if (now() < rejectedUntil) return REJECTED;
        rejected.delete(digest);
      }
      return verify(digest, token);
    },
  };
}
