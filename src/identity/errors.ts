import { AuthorityError } from "../errors.ts";

/**
 * Precise internal reasons a token was rejected. They are for logs, metrics and tests;
 * callers turn them into the public `invalid_token` / `invalid_user_assertion` (or a 503
 * for `jwks_unavailable`) so a caller never learns which check failed.
 */
export const tokenErrorCodes = [
  "token_malformed",
  "token_too_large",
  "token_alg_not_allowed",
  "token_unknown_kid",
  "token_bad_signature",
  "token_expired",
  "token_not_yet_valid",
  "token_issuer",
  "token_audience",
  "token_use",
  "token_tenant",
  "token_partner",
  "token_subject",
  "token_scope",
  "jwks_unavailable",
] as const;

export type TokenErrorCode = (typeof tokenErrorCodes)[number];

/** A rejected token. The message never contains the token or any of its parts. */
export class TokenVerificationError extends Error {
  readonly code: TokenErrorCode;

  constructor(code: TokenErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "TokenVerificationError";
    this.code = code;
  }

  /** True when the failure is ours (keys unreachable), not the caller's: answer 503, not 401. */
  get unavailable(): boolean {
    return this.code === "jwks_unavailable";
  }
}

/** An invalid verifier or identity-provider configuration, found at construction. */
export class IdentityConfigError extends Error {
  readonly code = "identity_config_invalid";

  constructor(message: string) {
    super(message);
    this.name = "IdentityConfigError";
  }
}

export type PublicTokenErrorCode = "invalid_token" | "invalid_user_assertion";

/**
 * The public face of a verification failure: `publicCode` for a rejected token,
 * `upstream_unavailable` (503) when keys could not be fetched, so fail-closed outages are
 * distinguishable from bad tokens. Anything that is not a TokenVerificationError is
 * treated as a rejected token too: verification never fails open.
 */
export function tokenErrorToAuthorityError(error: unknown, publicCode: PublicTokenErrorCode): AuthorityError {
  if (error instanceof TokenVerificationError && error.unavailable) {
    return new AuthorityError("upstream_unavailable", undefined, { cause: error });
  }
  return new AuthorityError(publicCode, undefined, { cause: error });
}
