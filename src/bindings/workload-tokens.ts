/**
 * Binding-scoped workload access tokens: short-lived ES256 JWTs the authority signs for
 * a workload client (client credentials at `POST /v1/bindings/{id}/token`), verified on
 * invoke, verify and broker execute with the same RFC 8725 verifier as every other token.
 */
import { createHash, randomBytes } from "node:crypto";
import { type JSONWebKeySet, SignJWT } from "jose";
import { LRUCache } from "lru-cache";
import { positiveIntegerOption } from "../core/positive-integer.ts";
import { TokenVerificationError } from "../identity/errors.ts";
import { createJwtVerifier, type JwtVerifier } from "../identity/jwt-verifier.ts";
import type { WorkloadClientRecord, WorkloadScope } from "../store/binding-model.ts";
import { TOKEN_SIGNING_ALG, type TokenKeys, type TokenSigningKey } from "./token-keys.ts";

/** `aud` of every workload token: no other token of this issuer passes as one. */
export const WORKLOAD_TOKEN_AUDIENCE = "authority-workload";
export const DEFAULT_WORKLOAD_TOKEN_LIFETIME_SEC = 300;
/** The longest a workload access token lives (`--workload-token-lifetime` takes up to this). */
export const MAX_WORKLOAD_TOKEN_LIFETIME_SEC = 3600;
/** Longest time a verified token is reused without checking its signature again. */
const VERIFIED_CACHE_MAX_AGE_MS = 60_000;

export interface IssuedWorkloadToken {
  readonly access_token: string;
  readonly token_type: "Bearer";
  readonly expires_in: number;
  readonly scope: string;
}

export interface WorkloadTokenClaims {
  readonly clientId: string;
  readonly bindingId: string;
  readonly partnerId: string;
  readonly scopes: readonly string[];
  readonly jwtId: string | undefined;
}

export interface WorkloadTokenService {
  readonly issuer: string;
  issue(client: WorkloadClientRecord, scopes: readonly WorkloadScope[]): Promise<IssuedWorkloadToken>;
  /** Throws TokenVerificationError (identity module) for anything that is not a valid workload token. */
  verify(token: string): Promise<WorkloadTokenClaims>;
  /** The public keys of workload tokens (served at /.well-known/jwks.json). */
  jwks(): Promise<JSONWebKeySet>;
}

export interface WorkloadTokenServiceOptions {
  readonly keys: TokenKeys;
  /** The authority's public URL: `iss` of the tokens. */
  readonly issuer: string;
  readonly lifetimeSec?: number;
  readonly now?: () => Date;
}

export function createWorkloadTokenService(options: WorkloadTokenServiceOptions): WorkloadTokenService {
  if (typeof options?.keys?.current !== "function") throw new TypeError("keys is required");
  if (typeof options.issuer !== "string" || options.issuer.length === 0)
    throw new TypeError("issuer is required");
  const lifetimeSec = positiveIntegerOption(
    options.lifetimeSec,
    DEFAULT_WORKLOAD_TOKEN_LIFETIME_SEC,
    "lifetimeSec",
    undefined,
    MAX_WORKLOAD_TOKEN_LIFETIME_SEC,
  );
  const now = options.now ?? (() => new Date());
  const { keys, issuer } = options;
  let verifier: { kid: string; verifier: JwtVerifier } | undefined;
  // Keyed by the token's SHA-256 (never the token). Revocation does not depend on it: the
  // client record is read on every request.
  const verified = new LRUCache<string, { claims: WorkloadTokenClaims; until: number }>({ max: 10_000 });

  async function verifierFor(key: TokenSigningKey): Promise<JwtVerifier> {
    if (verifier?.kid !== key.kid) {
      verifier = {
        kid: key.kid,
        verifier: createJwtVerifier({
          issuer,
          audience: WORKLOAD_TOKEN_AUDIENCE,
          jwks: { keys: [key.publicJwk] },
          algorithms: [TOKEN_SIGNING_ALG],
          requireTokenUse: "access",
          allowedTypes: ["at+jwt"],
          clockToleranceSec: 5,
          now,
        }),
      };
    }
    return verifier.verifier;
  }

  return {
    issuer,
    jwks: () => keys.jwks(),
    async issue(client, scopes) {
      const key = await keys.current();
      const iat = Math.floor(now().getTime() / 1000);
      const scope = scopes.join(" ");
      const token = await new SignJWT({
        client_id: client.client_id,
        binding_id: client.binding_id,
        partner_id: client.partner_id,
        scope,
        token_use: "access",
      })
        .setProtectedHeader({ alg: TOKEN_SIGNING_ALG, kid: key.kid, typ: "at+jwt" })
        .setIssuer(issuer)
        .setSubject(client.client_id)
        .setAudience(WORKLOAD_TOKEN_AUDIENCE)
        .setIssuedAt(iat)
        .setNotBefore(iat)
        .setExpirationTime(iat + lifetimeSec)
        .setJti(randomBytes(16).toString("base64url"))
        .sign(key.privateKey);
      return { access_token: token, token_type: "Bearer", expires_in: lifetimeSec, scope };
    },
    async verify(token) {
      const cacheKey = createHash("sha256").update(token).digest("base64url");
      const at = now().getTime();
      const hit = verified.get(cacheKey);
      if (hit !== undefined && at < hit.until) return hit.claims;
      const key = await keys.current();
      const result = await (await verifierFor(key)).verify(token);
      const { partnerId } = result;
      const bindingId = result.claims.binding_id;
      if (typeof bindingId !== "string" || partnerId === undefined || result.clientId !== result.subject) {
        throw new TokenVerificationError("token_malformed", "workload token claims are incomplete");
      }
      const claims: WorkloadTokenClaims = {
        clientId: result.subject,
        bindingId,
        partnerId,
        scopes: result.scopes,
        jwtId: result.jwtId,
      };
      const until = Math.min(result.expiresAt.getTime(), at + VERIFIED_CACHE_MAX_AGE_MS);
      if (until > at) verified.set(cacheKey, { claims, until });
      return claims;
    },
  };
}
