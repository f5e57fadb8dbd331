import { createHash, randomBytes } from "node:crypto";
import {
  grantRequired,
  type OAuthUserProfile,
  resolveSecret,
  type SecretResolver,
  type TokenSet,
  type TokenSetStore,
  unavailable,
} from "./auth-profiles.ts";
import { ExecutionError } from "./errors.ts";
import {
  type FetchLike,
  refusalCode,
  requestToken,
  revokeToken,
  type TokenResponse,
} from "./oauth-token-endpoint.ts";

/** What happened to a user's grant outside an admin action (for the audit log). */
export interface UserGrantEvent {
  readonly action: "refresh_failed";
  readonly tokenSetKey: string;
  /** `details.issue` of the failure, and the provider's `error` code when it refused. */
  readonly issue: string;
  readonly oauthError?: string;
}

export interface OAuthUserClientOptions {
  readonly fetch: FetchLike;
  readonly secretResolver: SecretResolver;
  readonly tokenSetStore: TokenSetStore;
  /** Deadline of one token request; default 5 s. */
  readonly timeoutMs?: number;
  /** An access token is refreshed this long before it expires (at most half its lifetime); default 30 s. */
  readonly refreshSkewMs?: number;
  readonly now?: () => number;
  /** Told of every failed refresh (audit); a throwing listener changes nothing. */
  readonly onEvent?: (event: UserGrantEvent) => void;
}

/** What a disconnect did at the provider. */
export type Revocation = "revoked" | "failed" | "not_supported" | "no_grant";

/** What the service may show about a stored grant: never a token. */
export interface TokenSetInfo {
  readonly expiresAt?: number;
  readonly scope?: string;
  readonly hasRefreshToken: boolean;
}

export interface StartAuthorizationInput {
  readonly profile: OAuthUserProfile;
  readonly redirectUri: string;
  /** Opaque, unguessable, bound by the caller to the user's session and checked on return. */
  readonly state: string;
}

export interface StartedAuthorization {
  readonly authorizationUrl: string;
  /** Keep server-side with `state` until the callback; never send it to the browser. */
  readonly codeVerifier: string;
}

export interface ExchangeCodeInput {
  readonly profile: OAuthUserProfile;
  readonly code: string;
  readonly codeVerifier: string;
  readonly redirectUri: string;
  readonly tokenSetKey: string;
}

export interface GrantRef {
  readonly profile: OAuthUserProfile;
  readonly tokenSetKey: string;
}

/** Authorization code + PKCE (RFC 7636, S256) and refresh for `oauth_user` profiles. */
export interface OAuthUserClient {
  startAuthorization(input: StartAuthorizationInput): StartedAuthorization;
  exchangeCode(input: ExchangeCodeInput): Promise<TokenSetInfo>;
  /** Forces a refresh with the stored refresh token. */
  refresh(input: GrantRef): Promise<TokenSetInfo>;
  /** A valid access token, refreshed first when it is (nearly) expired. */
  getAccessToken(input: GrantRef): Promise<string>;
  /** getAccessToken, with the grant's refresh token (so responses can be scrubbed of both). */
  currentTokens(input: GrantRef): Promise<{ readonly accessToken: string; readonly refreshToken?: string }>;
  /**
   * After the upstream refused `staleToken`: refresh unless someone already replaced it.
   * Undefined when no refresh is possible.
   */
  refreshIfCurrent(input: GrantRef & { readonly staleToken: string }): Promise<string | undefined>;
  /** What the service may show of the stored grant (never a token); undefined when there is none. */
  status(tokenSetKey: string): Promise<TokenSetInfo | undefined>;
  /**
   * Forgets the user's grant at once, then revokes it at the provider (RFC 7009) where the
   * profile names a revocation endpoint: the refresh token, then the access token.
   */
  disconnect(input: GrantRef): Promise<Revocation>;
}

const base64url = (bytes: Uint8Array): string => Buffer.from(bytes).toString("base64url");

/** RFC 7636 §4.1: 32 random octets → 43 base64url characters. */
export function createCodeVerifier(): string {
  return base64url(randomBytes(32));
}

/** RFC 7636 §4.2, S256. */
export function codeChallengeS256(verifier: string): string {
  return base64url(createHash("sha256").update(verifier, "ascii").digest());
}

const VERIFIER = /^[A-Za-z0-9._~-]{43,128}$/;

function info(tokenSet: TokenSet): TokenSetInfo {
  const out: { expiresAt?: number; scope?: string; hasRefreshToken: boolean } = {
    hasRefreshToken: tokenSet.refreshToken !== undefined,
  };
  if (tokenSet.expiresAt !== undefined) out.expiresAt = tokenSet.expiresAt;
  if (tokenSet.scope !== undefined) out.scope = tokenSet.scope;
  return out;
}

function checkRedirectUri(redirectUri: string): void {
  let url: URL;
  try {
    url = new URL(redirectUri);
  } catch {
    throw unavailable("redirect_uri_invalid");
  }
  if ((url.protocol !== "https:" && url.protocol !== "http:") || url.hash !== "") {
    throw unavailable("redirect_uri_invalid");
  }
}

