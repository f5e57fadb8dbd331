import {
  createLocalJWKSet,
  decodeProtectedHeader,
  errors,
  type FlattenedJWSInput,
  type JSONWebKeySet,
  type JWSHeaderParameters,
  type JWTPayload,
  type JWTVerifyGetKey,
  jwtVerify,
} from "jose";
import { checkJsonBounds, type JsonLimits } from "../core/bounded-json.ts";
import type { JsonFetch } from "../core/json-fetch.ts";
import { positiveIntegerOption } from "../core/positive-integer.ts";
import {
  readAudience,
  readClientId,
  readPartnerClaim,
  readRoles,
  readScopes,
  readTenantClaim,
} from "./claims.ts";
import { IdentityConfigError, TokenVerificationError } from "./errors.ts";

/**
 * The one JWT verifier behind every path (admin bearer tokens, subject tokens, workload
 * tokens, partner user assertions, the sidecar), following RFC 8725: an explicit
 * asymmetric algorithm allowlist, keys only from the configured JWKS by `kid`, exact
 * issuer and audience, time claims with a bounded tolerance, typed use and tenant.
 */

/** Asymmetric JWS algorithms jose implements. `none` and every HS* are never accepted. */
export const supportedAlgorithms = [
  "ES256",
  "ES384",
  "ES512",
  "RS256",
  "RS384",
  "RS512",
  "PS256",
  "PS384",
  "PS512",
  "EdDSA",
  "Ed25519",
  "ML-DSA-44",
  "ML-DSA-65",
  "ML-DSA-87",
] as const;

export const defaultAlgorithms: readonly string[] = ["ES256", "RS256", "EdDSA", "PS256"];

export interface RemoteJwksOptions {
  readonly url: string | URL;
  /**
   * Sends the key-set request. A URL a partner configured (a binding's `jwks_url`) is always
   * fetched through the egress gate's fetch (src/execute/egress.ts); without one, fetch as is:
   * only for the operator's own configured issuers (the sidecar gives its node:http transport).
   */
  readonly fetch?: JsonFetch;
  /** Abort a JWKS fetch after this long (default 5000 ms). */
  readonly timeoutMs?: number;
  /** Minimum time between refetches triggered by an unknown `kid` (default 10000 ms). */
  readonly cooldownMs?: number;
  /** Refetch the JWKS once it is this old (default 300000 ms): bounds how long a removed key lives. */
  readonly cacheMaxAgeMs?: number;
}

export interface JwtVerifierOptions {
  readonly issuer: string;
  readonly audience: string | readonly string[];
  /** A JWKS URL (remote, cached), remote options, or a local JWKS object. */
  readonly jwks: string | URL | RemoteJwksOptions | JSONWebKeySet;
  readonly algorithms?: readonly string[];
  readonly clockToleranceSec?: number;
  readonly maxTokenAgeSec?: number;
  /** Required value of the `token_use` claim (e.g. "access"). */
  readonly requireTokenUse?: string;
  /** Claim carrying the tenant. With `tenant` the value must match; alone it must be present. */
  readonly tenantClaim?: string;
  /** Claim carrying the partner (default `partner_id`): absent, or exactly one partner id. */
  readonly partnerClaim?: string;
  /** Claim carrying the roles (default `roles`): absent, or a non-empty array of role names. */
  readonly rolesClaim?: string;
  readonly tenant?: string | readonly string[];
  readonly requiredScopes?: readonly string[];
  readonly maxTokenLength?: number;
  /** Accepted `typ` header values (e.g. ["at+jwt"]); any when unset. */
  readonly allowedTypes?: readonly string[];
  /** Clock for tests. */
  readonly now?: () => Date;
}

