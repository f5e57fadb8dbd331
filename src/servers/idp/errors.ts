/** RFC 6749 §5.2 error codes the token endpoint answers with (plus RFC 8707's invalid_target). */
export type OAuthErrorCode =
  | "invalid_request"
  | "invalid_client"
  | "invalid_grant"
  | "invalid_scope"
  | "invalid_target"
  | "unsupported_grant_type"
  | "rate_limited"
  // RFC 6750, for the development-only client registration route.
  | "invalid_token"
  | "insufficient_scope";

/**
 * A token-endpoint failure. `description` is public and must never say why a credential
 * failed (unknown user and wrong password read the same).
 */
export class OAuthError extends Error {
  readonly code: OAuthErrorCode;
  readonly status: number;
  readonly description: string;
  /** Set when the client authenticated with HTTP Basic: RFC 6749 requires a challenge. */
  readonly basicChallenge: boolean;
  readonly retryAfterSec: number | undefined;

  constructor(
    code: OAuthErrorCode,
    description: string,
    options?: { status?: number; basicChallenge?: boolean; retryAfterSec?: number },
  ) {
    super(description);
    this.name = "OAuthError";
    this.code = code;
    this.description = description;
    this.status = options?.status ?? (code === "invalid_client" ? 401 : code === "rate_limited" ? 429 : 400);
    this.basicChallenge = options?.basicChallenge ?? false;
    this.retryAfterSec = options?.retryAfterSec;
  }

  /** The RFC 6749 body. Rate limiting is reported as invalid_request with status 429. */
  toJSON(): { error: string; error_description: string } {
    return {
      error: this.code === "rate_limited" ? "invalid_request" : this.code,
      error_description: this.description,
    };
  }
}

/** A bad directory entry, accounts file or IdP option, found before serving. */
export class IdpConfigError extends Error {
  readonly code = "idp_config_invalid";

  constructor(message: string) {
    super(message);
    this.name = "IdpConfigError";
  }
}
