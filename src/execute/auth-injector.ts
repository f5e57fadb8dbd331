/**
 * Turns a validated auth profile into the credentials of one upstream request. Kept apart
 * from the profile definitions (auth-profiles.ts), which the token clients import: the
 * injector imports the token clients, so profiles → clients → injector has no cycle.
 */
import {
  type AuthProfile,
  headerSafe,
  parseAuthProfile,
  resolveSecret,
  type SecretResolver,
  unavailable,
} from "./auth-profiles.ts";
import type { ClientCredentialsTokens } from "./client-credentials.ts";
import type { OAuthUserClient } from "./oauth-user.ts";
import type { EndUserToken, TokenExchangeTokens } from "./token-exchange.ts";
import { userGrantKey } from "./token-set-store.ts";

/** What a profile adds to one upstream request. */
export interface InjectedCredentials {
  readonly headers: Readonly<Record<string, string>>;
  readonly query: Readonly<Record<string, string>>;
}

/** Credentials for one execution, and a single chance to renew them after a 401. */
export interface AuthSession {
  readonly credentials: InjectedCredentials;
  /**
   * The profile's secrets beyond what `credentials` injects (client secret, refresh token,
   * the raw token inside `Bearer …`): scrubbed from responses with the injected values.
   */
  readonly secrets: readonly string[];
  /** New credentials after the upstream answered 401, or undefined when renewal cannot help. */
  renew(): Promise<InjectedCredentials | undefined>;
}

/**
 * The end user a call is made for, as the runtime path authenticated them (binding invoke:
 * the derived subject and its user assertion; MCP: the caller and its bearer token).
 */
export interface EndUser {
  /** The policy-owner partner: grants are kept per partner, profile and subject. */
  readonly partnerId: string;
  readonly subjectId: string;
  /** The user's own verified token: exchanged (RFC 8693), never forwarded. */
  readonly token?: EndUserToken;
}

export interface AuthContext {
  /** Required for oauth_user and oauth_token_exchange profiles. */
  readonly endUser?: EndUser;
}

export interface AuthInjector {
  open(profile: AuthProfile, context: AuthContext): Promise<AuthSession>;
}

function bearer(token: string): InjectedCredentials {
  return { headers: { authorization: `Bearer ${headerSafe(token)}` }, query: {} };
}

const noRenewal = async (): Promise<undefined> => undefined;

/** The Basic header value a client_secret_basic token request carries (RFC 6749 §2.3.1). */
function basicForms(clientId: string, clientSecret: string): string[] {
  const form = (value: string) => new URLSearchParams([["", value]]).toString().slice(1);
  const pair = `${form(clientId)}:${form(clientSecret)}`;
  return [`Basic ${Buffer.from(pair).toString("base64")}`];
}

export interface AuthInjectorOptions {
  readonly secretResolver: SecretResolver;
  readonly clientCredentials: ClientCredentialsTokens;
  readonly oauthUser: OAuthUserClient;
  readonly tokenExchange: TokenExchangeTokens;
}

const clientSecretForms = (clientId: string, clientSecret: string | undefined): string[] =>
  clientSecret === undefined ? [] : [clientSecret, ...basicForms(clientId, clientSecret)];

/** The key of the user's grant for this profile; without an end user there is none to use. */
function grantKeyOf(profile: AuthProfile, context: AuthContext): string {
  const user = context.endUser;
  if (user === undefined) throw unavailable("end_user_unknown");
  return userGrantKey(user.partnerId, profile.id, user.subjectId);
}

/**
 * Turns a profile into request credentials. Secrets are resolved here and only here,
 * which the executor calls after input validation and constraint checks passed.
 */
export function createAuthInjector(options: AuthInjectorOptions): AuthInjector {
  const { secretResolver, clientCredentials, oauthUser, tokenExchange } = options;
  return {
    async open(unchecked, context) {
      let profile: AuthProfile;
      try {
        // Profiles come from the Store or the admin API: checked on every use, not trusted by type.
        profile = parseAuthProfile(unchecked);
      } catch {
        throw unavailable("auth_profile_invalid");
      }
      switch (profile.type) {
        case "none":
          return { credentials: { headers: {}, query: {} }, secrets: [], renew: noRenewal };
        case "static": {
          const secret = headerSafe(await resolveSecret(secretResolver, profile.secretRef));
          if (profile.kind === "bearer")
            return { credentials: bearer(secret), secrets: [secret], renew: noRenewal };
          const credentials: InjectedCredentials =
            profile.in === "header"
              ? { headers: { [profile.name.toLowerCase()]: secret }, query: {} }
              : { headers: {}, query: { [profile.name]: secret } };
          return { credentials, secrets: [secret], renew: noRenewal };
        }
        case "oauth_client_credentials": {
          // The client secret never goes to the API, but an upstream that knows it could echo it.
          const { token, clientSecret } = await clientCredentials.getGrant(profile);
          let renewed = false;
          return {
            credentials: bearer(token),
            secrets: [token, clientSecret, ...basicForms(profile.clientId, clientSecret)],
            async renew() {
              if (renewed) return undefined;
              renewed = true;
              // Only this token is dropped: concurrent executions that already renewed keep theirs.
              clientCredentials.invalidate(profile, token);
              return bearer(await clientCredentials.getToken(profile));
            },
          };
        }
        case "oauth_user": {
          const key = grantKeyOf(profile, context);
          const [tokens, clientSecret] = await Promise.all([
            oauthUser.currentTokens({ profile, tokenSetKey: key }),
            profile.clientSecretRef === undefined
              ? undefined
              : resolveSecret(secretResolver, profile.clientSecretRef),
          ]);
          const token = tokens.accessToken;
          let renewed = false;
          return {
            credentials: bearer(token),
            secrets: [
              token,
              ...(tokens.refreshToken === undefined ? [] : [tokens.refreshToken]),
              ...clientSecretForms(profile.clientId, clientSecret),
            ],
            async renew() {
              if (renewed) return undefined;
              renewed = true;
              const fresh = await oauthUser.refreshIfCurrent({
                profile,
                tokenSetKey: key,
                staleToken: token,
              });
              return fresh === undefined ? undefined : bearer(fresh);
            },
          };
        }
        case "oauth_token_exchange": {
          const key = grantKeyOf(profile, context);
          const userToken = context.endUser?.token;
          if (userToken === undefined) throw unavailable("user_token_missing");
          const { token, clientSecret } = await tokenExchange.getToken(profile, key, userToken);
          let renewed = false;
          return {
            credentials: bearer(token),
            // The user's own token is never sent upstream; an upstream that knew it could echo it.
            secrets: [token, userToken.value, ...clientSecretForms(profile.clientId, clientSecret)],
            async renew() {
              if (renewed) return undefined;
              renewed = true;
              tokenExchange.invalidate(profile, key, token);
              return bearer((await tokenExchange.getToken(profile, key, userToken)).token);
            },
          };
        }
      }
    },
  };
}