export interface VerifiedToken {
  readonly subject: string;
  readonly issuer: string;
  readonly audience: readonly string[];
  readonly clientId?: string;
  readonly scopes: readonly string[];
  readonly tenant?: string;
  /**
   * The partner the token names (its partner claim, strictly read: a malformed claim made the
   * token invalid). The one place a partner is read from a token: never from `claims`.
   */
  readonly partnerId?: string;
  readonly roles: readonly string[];
  readonly tokenUse?: string;
  readonly expiresAt: Date;
  readonly jwtId?: string;
  readonly claims: Readonly<JWTPayload>;
  /**
   * Whether the token may stand for `platform_vouched` subjects (src/core/subject-identity.ts).
   * Set by the trusted-issuers verifier from its issuer's setting; absent from a lone
   * verifier, whose one issuer is the platform's own (read as true).
   */
  readonly vouchable?: boolean;
}

/** What the verifier knows of its key set, for diagnostics (no key material). */
export interface JwksStatus {
  readonly source: "remote" | "inline";
  /** `ok`: the last key lookup had a key set; `failed`: it could not be fetched; `not_fetched`: none yet. */
  readonly state: "ok" | "failed" | "not_fetched";
  /** Keys in the key set held now; null when none is held. */
  readonly key_count: number | null;
  /** When the last lookup that needed the key set ended; null before the first. */
  readonly checked_at: string | null;
}

export interface JwtVerifier {
  readonly issuer: string;
  verify(token: string): Promise<VerifiedToken>;
  /** The key set's state (createJwtVerifier's verifiers have it; wrappers may not). */
  jwksStatus?(): JwksStatus;
  /**
   * Fetches the JWKS now (a remote one), so the first token does not wait for it; rejects with
   * `jwks_unavailable` when it cannot be fetched. A local JWKS resolves at once.
   */
  warm?(): Promise<void>;
}

const DEFAULT_TENANT_CLAIM = "tenant";
const DEFAULT_PARTNER_CLAIM = "partner_id";
const DEFAULT_ROLES_CLAIM = "roles";
const MAX_KID_LENGTH = 256;
/** Three base64url segments; the signature may be empty so `alg: none` is reported as such. */
const COMPACT_JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;

interface ResolvedOptions {
  readonly issuer: string;
  readonly audience: string[];
  readonly algorithms: string[];
  readonly clockToleranceSec: number;
  readonly maxTokenAgeSec: number | undefined;
  readonly requireTokenUse: string | undefined;
  readonly tenantClaim: string;
  readonly partnerClaim: string;
  readonly rolesClaim: string;
  readonly enforceTenant: boolean;
  readonly tenants: string[] | undefined;
  readonly requiredScopes: string[];
  readonly maxTokenLength: number;
  readonly allowedTypes: string[] | undefined;
  readonly now: () => Date;
}

function fail(message: string): never {
  throw new IdentityConfigError(`jwt verifier: ${message}`);
}

function nonEmptyString(value: unknown, name: string): string {
  if (typeof value !== "string" || value.length === 0) fail(`${name} must be a non-empty string`);
  return value;
}

function stringList(value: unknown, name: string): string[] {
  const list = typeof value === "string" ? [value] : value;
  if (!Array.isArray(list) || list.length === 0) fail(`${name} must be a non-empty string or list`);
  return list.map((v: unknown) => nonEmptyString(v, name));
}

function nonNegative(value: unknown, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    fail(`${name} must be a non-negative number`);
  }
  return value;
}

