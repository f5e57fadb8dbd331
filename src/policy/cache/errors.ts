import { positiveIntegerOption } from "../../core/positive-integer.ts";

/**
 * Failures of the verified-policy cache. `authorityCode` names the public table code
 * (src/errors.ts) so `toAuthorityError` maps them: every one of them is a deny.
 */
export type PolicyCacheErrorCode =
  /** Options rejected at construction. */
  | "invalid_options"
  /** The cache key is not 32 bytes of base64. */
  | "invalid_cache_key"
  /** The current policy head could not be read within the staleness bound. */
  | "freshness_unavailable"
  /** The authority service could not be asked (network, 5xx, timeout, bad answer). */
  | "source_unavailable"
  /** The authority answered with an older policy than Redis says exists. */
  | "source_inconsistent";

export class PolicyCacheError extends Error {
  readonly code: PolicyCacheErrorCode;
  readonly authorityCode: "upstream_unavailable" | "internal";

  constructor(code: PolicyCacheErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "PolicyCacheError";
    this.code = code;
    this.authorityCode =
      code === "invalid_options" || code === "invalid_cache_key" ? "internal" : "upstream_unavailable";
  }
}

/** A positive whole-number option of the cache, refused as `invalid_options`. */
export function positiveCacheOption(
  value: number | undefined,
  fallback: number | undefined,
  name: string,
): number {
  return positiveIntegerOption(value, fallback, name, (message) => {
    throw new PolicyCacheError("invalid_options", message);
  });
}
