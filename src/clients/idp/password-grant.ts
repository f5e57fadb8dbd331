/**
 * The OAuth 2.0 password grant (form encoded) against an identity provider's token
 * endpoint, as a `PasswordGrant` the token cache calls. Failures are the token client's
 * `TokenRequestError`s; each caller maps them to its own reasons (the managed API to its
 * `idp_*` reasons, the authority's policy protection to `policy_protection_unavailable`).
 */

import { requestToken } from "../../identity/token-client.ts";
import type { GrantedToken, PasswordGrant } from "./token-cache.ts";

export interface IdpGrantOptions {
  readonly tokenUrl: string;
  readonly timeoutMs: number;
  readonly clientId?: string;
  readonly clientSecret?: string;
  readonly scope?: string;
  readonly audience?: string;
}

export function passwordGrant(options: IdpGrantOptions): PasswordGrant {
  return async (username, password): Promise<GrantedToken> => {
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
  };
}