function resolveOptions(options: JwtVerifierOptions): ResolvedOptions {
  if (typeof options !== "object" || options === null) fail("options are required");
  const algorithms =
    options.algorithms === undefined ? [...defaultAlgorithms] : stringList(options.algorithms, "algorithms");
  for (const alg of algorithms) {
    if (!(supportedAlgorithms as readonly string[]).includes(alg)) {
      fail(`algorithm ${JSON.stringify(alg)} is not an allowed asymmetric algorithm`);
    }
  }
  const maxTokenLength = nonNegative(options.maxTokenLength, "maxTokenLength", 8192);
  if (!Number.isInteger(maxTokenLength) || maxTokenLength < 64)
    fail("maxTokenLength must be an integer >= 64");
  const maxTokenAgeSec =
    options.maxTokenAgeSec === undefined
      ? undefined
      : nonNegative(options.maxTokenAgeSec, "maxTokenAgeSec", 0);
  if (options.now !== undefined && typeof options.now !== "function") fail("now must be a function");
  return {
    issuer: nonEmptyString(options.issuer, "issuer"),
    audience: stringList(options.audience, "audience"),
    algorithms,
    clockToleranceSec: nonNegative(options.clockToleranceSec, "clockToleranceSec", 30),
    maxTokenAgeSec,
    requireTokenUse:
      options.requireTokenUse === undefined
        ? undefined
        : nonEmptyString(options.requireTokenUse, "requireTokenUse"),
    tenantClaim:
      options.tenantClaim === undefined
        ? DEFAULT_TENANT_CLAIM
        : nonEmptyString(options.tenantClaim, "tenantClaim"),
    partnerClaim:
      options.partnerClaim === undefined
        ? DEFAULT_PARTNER_CLAIM
        : nonEmptyString(options.partnerClaim, "partnerClaim"),
    rolesClaim:
      options.rolesClaim === undefined
        ? DEFAULT_ROLES_CLAIM
        : nonEmptyString(options.rolesClaim, "rolesClaim"),
    enforceTenant: options.tenantClaim !== undefined || options.tenant !== undefined,
    tenants: options.tenant === undefined ? undefined : stringList(options.tenant, "tenant"),
    requiredScopes:
      options.requiredScopes === undefined
        ? []
        : (options.requiredScopes as unknown[]).map((s) => nonEmptyString(s, "requiredScopes")),
    maxTokenLength,
    allowedTypes:
      options.allowedTypes === undefined
        ? undefined
        : stringList(options.allowedTypes, "allowedTypes").map(normalizeTyp),
    now: options.now ?? (() => new Date()),
  };
}

/** RFC 7515 §4.1.9: `typ` omits the "application/" prefix; compare case-insensitively. */
function normalizeTyp(typ: string): string {
  const lower = typ.toLowerCase();
  return lower.startsWith("application/") ? lower.slice("application/".length) : lower;
}

function isJwks(value: unknown): value is JSONWebKeySet {
  return typeof value === "object" && value !== null && Array.isArray((value as { keys?: unknown }).keys);
}

function parseJwksUrl(url: string | URL): URL {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    fail("jwks URL is not a valid URL");
  }
  if (parsed.protocol !== "https:" && parsed.protocol !== "http:") fail("jwks URL must be http(s)");
  if (parsed.username !== "" || parsed.password !== "") fail("jwks URL must not carry credentials");
  return parsed;
}

function positiveInt(value: unknown, name: string, fallback: number): number {
  return positiveIntegerOption(nonNegative(value, name, fallback), fallback, name, fail);
}

/** A remote key set as jose's createRemoteJWKSet keeps one, fetched through a JsonFetch. */
interface RemoteKeySet {
  (header: JWSHeaderParameters, token: FlattenedJWSInput): ReturnType<JWTVerifyGetKey>;
  readonly fresh: boolean;
  reload(): Promise<void>;
  keyCount(): number | undefined;
}

/**
 * The remote key set: refetched once older than `cacheMaxAgeMs`, and for an unknown `kid` at
 * most once per `cooldownMs`, counted from the last request, answered or not (jose counts from
 * the last answer: an issuer failing got a request per token naming a random kid, 3121);
 * concurrent reloads share one request. Not jose's createRemoteJWKSet: it builds a `Headers`,
 * which loads undici (decision 3081).
 */
