/** Options of the managed crypto API, validated once at construction. */

import type { CryptoClient } from "../../clients/crypto-service/client.ts";
import type { TokenCacheOptions } from "../../clients/idp/token-cache.ts";
import { positiveIntegerOption } from "../../core/positive-integer.ts";
import type { Logger } from "../../observability/logger.ts";
import type { RateLimit } from "./rate-limiter.ts";

export interface ManagedServerOptions {
  /** The identity provider's OAuth 2.0 token endpoint (password grant). */
  readonly idpTokenUrl: string;
  /** Optional client authentication and parameters of the password grant. */
  readonly idp?: {
    readonly clientId?: string;
    readonly clientSecret?: string;
    readonly scope?: string;
    readonly audience?: string;
    /** Default 5000 ms. */
    readonly timeoutMs?: number;
  };
  /** The upstream crypto service: a client, or its URL (then `upstreamTimeoutMs` applies). */
  readonly cryptoClient?: CryptoClient;
  readonly cryptoUrl?: string;
  /** Default 5000 ms. */
  readonly upstreamTimeoutMs?: number;
  /** PEM key and certificate: the API is served over HTTPS only. */
  readonly https: { readonly key: string | Buffer; readonly cert: string | Buffer };
  readonly rateLimit: RateLimit;
  readonly tokenCache?: Omit<TokenCacheOptions, "now">;
  /** Largest request body in bytes (default 1 MiB; 413 above). */
  readonly bodyLimit?: number;
  /** The process's logger, from its composition root. */
  readonly logger: Logger;
  /** Clock for the rate limiter and the token cache (tests). */
  readonly now?: () => number;
}

export class ManagedConfigError extends Error {
  readonly code = "managed_config_invalid";

  constructor(message: string) {
    super(`managed crypto API: ${message}`);
    this.name = "ManagedConfigError";
  }
}

function fail(message: string): never {
  throw new ManagedConfigError(message);
}

export function httpUrl(value: unknown, name: string): string {
  if (typeof value !== "string") fail(`${name} is required`);
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    fail(`${name} is not a URL`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") fail(`${name} must be http(s)`);
  if (url.username !== "" || url.password !== "") fail(`${name} must not carry credentials`);
  return url.href;
}

export function positiveInteger(value: unknown, name: string, fallback: number): number {
  return positiveIntegerOption(value, fallback, name, fail);
}

function positiveNumber(value: unknown, name: string): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0)
    fail(`${name} must be a positive number`);
  return value;
}

function pem(value: unknown, name: string): string | Buffer {
  if (!(typeof value === "string" || Buffer.isBuffer(value)) || value.length === 0) {
    fail(`https.${name} must be a PEM string or Buffer`);
  }
  return value;
}

export interface ResolvedManagedOptions {
  readonly idpTokenUrl: string;
  readonly idp: NonNullable<ManagedServerOptions["idp"]> & { readonly timeoutMs: number };
  readonly cryptoClient: CryptoClient | undefined;
  readonly cryptoUrl: string | undefined;
  readonly upstreamTimeoutMs: number;
  readonly https: { readonly key: string | Buffer; readonly cert: string | Buffer };
  readonly rateLimit: RateLimit;
  readonly tokenCache: Omit<TokenCacheOptions, "now">;
  readonly bodyLimit: number;
  readonly logger: Logger;
  readonly now: () => number;
}

export function resolveManagedOptions(options: ManagedServerOptions): ResolvedManagedOptions {
  if (typeof options !== "object" || options === null) fail("options are required");
  if ((options.cryptoClient === undefined) === (options.cryptoUrl === undefined)) {
    fail("give exactly one of cryptoClient or cryptoUrl");
  }
  if (options.cryptoClient !== undefined && typeof options.cryptoClient.decryptVerify !== "function") {
    fail("cryptoClient is not a crypto client");
  }
  const https = options.https;
  if (typeof https !== "object" || https === null) fail("https { key, cert } is required");
  const rateLimit = options.rateLimit;
  if (typeof rateLimit !== "object" || rateLimit === null)
    fail("rateLimit { perUserPerMinute, burst } is required");
  const burst = positiveInteger(rateLimit.burst, "rateLimit.burst", 1);
  const idp = options.idp ?? {};
  if ((idp.clientId === undefined) !== (idp.clientSecret === undefined)) {
    fail("idp.clientId and idp.clientSecret go together");
  }
  const tokenCache = options.tokenCache ?? {};
  if (tokenCache.refreshBeforeExpirySec !== undefined && !(tokenCache.refreshBeforeExpirySec >= 0)) {
    fail("tokenCache.refreshBeforeExpirySec must be non-negative");
  }
  positiveInteger(tokenCache.maxEntries, "tokenCache.maxEntries", 1);
  positiveInteger(tokenCache.defaultLifetimeSec, "tokenCache.defaultLifetimeSec", 1);
  if (options.now !== undefined && typeof options.now !== "function") fail("now must be a function");
  if (typeof options.logger?.info !== "function") fail("logger is required (the composition root's)");
  const bodyLimit = positiveInteger(options.bodyLimit, "bodyLimit", 1024 * 1024);
  if (bodyLimit < 1024) fail("bodyLimit must be at least 1024 bytes");
  return {
    idpTokenUrl: httpUrl(options.idpTokenUrl, "idpTokenUrl"),
    idp: { ...idp, timeoutMs: positiveInteger(idp.timeoutMs, "idp.timeoutMs", 5000) },
    cryptoClient: options.cryptoClient,
    cryptoUrl: options.cryptoUrl === undefined ? undefined : httpUrl(options.cryptoUrl, "cryptoUrl"),
    upstreamTimeoutMs: positiveInteger(options.upstreamTimeoutMs, "upstreamTimeoutMs", 5000),
    https: { key: pem(https.key, "key"), cert: pem(https.cert, "cert") },
    rateLimit: {
      perUserPerMinute: positiveNumber(rateLimit.perUserPerMinute, "rateLimit.perUserPerMinute"),
      burst,
    },
    tokenCache,
    bodyLimit,
    logger: options.logger,
    now: options.now ?? Date.now,
  };
}
