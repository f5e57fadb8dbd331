import { randomBytes } from "node:crypto";
import { type JWTPayload, SignJWT } from "jose";
import { positiveIntegerOption } from "../../core/positive-integer.ts";
import { IdpConfigError } from "./errors.ts";
import { type KeyRing, SIGNING_ALG } from "./keys.ts";

/** Claims the IdP sets itself; registered extra claims may not shadow them. */
export function reservedClaimNames(tenantClaim: string): string[] {
  return [
    "iss",
    "sub",
    "aud",
    "exp",
    "iat",
    "nbf",
    "jti",
    "scope",
    "scp",
    "client_id",
    "azp",
    "token_use",
    "roles",
    "cnf",
    "act",
    tenantClaim,
  ];
}

export interface IssueTokenRequest {
  readonly subject: string;
  readonly scopes?: readonly string[];
  readonly audience?: string | readonly string[];
  readonly clientId?: string;
  readonly tenant?: string;
  readonly roles?: readonly string[];
  readonly claims?: Readonly<Record<string, unknown>>;
  readonly lifetimeSec?: number;
  /** Default "access". Another value exists to let tests prove verifiers refuse it. */
  readonly tokenUse?: string;
  readonly notBefore?: Date;
}

export interface IssuedToken {
  readonly accessToken: string;
  readonly tokenType: "Bearer";
  readonly expiresIn: number;
  readonly expiresAt: Date;
  readonly scope: string;
  readonly jwtId: string;
}

export interface ClaimContext {
  readonly issuer: string;
  readonly nowSec: number;
  readonly jwtId: string;
  readonly tenantClaim: string;
  readonly lifetimeSec: number;
  readonly defaultAudience: string;
}

/** Pure: the claim set of an access token (RFC 9068 shape plus token_use, tenant and roles). */
export function buildAccessTokenClaims(request: IssueTokenRequest, context: ClaimContext): JWTPayload {
  if (typeof request.subject !== "string" || request.subject.length === 0) {
    throw new IdpConfigError("issueToken: subject is required");
  }
  const lifetimeSec = positiveIntegerOption(
    request.lifetimeSec,
    context.lifetimeSec,
    "issueToken: lifetimeSec",
    (message) => {
      throw new IdpConfigError(message);
    },
  );
  const reserved = reservedClaimNames(context.tenantClaim);
  const extra = request.claims ?? {};
  const shadowed = Object.keys(extra).find((name) => reserved.includes(name));
  if (shadowed !== undefined)
    throw new IdpConfigError(`issueToken: claim ${JSON.stringify(shadowed)} is reserved`);
  const audience = request.audience ?? context.defaultAudience;
  const claims: JWTPayload = {
    ...extra,
    iss: context.issuer,
    sub: request.subject,
    aud: typeof audience === "string" ? audience : [...audience],
    iat: context.nowSec,
    nbf: request.notBefore === undefined ? context.nowSec : Math.floor(request.notBefore.getTime() / 1000),
    exp: context.nowSec + lifetimeSec,
    jti: context.jwtId,
    scope: (request.scopes ?? []).join(" "),
    token_use: request.tokenUse ?? "access",
  };
  if (request.clientId !== undefined) claims.client_id = request.clientId;
  if (request.tenant !== undefined) claims[context.tenantClaim] = request.tenant;
  if (request.roles !== undefined && request.roles.length > 0) claims.roles = [...request.roles];
  return claims;
}

export interface TokenIssuerOptions {
  readonly issuer: () => string;
  readonly keys: KeyRing;
  readonly defaultAudience: string;
  readonly lifetimeSec: number;
  readonly tenantClaim: string;
  readonly now: () => Date;
}

export interface TokenIssuer {
  issue(request: IssueTokenRequest): Promise<IssuedToken>;
}

export function createTokenIssuer(options: TokenIssuerOptions): TokenIssuer {
  return {
    async issue(request) {
      const nowSec = Math.floor(options.now().getTime() / 1000);
      const jwtId = randomBytes(16).toString("base64url");
      const claims = buildAccessTokenClaims(request, {
        issuer: options.issuer(),
        nowSec,
        jwtId,
        tenantClaim: options.tenantClaim,
        lifetimeSec: options.lifetimeSec,
        defaultAudience: options.defaultAudience,
      });
      const key = options.keys.current();
      // typ at+jwt (RFC 9068) keeps an access token from passing as any other JWT type.
      const accessToken = await new SignJWT(claims)
        .setProtectedHeader({ alg: SIGNING_ALG, kid: key.kid, typ: "at+jwt" })
        .sign(key.privateKey);
      const exp = claims.exp ?? nowSec;
      return {
        accessToken,
        tokenType: "Bearer",
        expiresIn: exp - nowSec,
        expiresAt: new Date(exp * 1000),
        scope: typeof claims.scope === "string" ? claims.scope : "",
        jwtId,
      };
    },
  };
}