function remoteKeySet(
  url: URL,
  options: { fetch: JsonFetch; timeoutMs: number; cooldownMs: number; cacheMaxAgeMs: number },
): RemoteKeySet {
  let local: ReturnType<typeof createLocalJWKSet> | undefined;
  let keyCount: number | undefined;
  let fetchedAt = Number.NEGATIVE_INFINITY;
  let requestedAt = Number.NEGATIVE_INFINITY;
  let pending: Promise<void> | undefined;
  /** The last request's failure, until a request succeeds. */
  let lastFailure: unknown;
  const within = (ms: number) => Date.now() < fetchedAt + ms;
  const fetchKeySet = async () => {
    const answer = await options.fetch(url.href, {
      method: "GET",
      headers: { accept: "application/json, application/jwk-set+json" },
      redirect: "manual",
      signal: AbortSignal.timeout(options.timeoutMs),
    });
    if (answer.status !== 200) {
      await answer.body?.cancel();
      throw new Error(`the JSON Web Key Set answer was ${answer.status}, not 200`);
    }
    const jwks = (await answer.json()) as JSONWebKeySet;
    local = createLocalJWKSet(jwks);
    keyCount = jwks.keys.length;
    fetchedAt = Date.now();
  };
  const load = async () => {
    try {
      await fetchKeySet();
      lastFailure = undefined;
    } catch (error) {
      lastFailure = error;
      throw error;
    }
  };
  const reload = () => {
    if (pending === undefined) {
      requestedAt = Date.now();
      pending = load().finally(() => {
        pending = undefined;
      });
    }
    return pending;
  };
  const getKey = async (header: JWSHeaderParameters, token: FlattenedJWSInput) => {
    if (local === undefined || !within(options.cacheMaxAgeMs)) await reload();
    try {
      return await (local as NonNullable<typeof local>)(header, token);
    } catch (error) {
      // A reload under way is shared; a new one waits a cooldown after the last request.
      const coolingDown = pending === undefined && Date.now() < requestedAt + options.cooldownMs;
      if (!(error instanceof errors.JWKSNoMatchingKey)) throw error;
      // Cooling down after a failed request: the kid is not known to be unknown, the issuer is unreachable.
      if (coolingDown) throw lastFailure ?? error;
      await reload();
      return (local as NonNullable<typeof local>)(header, token);
    }
  };
  return Object.defineProperties(getKey, {
    fresh: { get: () => local !== undefined && within(options.cacheMaxAgeMs) },
    reload: { value: reload },
    keyCount: { value: () => keyCount },
  }) as RemoteKeySet;
}

/**
 * Builds the key resolver. Remote failures other than "no such key" (network, timeout,
 * non-200, bad JSON, bad key set) become `jwks_unavailable` here, where their origin is
 * still certain, so an outage is never mistaken for a bad token.
 */
function createKeyResolver(jwks: JwtVerifierOptions["jwks"]): {
  getKey: JWTVerifyGetKey;
  status: () => JwksStatus;
  warm: () => Promise<void>;
} {
  if (isJwks(jwks)) {
    try {
      const getKey = createLocalJWKSet(jwks);
      const keyCount = jwks.keys.length;
      return {
        getKey,
        status: () => ({ source: "inline", state: "ok", key_count: keyCount, checked_at: null }),
        warm: async () => undefined,
      };
    } catch {
      fail("jwks is not a valid JSON Web Key Set");
    }
  }
  const remote: RemoteJwksOptions =
    typeof jwks === "string" || jwks instanceof URL ? { url: jwks } : (jwks as RemoteJwksOptions);
  if (typeof remote !== "object" || remote === null || remote.url === undefined) {
    fail("jwks must be a URL, remote JWKS options or a JSON Web Key Set");
  }
  const getKey = remoteKeySet(parseJwksUrl(remote.url), {
    fetch: remote.fetch ?? globalThis.fetch,
    timeoutMs: positiveInt(remote.timeoutMs, "jwks.timeoutMs", 5000),
    cooldownMs: nonNegative(remote.cooldownMs, "jwks.cooldownMs", 10_000),
    cacheMaxAgeMs: nonNegative(remote.cacheMaxAgeMs, "jwks.cacheMaxAgeMs", 300_000),
  });
  let state: JwksStatus["state"] = "not_fetched";
  let checkedAt: string | null = null;
  const settle = (outcome: "ok" | "failed") => {
    state = outcome;
    checkedAt = new Date().toISOString();
  };
  const resolver = async (header: JWSHeaderParameters, token: FlattenedJWSInput) => {
    try {
      const key = await getKey(header, token);
      settle("ok");
      return key;
    } catch (error) {
      if (error instanceof errors.JWKSNoMatchingKey || error instanceof errors.JWKSMultipleMatchingKeys) {
        settle("ok");
        throw error;
      }
      settle("failed");
      throw new TokenVerificationError("jwks_unavailable", "the JSON Web Key Set could not be fetched", {
        cause: error,
      });
    }
  };
  return {
    getKey: resolver,
    warm: async () => {
      if (getKey.fresh) return;
      try {
        await getKey.reload();
        settle("ok");
      } catch (error) {
        settle("failed");
        throw new TokenVerificationError("jwks_unavailable", "the JSON Web Key Set could not be fetched", {
          cause: error,
        });
      }
    },
    status: () => ({
      source: "remote",
      state,
      key_count: getKey.keyCount() ?? null,
      checked_at: checkedAt,
    }),
  };
}

