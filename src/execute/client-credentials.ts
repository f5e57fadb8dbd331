import { LRUCache } from "lru-cache";
import { type ClientCredentialsProfile, resolveSecret, type SecretResolver } from "./auth-profiles.ts";
import { type FetchLike, requestToken } from "./oauth-token-endpoint.ts";

export interface ClientCredentialsOptions {
  readonly fetch: FetchLike;
  readonly secretResolver: SecretResolver;
  /** Deadline of one token request; default 5 s. */
  readonly timeoutMs?: number;
  /** A token is renewed this long before it expires (at most half its lifetime); default 30 s. */
  readonly refreshSkewMs?: number;
  /** Lifetime assumed when the endpoint gives no expires_in; default 60 s. */
  readonly defaultLifetimeMs?: number;
  /** Most cached tokens; default 1000. */
  readonly maxEntries?: number;
  readonly now?: () => number;
}

/** Access tokens for client-credentials profiles: cached, and fetched once for concurrent callers. */
export interface ClientCredentialsTokens {
  getToken(profile: ClientCredentialsProfile): Promise<string>;
  /**
   * getToken, with the client secret it was obtained with (kept beside the cached token,
   * so responses can be scrubbed of it without loading it again).
   */
  getGrant(
    profile: ClientCredentialsProfile,
  ): Promise<{ readonly token: string; readonly clientSecret: string }>;
  /** Drops the cached token if it is still `token` (so a renewal by another caller is kept). */
  invalidate(profile: ClientCredentialsProfile, token: string): void;
  /** How many token requests were sent: for diagnostics and metrics. */
  readonly requestCount: number;
}

interface CachedToken {
  readonly token: string;
  readonly clientSecret: string;
  readonly renewAt: number;
}

/** A positive option with its default (token caches' lifetimes, skews, sizes). */
export function positive(name: string, value: number | undefined, fallback: number): number {
  const out = value ?? fallback;
  if (!Number.isFinite(out) || out <= 0) throw new TypeError(`${name} must be a positive number`);
  return out;
}

/** One cache entry per distinct grant: the same client asking for other scopes is another token. */
function cacheKey(profile: ClientCredentialsProfile): string {
  return JSON.stringify([
    profile.tokenUrl,
    profile.clientId,
    profile.clientSecretRef,
    [...profile.scopes].sort(),
    profile.audience ?? null,
    profile.clientAuth ?? null,
  ]);
}

export function createClientCredentialsTokens(options: ClientCredentialsOptions): ClientCredentialsTokens {
  const timeoutMs = positive("timeoutMs", options.timeoutMs, 5000);
  const refreshSkewMs = positive("refreshSkewMs", options.refreshSkewMs, 30_000);
  const defaultLifetimeMs = positive("defaultLifetimeMs", options.defaultLifetimeMs, 60_000);
  const maxEntries = positive("maxEntries", options.maxEntries, 1000);
  const now = options.now ?? Date.now;
  let requestCount = 0;

  async function fetchToken(profile: ClientCredentialsProfile): Promise<CachedToken> {
    // The secret is loaded only when a token must actually be requested.
    const clientSecret = await resolveSecret(options.secretResolver, profile.clientSecretRef);
    const params: Record<string, string> = { grant_type: "client_credentials" };
    if (profile.scopes.length > 0) params.scope = profile.scopes.join(" ");
    if (profile.audience !== undefined) params.audience = profile.audience;
    requestCount++;
    const started = now();
    const response = await requestToken({
      fetch: options.fetch,
      tokenUrl: profile.tokenUrl,
      clientId: profile.clientId,
      clientSecret,
      clientAuth: profile.clientAuth ?? "client_secret_basic",
      params,
      timeoutMs,
    });
    const lifetimeMs = response.expiresIn === undefined ? defaultLifetimeMs : response.expiresIn * 1000;
    return {
      token: response.accessToken,
      clientSecret,
      renewAt: started + lifetimeMs - Math.min(refreshSkewMs, lifetimeMs / 2),
    };
  }

  // lru-cache's fetch() is the single flight: concurrent misses for one key share one
  // request, and a failed request is not kept (the next caller asks again).
  const cache = new LRUCache<string, CachedToken, ClientCredentialsProfile>({
    max: maxEntries,
    // An entry evicted or invalidated while its request runs still answers the callers waiting on it.
    ignoreFetchAbort: true,
    fetchMethod: (_key, _stale, { context }) => fetchToken(context),
  });

  async function getGrant(profile: ClientCredentialsProfile) {
    const key = cacheKey(profile);
    const cached = cache.get(key);
    if (cached !== undefined && now() < cached.renewAt)
      return { token: cached.token, clientSecret: cached.clientSecret };
    // forceRefresh: the entry is due for renewal by `now` (the cache keeps no TTL of its own).
    const entry = await cache.fetch(key, { context: profile, forceRefresh: true });
    // Unreachable (fetchToken returns a token or throws); the type of fetch() allows undefined.
    if (entry === undefined) throw new TypeError("token request produced no token");
    return { token: entry.token, clientSecret: entry.clientSecret };
  }

  return {
    get requestCount() {
      return requestCount;
    },
    getToken: async (profile) => (await getGrant(profile)).token,
    getGrant,
    invalidate(profile, token) {
      const key = cacheKey(profile);
      if (cache.get(key)?.token === token) cache.delete(key);
    },
  };
}
