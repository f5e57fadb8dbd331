import { decodeJwt } from "jose";
import type { JsonFetch } from "../core/json-fetch.ts";
import { readScopes } from "./claims.ts";
import { IdentityConfigError, TokenVerificationError } from "./errors.ts";
import { createJwtVerifier, type JwtVerifier, type VerifiedToken } from "./jwt-verifier.ts";

/**
 * Several trusted issuers behind one verifier. The token's `iss` selects the issuer BEFORE
 * any signature check (RFC 8725 §3.8): a token is only ever checked with the keys of the
 * issuer it names, so one issuer's keys can never vouch for another's tokens, and an
 * unknown `iss` is refused without fetching anything. Each issuer has its own verifier,
 * hence its own cached JWKS, audiences, token use and claim mapping.
 * docs/decisions/1201-trusted-issuers.md.
 */

/** Which claims carry what; the defaults are the claims the development identity provider issues. */
export interface ClaimMapping {
  readonly subject: string;
  readonly roles: string;
  readonly partnerId: string;
  /** `scope` reads `scope` (space-separated) and falls back to `scp`, as for a single issuer. */
  readonly scopes: string;
}

export const defaultClaimMapping: ClaimMapping = Object.freeze({
  subject: "sub",
  roles: "roles",
  partnerId: "partner_id",
  scopes: "scope",
});

export interface TrustedIssuer {
  readonly issuer: string;
  readonly jwksUrl: string;
  readonly audience: readonly string[];
  readonly claims: ClaimMapping;
  /** Required `token_use` claim; `false`: none required (e.g. an issuer that types tokens `at+jwt`). */
  readonly tokenUse: string | false;
  /** Accepted `typ` header values; any when absent. */
  readonly tokenTypes?: readonly string[];
  /**
   * Whether this issuer's tokens without a partner claim may stand for `platform_vouched`
   * subjects (a platform admin vouches for a `sub` of the platform's own issuer). True for the
   * primary issuer by default, false for every other: a second issuer's `sub` namespace is not
   * the one the platform admin vouched in.
   */
  readonly vouchedSubjects: boolean;
}

/** A verified token, with its claims mapped: `claims.partner_id` is the mapped partner claim. */
export interface IssuerVerifiedToken extends VerifiedToken {
  /** Always set here: the issuer's `vouchedSubjects`. */
  readonly vouchable: boolean;
}

export interface TrustedIssuersVerifier {
  /** The primary issuer (first of the list): the platform's own. */
  readonly issuer: string;
  readonly issuers: readonly string[];
  verify(token: string): Promise<IssuerVerifiedToken>;
  /**
   * Fetches every issuer's JWKS now, together, so a process's first token does not wait for
   * its issuer's keys (the sidecar's `jwks` readiness check); rejects with `jwks_unavailable`
   * while one of them cannot be fetched. An issuer whose keys are fresh is not asked again.
   */
  warm(): Promise<void>;
}

export interface TrustedIssuersOptions {
  readonly maxTokenLength?: number;
  /** Fetches the issuers' JWKS (the sidecar's node:http transport); default the global fetch. */
  readonly fetch?: JsonFetch;
  readonly now?: () => Date;
}

const DEFAULT_MAX_TOKEN_LENGTH = 8192;

/** The token's `iss`, read without verifying anything (only to choose whose keys to use). */
function claimedIssuer(token: string, maxLength: number): string {
  if (typeof token !== "string" || token.length === 0) {
    throw new TokenVerificationError("token_malformed", "token is empty");
  }
  if (token.length > maxLength) {
    throw new TokenVerificationError("token_too_large", "token exceeds the maximum length");
  }
  let iss: unknown;
  try {
    iss = decodeJwt(token).iss;
  } catch {
    throw new TokenVerificationError("token_malformed", "token is malformed");
  }
  if (typeof iss !== "string" || iss.length === 0) {
    throw new TokenVerificationError("token_issuer", "token names no issuer");
  }
  return iss;
}

function mappedString(claims: Readonly<Record<string, unknown>>, name: string): string | undefined {
  const value = claims[name];
  return typeof value === "string" && value.length > 0 ? value : undefined;
}

/**
 * Applies an issuer's claim mapping to a token its own verifier accepted. That verifier read
 * the mapped partner and roles claims strictly (`partnerClaim`, `rolesClaim`); the subject and
 * scopes claims are mapped here.
 */
export function applyClaimMapping(
  verified: VerifiedToken,
  mapping: ClaimMapping,
  vouchable: boolean,
): IssuerVerifiedToken {
  const { claims } = verified;
  const subject = mapping.subject === "sub" ? verified.subject : mappedString(claims, mapping.subject);
  if (subject === undefined || subject.trim().length === 0) {
    throw new TokenVerificationError("token_subject", "token subject is missing or empty");
  }
  const scopes =
    mapping.scopes === "scope"
      ? verified.scopes
      : readScopes({ scope: Object.hasOwn(claims, mapping.scopes) ? claims[mapping.scopes] : undefined });
  if (scopes === undefined)
    throw new TokenVerificationError("token_malformed", "token scope claim is invalid");
  // Whoever still reads `claims.partner_id` reads the mapped, checked partner and nothing else
  // (a token of an issuer mapped to `org` cannot smuggle its own `partner_id`).
  const rest: Record<string, unknown> = { ...claims };
  delete rest.partner_id;
  const { partnerId } = verified;
  const mappedClaims = Object.freeze(partnerId === undefined ? rest : { ...rest, partner_id: partnerId });
  return { ...verified, subject, scopes, claims: mappedClaims, vouchable };
}

export function createTrustedIssuersVerifier(
  issuers: readonly TrustedIssuer[],
  options: TrustedIssuersOptions = {},
): TrustedIssuersVerifier {
  if (!Array.isArray(issuers) || issuers.length === 0) {
    throw new IdentityConfigError("trusted issuers: at least one issuer is required");
  }
  const maxTokenLength = options.maxTokenLength ?? DEFAULT_MAX_TOKEN_LENGTH;
  const byIssuer = new Map<string, { verifier: JwtVerifier; issuer: TrustedIssuer }>();
  for (const issuer of issuers) {
    if (byIssuer.has(issuer.issuer)) {
      throw new IdentityConfigError(`trusted issuers: ${issuer.issuer} is listed twice`);
    }
    const verifier = createJwtVerifier({
      issuer: issuer.issuer,
      audience: issuer.audience,
      jwks: { url: issuer.jwksUrl, ...(options.fetch === undefined ? {} : { fetch: options.fetch }) },
      partnerClaim: issuer.claims.partnerId,
      rolesClaim: issuer.claims.roles,
      maxTokenLength,
      ...(issuer.tokenUse === false ? {} : { requireTokenUse: issuer.tokenUse }),
      ...(issuer.tokenTypes === undefined ? {} : { allowedTypes: issuer.tokenTypes }),
      ...(options.now === undefined ? {} : { now: options.now }),
    });
    byIssuer.set(issuer.issuer, { verifier, issuer });
  }
  const primary = issuers[0] as TrustedIssuer;
  return {
    issuer: primary.issuer,
    issuers: [...byIssuer.keys()],
    async verify(token) {
      const entry = byIssuer.get(claimedIssuer(token, maxTokenLength));
      if (entry === undefined)
        throw new TokenVerificationError("token_issuer", "token issuer is not trusted");
      const verified = await entry.verifier.verify(token);
      return applyClaimMapping(verified, entry.issuer.claims, entry.issuer.vouchedSubjects);
    },
    async warm() {
      await Promise.all([...byIssuer.values()].map(({ verifier }) => verifier.warm?.()));
    },
  };
}