function claimFailure(error: InstanceType<typeof errors.JWTClaimValidationFailed>): TokenVerificationError {
  switch (error.claim) {
    case "iss":
      return new TokenVerificationError("token_issuer", "token issuer is not trusted");
    case "aud":
      return new TokenVerificationError("token_audience", "token audience does not match");
    case "nbf":
      return error.reason === "check_failed"
        ? new TokenVerificationError("token_not_yet_valid", "token is not yet valid (nbf)")
        : new TokenVerificationError("token_malformed", "token nbf claim is invalid");
    case "iat":
      return error.reason === "check_failed"
        ? new TokenVerificationError("token_not_yet_valid", "token was issued in the future (iat)")
        : new TokenVerificationError("token_malformed", "token iat claim is missing or invalid");
    case "sub":
      return new TokenVerificationError("token_subject", "token subject is missing");
    case "typ":
      return new TokenVerificationError("token_use", "token type is not accepted");
    default:
      return new TokenVerificationError(
        "token_malformed",
        `token ${error.claim} claim is missing or invalid`,
      );
  }
}

/** Maps jose's failures onto our codes; our own errors pass through unchanged. */
function classify(error: unknown): TokenVerificationError {
  if (error instanceof TokenVerificationError) return error;
  if (error instanceof errors.JWTExpired) {
    return new TokenVerificationError("token_expired", "token has expired");
  }
  if (error instanceof errors.JWTClaimValidationFailed) return claimFailure(error);
  if (error instanceof errors.JWSSignatureVerificationFailed) {
    return new TokenVerificationError("token_bad_signature", "token signature is invalid");
  }
  if (error instanceof errors.JOSEAlgNotAllowed) {
    return new TokenVerificationError("token_alg_not_allowed", "token algorithm is not allowed");
  }
  if (error instanceof errors.JWKSNoMatchingKey || error instanceof errors.JWKSMultipleMatchingKeys) {
    return new TokenVerificationError("token_unknown_kid", "token key id does not name exactly one JWKS key");
  }
  return new TokenVerificationError("token_malformed", "token is malformed", { cause: error });
}

function checkHeader(token: string, opts: ResolvedOptions): void {
  if (!COMPACT_JWS.test(token))
    throw new TokenVerificationError("token_malformed", "token is not a compact JWS");
  let header: JWSHeaderParameters;
  try {
    header = decodeProtectedHeader(token);
  } catch {
    throw new TokenVerificationError("token_malformed", "token header is not valid JSON");
  }
  if (typeof header.alg !== "string" || !opts.algorithms.includes(header.alg)) {
    throw new TokenVerificationError("token_alg_not_allowed", "token algorithm is not allowed");
  }
  if (opts.allowedTypes !== undefined) {
    if (typeof header.typ !== "string" || !opts.allowedTypes.includes(normalizeTyp(header.typ))) {
      throw new TokenVerificationError("token_use", "token type is not accepted");
    }
  }
  // A kid is only ever a lookup key into the JWKS: never a path, URL or query. Anything
  // absent, oversized or unmatched is simply "unknown".
  if (typeof header.kid !== "string" || header.kid.length === 0 || header.kid.length > MAX_KID_LENGTH) {
    throw new TokenVerificationError("token_unknown_kid", "token names no usable key id");
  }
}

