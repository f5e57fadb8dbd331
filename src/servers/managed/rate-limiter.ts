/**
 * Per-user token buckets: `burst` requests at once, refilled at `perUserPerMinute`. Pure
 * apart from the injected clock. Memory is bounded: the least recently used users are
 * forgotten first (a forgotten user simply starts again with a full bucket).
 */

export interface RateLimit {
  readonly perUserPerMinute: number;
  readonly burst: number;
}

export type RateDecision =
  | { readonly allowed: true }
  | { readonly allowed: false; readonly retryAfterSec: number };

export interface RateLimiter {
  take(key: string): RateDecision;
}

interface Bucket {
  tokens: number;
  at: number;
}

export function createRateLimiter(
  limit: RateLimit,
  options: { readonly now?: () => number; readonly maxKeys?: number } = {},
): RateLimiter {
  const now = options.now ?? Date.now;
  const maxKeys = options.maxKeys ?? 100_000;
  const perMs = limit.perUserPerMinute / 60_000;
  const buckets = new Map<string, Bucket>();
  return {
    take(key) {
      const at = now();
      const bucket = buckets.get(key) ?? { tokens: limit.burst, at };
      buckets.delete(key);
      bucket.tokens = Math.min(limit.burst, bucket.tokens + Math.max(0, at - bucket.at) * perMs);
      bucket.at = at;
      buckets.set(key, bucket);
      if (buckets.size > maxKeys) {
        const oldest = buckets.keys().next();
        if (oldest.done !== true) buckets.delete(oldest.value);
      }
      if (bucket.tokens >= 1) {
        bucket.tokens -= 1;
        return { allowed: true };
      }
      return { allowed: false, retryAfterSec: Math.max(1, Math.ceil((1 - bucket.tokens) / perMs / 1000)) };
    },
  };
}
