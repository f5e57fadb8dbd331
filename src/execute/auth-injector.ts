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

export interface AuthContext {
  /** The TokenSetStore key of the user's grant; required for oauth_user profiles. */
  readonly userTokenKey?: string;
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
}

/**
 * Turns a profile into request credentials. Secrets are resolved here and only here,
 * which the executor calls after input validation and constraint checks passed.
 */
export function createAuthInjector(options: AuthInjectorOptions): AuthInjector {
  const { secretResolver, clientCredentials, oauthUser } = options;
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
          const key = context.userTokenKey;
          if (key === undefined || key.length === 0) throw unavailable("user_grant_missing");
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
              ...(clientSecret === undefined
                ? []
                : [clientSecret, ...basicForms(profile.clientId, clientSecret)]),
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
      }
    },
  };
}