export function createOAuthUserClient(options: OAuthUserClientOptions): OAuthUserClient {
  const timeoutMs = options.timeoutMs ?? 5000;
  const refreshSkewMs = options.refreshSkewMs ?? 30_000;
  if (!(timeoutMs > 0) || !(refreshSkewMs >= 0))
    throw new TypeError("timeoutMs and refreshSkewMs must be positive");
  const now = options.now ?? Date.now;
  const store = options.tokenSetStore;
  // Hand-written, not lru-cache fetch(): token sets live in the token-set store (persisted, rotated
  // refresh tokens), this only joins concurrent refreshes of one set (decision 1801).
  const refreshing = new Map<string, Promise<TokenSet>>();

  async function clientSecret(profile: OAuthUserProfile): Promise<string | undefined> {
    return profile.clientSecretRef === undefined
      ? undefined
      : await resolveSecret(options.secretResolver, profile.clientSecretRef);
  }

  async function grant(profile: OAuthUserProfile, params: Record<string, string>): Promise<TokenResponse> {
    const secret = await clientSecret(profile);
    return requestToken({
      fetch: options.fetch,
      tokenUrl: profile.tokenUrl,
      clientId: profile.clientId,
      ...(secret === undefined ? {} : { clientSecret: secret }),
      clientAuth: profile.clientAuth ?? "client_secret_basic",
      params,
      timeoutMs,
    });
  }

  function toTokenSet(response: TokenResponse, issuedAt: number, previous?: TokenSet): TokenSet {
    // RFC 6749 §6: a refresh may omit refresh_token, meaning the old one stays valid.
    const refreshToken = response.refreshToken ?? previous?.refreshToken;
    const scope = response.scope ?? previous?.scope;
    return {
      accessToken: response.accessToken,
      tokenType: "Bearer",
      ...(refreshToken === undefined ? {} : { refreshToken }),
      ...(response.expiresIn === undefined ? {} : { expiresAt: issuedAt + response.expiresIn * 1000 }),
      ...(scope === undefined ? {} : { scope }),
    };
  }

  async function load(key: string): Promise<TokenSet> {
    let tokenSet: TokenSet | undefined;
    try {
      tokenSet = await store.get(key);
    } catch {
      throw unavailable("token_store_unavailable");
    }
    if (tokenSet === undefined) throw grantRequired("user_grant_missing");
    return tokenSet;
  }

  async function save(key: string, tokenSet: TokenSet): Promise<void> {
    try {
      await store.put(key, tokenSet);
    } catch {
      throw unavailable("token_store_unavailable");
    }
  }

  function report(event: UserGrantEvent): void {
    try {
      options.onEvent?.(event);
    } catch {
      // Audit is the listener's business; the grant's outcome stands.
    }
  }

  /**
   * Revokes the grant: its refresh token (RFC 7009 §2.1: the provider drops the grant's access
   * tokens with it), else the access token; then the access token, best effort (providers
   * refuse self-contained ones). "failed" when the provider would not revoke the grant.
   */
  async function revokeAll(profile: OAuthUserProfile, tokenSet: TokenSet): Promise<Revocation> {
    const url = profile.revocationUrl;
    if (url === undefined) return "not_supported";
    const secret = await clientSecret(profile).catch(() => undefined);
    const revoke = (token: string, tokenTypeHint: "refresh_token" | "access_token") =>
      revokeToken({
        fetch: options.fetch,
        revocationUrl: url,
        clientId: profile.clientId,
        ...(secret === undefined ? {} : { clientSecret: secret }),
        clientAuth: profile.clientAuth ?? "client_secret_basic",
        token,
        tokenTypeHint,
        timeoutMs,
      });
    try {
      if (tokenSet.refreshToken === undefined) await revoke(tokenSet.accessToken, "access_token");
      else {
        await revoke(tokenSet.refreshToken, "refresh_token");
        await revoke(tokenSet.accessToken, "access_token").catch(() => undefined);
      }
      return "revoked";
    } catch {
      return "failed";
    }
  }

  function isFresh(tokenSet: TokenSet): boolean {
    if (tokenSet.expiresAt === undefined) return true;
    return now() < tokenSet.expiresAt - refreshSkewMs;
  }

  /**
   * Single-flight per grant: concurrent callers share one refresh, because refresh tokens
   * may rotate and work once. `seen` is the token set the caller judged stale; if the
   * stored one has changed since (a refresh finished in between), that one is used.
   */
  function refreshShared(profile: OAuthUserProfile, key: string, seen: TokenSet): Promise<TokenSet> {
    const pending = refreshing.get(key);
    if (pending !== undefined) return pending;
    const started = (async () => {
      const latest = await load(key);
      if (latest.accessToken !== seen.accessToken) return latest;
      const refreshToken = latest.refreshToken;
      if (refreshToken === undefined) throw grantRequired("user_grant_expired");
      const issuedAt = now();
      let response: TokenResponse;
      try {
        response = await grant(profile, { grant_type: "refresh_token", refresh_token: refreshToken });
      } catch (error) {
        const oauthError = refusalCode(error);
        const issue =
          error instanceof ExecutionError ? String(error.details?.issue ?? error.reason) : "failed";
        report({ action: "refresh_failed", tokenSetKey: key, issue, ...(oauthError ? { oauthError } : {}) });
        // A refused refresh token is dead: forget the grant so the user is asked to
        // reconnect, unless another process has stored a newer grant meanwhile.
        if (oauthError === "invalid_grant") {
          const stored = await store.get(key).catch(() => undefined);
          if (stored?.refreshToken === refreshToken) await store.delete(key).catch(() => undefined);
          throw grantRequired("user_grant_expired", oauthError);
        }
        throw error;
      }
      const next = toTokenSet(response, issuedAt, latest);
      let current: TokenSet | undefined;
      try {
        current = await store.get(key);
      } catch {
        throw unavailable("token_store_unavailable");
      }
      // Disconnected while the refresh was in flight: the new tokens are not kept (nor used).
      if (current === undefined) {
        await revokeAll(profile, next);
        throw grantRequired("user_grant_missing");
      }
      // Another process stored a newer set meanwhile: that one stands.
      if (current.refreshToken !== refreshToken) return current;
      await save(key, next);
      return next;
    })().finally(() => refreshing.delete(key));
    refreshing.set(key, started);
    return started;
  }

  return {
    startAuthorization({ profile, redirectUri, state }) {
      if (typeof state !== "string" || state.length < 16) throw unavailable("state_invalid");
      checkRedirectUri(redirectUri);
      const codeVerifier = createCodeVerifier();
      const url = new URL(profile.authorizationUrl);
      url.searchParams.set("response_type", "code");
      url.searchParams.set("client_id", profile.clientId);
      url.searchParams.set("redirect_uri", redirectUri);
      if (profile.scopes.length > 0) url.searchParams.set("scope", profile.scopes.join(" "));
      if (profile.audience !== undefined) url.searchParams.set("audience", profile.audience);
      url.searchParams.set("state", state);
      url.searchParams.set("code_challenge", codeChallengeS256(codeVerifier));
      url.searchParams.set("code_challenge_method", "S256");
      return { authorizationUrl: url.toString(), codeVerifier };
    },

    async exchangeCode({ profile, code, codeVerifier, redirectUri, tokenSetKey }) {
      if (typeof code !== "string" || code.length === 0 || code.length > 4096)
        throw unavailable("code_invalid");
      if (!VERIFIER.test(codeVerifier)) throw unavailable("code_verifier_invalid");
      checkRedirectUri(redirectUri);
      const issuedAt = now();
      const response = await grant(profile, {
        grant_type: "authorization_code",
        code,
        redirect_uri: redirectUri,
        code_verifier: codeVerifier,
      });
      const tokenSet = toTokenSet(response, issuedAt);
      await save(tokenSetKey, tokenSet);
      return info(tokenSet);
    },

    async refresh({ profile, tokenSetKey }) {
      return info(await refreshShared(profile, tokenSetKey, await load(tokenSetKey)));
    },

    async getAccessToken({ profile, tokenSetKey }) {
      const tokenSet = await load(tokenSetKey);
      if (isFresh(tokenSet)) return tokenSet.accessToken;
      return (await refreshShared(profile, tokenSetKey, tokenSet)).accessToken;
    },

    async currentTokens({ profile, tokenSetKey }) {
      const stored = await load(tokenSetKey);
      const tokenSet = isFresh(stored) ? stored : await refreshShared(profile, tokenSetKey, stored);
      return tokenSet.refreshToken === undefined
        ? { accessToken: tokenSet.accessToken }
        : { accessToken: tokenSet.accessToken, refreshToken: tokenSet.refreshToken };
    },

    async refreshIfCurrent({ profile, tokenSetKey, staleToken }) {
      const tokenSet = await load(tokenSetKey);
      if (tokenSet.accessToken !== staleToken) return tokenSet.accessToken;
      if (tokenSet.refreshToken === undefined) return undefined;
      return (await refreshShared(profile, tokenSetKey, tokenSet)).accessToken;
    },

    async status(tokenSetKey) {
      let tokenSet: TokenSet | undefined;
      try {
        tokenSet = await store.get(tokenSetKey);
      } catch {
        throw unavailable("token_store_unavailable");
      }
      return tokenSet === undefined ? undefined : info(tokenSet);
    },

    async disconnect({ profile, tokenSetKey }) {
      let tokenSet: TokenSet | undefined;
      try {
        tokenSet = await store.get(tokenSetKey);
        // Forgotten first: the grant is unusable here whatever the provider answers.
        await store.delete(tokenSetKey);
      } catch {
        throw unavailable("token_store_unavailable");
      }
      if (tokenSet === undefined) return "no_grant";
      return revokeAll(profile, tokenSet);
    },
  };
}
