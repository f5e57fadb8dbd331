/**
 * The password grant against the identity provider's token endpoint (OAuth 2.0, form
 * encoded), with its failures turned into the managed API's reasons: refused credentials
 * are the spec's 500, a locked-out username is 429, anything unreachable or broken is 503.
 */

import { requestToken, TokenRequestError } from "../../identity/token-client.ts";
import { ManagedError } from "./errors.ts";
import type { GrantedToken, PasswordGrant } from "./token-cache.ts";

export interface IdpGrantOptions {
  readonly tokenUrl: string;
  readonly timeoutMs: number;
  readonly clientId?: string;
  readonly clientSecret?: string;
  readonly scope?: string;
  readonly audience?: string;
}

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

export function passwordGrant(options: IdpGrantOptions): PasswordGrant {
  return async (username, password): Promise<GrantedToken> => {
    try {
      const response = await requestToken({
        tokenUrl: options.tokenUrl,
        timeoutMs: options.timeoutMs,
        grant: {
          type: "password",
          username,
          password,
          ...(options.clientId === undefined || options.clientSecret === undefined
            ? {}
            : { clientId: options.clientId, clientSecret: options.clientSecret }),
        },
        ...(options.scope === undefined ? {} : { scope: options.scope }),
        ...(options.audience === undefined ? {} : { audience: options.audience }),
      });
      return { accessToken: response.accessToken, expiresInSec: response.expiresIn };
    } catch (error) {
      throw idpFailure(error);
    }
  };
}
