/**
 * The managed API's password grant: the identity provider's failures turned into the
 * managed API's reasons: refused credentials are the spec's 500, a locked-out username is
 * 429, anything unreachable or broken is 503.
 */

import { type IdpGrantOptions, passwordGrant } from "../../clients/idp/password-grant.ts";
import type { PasswordGrant } from "../../clients/idp/token-cache.ts";
import { TokenRequestError } from "../../identity/token-client.ts";
import { ManagedError } from "./errors.ts";

/** Retry-After for an identity provider lockout, which does not tell us its own. */
export const IDP_LOCKOUT_RETRY_SEC = 60;

export function idpFailure(error: unknown): ManagedError {
  if (!(error instanceof TokenRequestError)) return new ManagedError("idp_unavailable", { cause: error });
  const status = error.status;
  if (error.code === "token_endpoint_unavailable" || status === undefined || status >= 500) {
    return new ManagedError("idp_unavailable", { cause: error, retryAfterSec: 5 });
  }
  if (status === 429)
    return new ManagedError("idp_rate_limited", { cause: error, retryAfterSec: IDP_LOCKOUT_RETRY_SEC });
  return new ManagedError("invalid_idp_credentials", { cause: error });
}

export function managedPasswordGrant(options: IdpGrantOptions): PasswordGrant {
  const grant = passwordGrant(options);
  return async (username, password) => {
    try {
      return await grant(username, password);
    } catch (error) {
      throw idpFailure(error);
    }
  };
}