function checkClaims(payload: JWTPayload, opts: ResolvedOptions, nowSec: number): VerifiedToken {
  if (payload.iat !== undefined && payload.iat > nowSec + opts.clockToleranceSec) {
    throw new TokenVerificationError("token_not_yet_valid", "token was issued in the future (iat)");
  }
  if (typeof payload.sub !== "string" || payload.sub.trim().length === 0) {
    throw new TokenVerificationError("token_subject", "token subject is missing or empty");
  }
  const tokenUse = payload.token_use;
  if (tokenUse !== undefined && typeof tokenUse !== "string") {
    throw new TokenVerificationError("token_use", "token_use claim is not a string");
  }
  if (opts.requireTokenUse !== undefined && tokenUse !== opts.requireTokenUse) {
    throw new TokenVerificationError("token_use", "token_use claim does not match");
  }
  const tenant = readTenantClaim(payload, opts.tenantClaim);
  const partnerId = readPartnerClaim(payload, opts.partnerClaim);
  if (opts.enforceTenant) {
    if (tenant === undefined)
      throw new TokenVerificationError("token_tenant", "token tenant claim is missing");
    if (opts.tenants !== undefined && !opts.tenants.includes(tenant)) {
      throw new TokenVerificationError("token_tenant", "token tenant does not match");
    }
  }
  const scopes = readScopes(payload);
  if (scopes === undefined)
    throw new TokenVerificationError("token_malformed", "token scope claim is invalid");
  const missing = opts.requiredScopes.filter((s) => !scopes.includes(s));
  if (missing.length > 0) throw new TokenVerificationError("token_scope", "token lacks a required scope");
  const roles = readRoles({
    roles: Object.hasOwn(payload, opts.rolesClaim) ? payload[opts.rolesClaim] : undefined,
  });
  if (roles === undefined)
    throw new TokenVerificationError("token_malformed", "token roles claim is invalid");
  if (typeof payload.exp !== "number" || typeof payload.iss !== "string") {
    throw new TokenVerificationError("token_malformed", "token exp or iss claim is missing");
  }
  const clientId = readClientId(payload);
  const verified: VerifiedToken = {
    subject: payload.sub,
    issuer: payload.iss,
    audience: readAudience(payload),
    scopes,
    roles,
    expiresAt: new Date(payload.exp * 1000),
    claims: Object.freeze({ ...payload }),
    ...(clientId === undefined ? {} : { clientId }),
    ...(tenant === undefined ? {} : { tenant }),
    ...(partnerId === undefined ? {} : { partnerId }),
    ...(tokenUse === undefined ? {} : { tokenUse }),
    ...(typeof payload.jti === "string" ? { jwtId: payload.jti } : {}),
  };
  return verified;
}

/** Claims are flat in practice; these bounds are far above any real token's (docs/security.md). */
const CLAIM_LIMITS: JsonLimits = Object.freeze({ maxDepth: 16, maxKeys: 256, maxPointerLength: 1024 });

export function createJwtVerifier(options: JwtVerifierOptions): JwtVerifier {
  const opts = resolveOptions(options);
  const { getKey, status: jwksStatus, warm } = createKeyResolver(options.jwks);

  async function verify(token: string): Promise<VerifiedToken> {
    if (typeof token !== "string" || token.length === 0) {
      throw new TokenVerificationError("token_malformed", "token is empty");
    }
    if (token.length > opts.maxTokenLength) {
      throw new TokenVerificationError("token_too_large", "token exceeds the maximum length");
    }
    checkHeader(token, opts);
    const now = opts.now();
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, getKey, {
        issuer: opts.issuer,
        audience: opts.audience,
        algorithms: opts.algorithms,
        clockTolerance: opts.clockToleranceSec,
        currentDate: now,
        requiredClaims: ["exp", "sub"],
        ...(opts.maxTokenAgeSec === undefined ? {} : { maxTokenAge: opts.maxTokenAgeSec }),
      }));
    } catch (error) {
      throw classify(error);
    }
    try {
      // A partner's issuer chooses the claims: bounded before anything reads or copies them.
      checkJsonBounds(payload, "claims", CLAIM_LIMITS);
    } catch {
      throw new TokenVerificationError("token_malformed", "token claims exceed the JSON limits");
    }
    return checkClaims(payload, opts, Math.floor(now.getTime() / 1000));
  }

  return { issuer: opts.issuer, verify, jwksStatus, warm };
}
