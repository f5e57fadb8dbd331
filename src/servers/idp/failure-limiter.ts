/**
 * Counts failures per key and refuses a key for the rest of its window after too many, so the
 * token endpoint cannot be used to guess secrets at speed (the token endpoint keys it by
 * principal and source address). Memory is bounded: the oldest keys are forgotten first.
 */

export interface FailureLimiterOptions {
  readonly maxFailures: number;
  readonly windowMs: number;
  readonly maxKeys?: number;
  readonly now: () => Date;
}

export type LimitCheck =
  | { readonly allowed: true }
  | { readonly allowed: false; readonly retryAfterSec: number };

export interface FailureLimiter {
  check(key: string): LimitCheck;
  recordFailure(key: string): void;
  reset(key: string): void;
}

interface Window {
  failures: number;
  startedAt: number;
}

export function createFailureLimiter(options: FailureLimiterOptions): FailureLimiter {
  const { maxFailures, windowMs, now } = options;
  const maxKeys = options.maxKeys ?? 10_000;
  const windows = new Map<string, Window>();

  const current = (key: string, at: number): Window | undefined => {
    const window = windows.get(key);
    if (window !== undefined && at - window.startedAt >= windowMs) {
      windows.delete(key);
      return undefined;
    }
    return window;
  };

  return {
    check(key) {
      const at = now().getTime();
      const window = current(key, at);
      if (window === undefined || window.failures < maxFailures) return { allowed: true };
      return {
        allowed: false,
        retryAfterSec: Math.max(1, Math.ceil((window.startedAt + windowMs - at) / 1000)),
      };
    },
    recordFailure(key) {
      const at = now().getTime();
      const window = current(key, at);
      if (window !== undefined) {
        window.failures += 1;
        return;
      }
      if (windows.size >= maxKeys) {
        const oldest = windows.keys().next();
        if (oldest.done !== true) windows.delete(oldest.value);
      }
      windows.set(key, { failures: 1, startedAt: at });
    },
    reset(key) {
      windows.delete(key);
    },
  };
}
