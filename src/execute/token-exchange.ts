/**
 * On-behalf-of tokens (RFC 8693 token exchange) for `oauth_token_exchange` profiles: the end
 * user's verified token is exchanged at the provider's token endpoint for an access token
 * scoped to the upstream (audience, resource, scope of the profile). The user's own token is
 * sent only there, never to the upstream. Exchanged tokens live in memory only, one per user
 * and grant, until they (or the user's token) expire.
 */
import { createHash } from "node:crypto";
import { LRUCache } from "lru-cache";
import {
  resolveSecret,
  type SecretResolver,
  SUBJECT_TOKEN_TYPES,
  type TokenExchangeProfile,
  unavailable,
} from "./auth-profiles.ts";
import { positive } from "./client-credentials.ts";
import { type FetchLike, requestToken } from "./oauth-token-endpoint.ts";

export const TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN_TYPE = SUBJECT_TOKEN_TYPES.access_token;

/** The end user a call is made for, as the runtime path authenticated them. */
export interface EndUserToken {
  /** The verified token itself (binding invoke's user assertion, the MCP caller's bearer). */
  readonly value: string;
  /** Epoch ms at which it expires: an exchanged token is never kept longer. */
  readonly expiresAt?: number;
}

export interface TokenExchangeOptions {
  readonly fetch: FetchLike;
  readonly secretResolver: SecretResolver;
  /** Deadline of one token request; default 5 s. */
  readonly timeoutMs?: number;
  /** A token is renewed this long before it expires (at most half its lifetime); default 30 s. */
  readonly refreshSkewMs?: number;
  /** Lifetime assumed when the provider gives no expires_in; default 60 s. */
  readonly defaultLifetimeMs?: number;
  /** Most cached tokens; default 10 000. */
  readonly maxEntries?: number;
  readonly now?: () => number;
}

export interface ExchangedToken {
  readonly token: string;
  /** The client secret the exchange used (scrubbed from answers with the token). */
  readonly clientSecret?: string;
}

export interface TokenExchangeTokens {
  /** A token for `userKey` (whose grant it is) at the profile's audience; cached until expiry. */
  getToken(profile: TokenExchangeProfile, userKey: string, user: EndUserToken): Promise<ExchangedToken>;
  /** Drops the cached token if it is still `token` (the upstream refused it). */
  invalidate(profile: TokenExchangeProfile, userKey: string, token: string): void;
  /** Drops every cached token of `userKey`, or of every key under `userKey/` (revocation). */
  drop(userKey: string): number;
  readonly size: number;
}

interface CachedToken extends ExchangedToken {
  readonly userKey: string;
  readonly renewAt: number;
}

interface FetchContext {
  readonly profile: TokenExchangeProfile;
  readonly userKey: string;
  readonly user: EndUserToken;
}

/** One entry per user and distinct grant (endpoint, client, audience, resource, scopes). Hashed: no token in a key. */
function cacheKey(profile: TokenExchangeProfile, userKey: string): string {
  return createHash("sha256")
    .update(
      JSON.stringify([
        userKey,
        profile.tokenUrl,
        profile.clientId,
        profile.clientSecretRef ?? null,
        [...profile.scopes].sort(),
        profile.audience ?? null,
        profile.resource ?? null,
        profile.subjectTokenType ?? null,
        profile.clientAuth ?? null,
      ]),
    )
    .digest("base64url");
}

export function createTokenExchangeTokens(options: TokenExchangeOptions): TokenExchangeTokens {
  const timeoutMs = positive("timeoutMs", options.timeoutMs, 5000);
  const refreshSkewMs = positive("refreshSkewMs", options.refreshSkewMs, 30_000);
  const defaultLifetimeMs = positive("defaultLifetimeMs", options.defaultLifetimeMs, 60_000);
  const maxEntries = positive("maxEntries", options.maxEntries, 10_000);
  const now = options.now ?? Date.now;

  async function exchange({ profile, userKey, user }: FetchContext): Promise<CachedToken> {
    const clientSecret =
      profile.clientSecretRef === undefined
        ? undefined
        : await resolveSecret(options.secretResolver, profile.clientSecretRef);
    const params: Record<string, string> = {
      grant_type: TOKEN_EXCHANGE_GRANT,
      subject_token: user.value,
      subject_token_type: SUBJECT_TOKEN_TYPES[profile.subjectTokenType ?? "access_token"],
      requested_token_type: ACCESS_TOKEN_TYPE,
    };
    if (profile.audience !== undefined) params.audience = profile.audience;
    if (profile.resource !== undefined) params.resource = profile.resource;
    if (profile.scopes.length > 0) params.scope = profile.scopes.join(" ");
    const started = now();
    const response = await requestToken({
      fetch: options.fetch,
      tokenUrl: profile.tokenUrl,
      clientId: profile.clientId,
      ...(clientSecret === undefined ? {} : { clientSecret }),
      clientAuth: profile.clientAuth ?? "client_secret_basic",
      params,
      timeoutMs,
    });
    // RFC 8693 §2.2.1: anything but an access token (an ID token, a SAML assertion) is not injected.
    if (response.issuedTokenType !== undefined && response.issuedTokenType !== ACCESS_TOKEN_TYPE)
      throw unavailable("issued_token_type_unsupported");
    const lifetimeMs = response.expiresIn === undefined ? defaultLifetimeMs : response.expiresIn * 1000;
    const expiresAt = Math.min(started + lifetimeMs, user.expiresAt ?? Number.POSITIVE_INFINITY);
    return {
      token: response.accessToken,
      ...(clientSecret === undefined ? {} : { clientSecret }),
      userKey,
      renewAt: expiresAt - Math.min(refreshSkewMs, Math.max(0, expiresAt - started) / 2),
    };
  }

  // lru-cache's fetch() is the single flight per user and grant; a failure is not kept.
  const cache = new LRUCache<string, CachedToken, FetchContext>({
    max: maxEntries,
    ignoreFetchAbort: true,
    fetchMethod: (_key, _stale, { context }) => exchange(context),
  });

  const publicPart = (entry: CachedToken): ExchangedToken =>
    entry.clientSecret === undefined
      ? { token: entry.token }
      : { token: entry.token, clientSecret: entry.clientSecret };

  return {
    async getToken(profile, userKey, user) {
      if (typeof user?.value !== "string" || user.value.length === 0) throw unavailable("user_token_missing");
      if (user.expiresAt !== undefined && now() >= user.expiresAt) throw unavailable("user_token_expired");
      const key = cacheKey(profile, userKey);
      const cached = cache.get(key);
      if (cached !== undefined && now() < cached.renewAt) return publicPart(cached);
      const entry = await cache.fetch(key, { context: { profile, userKey, user }, forceRefresh: true });
      if (entry === undefined) throw new TypeError("token exchange produced no token");
      return publicPart(entry);
    },
    invalidate(profile, userKey, token) {
      const key = cacheKey(profile, userKey);
      if (cache.get(key)?.token === token) cache.delete(key);
    },
    drop(userKey) {
      let dropped = 0;
      for (const [key, entry] of cache.entries()) {
        if (entry.userKey === userKey || entry.userKey.startsWith(`${userKey}/`)) {
          cache.delete(key);
          dropped++;
        }
      }
      return dropped;
    },
    get size() {
      return cache.size;
    },
  };
}
