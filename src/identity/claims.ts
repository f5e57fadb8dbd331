/**
 * Pure readers for the claims every path relies on, shared by the verifier and the
 * development identity provider so both agree on one shape. Claims are read strictly: a
 * claim that scopes or grants (partner, tenant, roles, client) and is present with the wrong
 * type, empty, or with several values makes the token invalid — it is never read as absent,
 * which would leave the token unscoped (docs/decisions/2503-egress-gate-strict-claims-partner-subjects.md).
 */
import { idPatterns } from "../core/ids.ts";
import { TokenVerificationError } from "./errors.ts";

/** RFC 6749 §3.3 scope-token: printable ASCII without space, `"` or `\`. */
const SCOPE_TOKEN = /^[\x21\x23-\x5B\x5D-\x7E]+$/;

export function isScopeToken(value: string): boolean {
  return SCOPE_TOKEN.test(value);
}

/** Splits a space-delimited `scope` string; undefined when a token has invalid syntax. */
export function parseScopeString(scope: string): string[] | undefined {
  const scopes = scope.split(" ").filter((s) => s.length > 0);
  return scopes.every(isScopeToken) ? [...new Set(scopes)] : undefined;
}

function isStringArray(value: unknown): value is string[] {
  return Array.isArray(value) && value.every((v) => typeof v === "string");
}

function isScopeArray(value: unknown): value is string[] {
  return isStringArray(value) && value.every(isScopeToken);
}

/**
 * Scopes from `scope` (RFC 8693/9068: space-separated string) or, as some issuers send,
 * `scp` (array or string). Undefined when present but not one of those shapes.
 */
export function readScopes(claims: Readonly<Record<string, unknown>>): string[] | undefined {
  const { scope, scp } = claims;
  if (scope !== undefined) {
    if (typeof scope === "string") return parseScopeString(scope);
    if (isScopeArray(scope)) return [...new Set(scope)];
    return undefined;
  }
  if (scp !== undefined) {
    if (typeof scp === "string") return parseScopeString(scp);
    if (isScopeArray(scp)) return [...new Set(scp)];
    return undefined;
  }
  return [];
}

/** A role name: 1-256 characters, none of them whitespace or a control or format character. */
const ROLE_NAME = /^[^\s\p{C}]{1,256}$/u;

/**
 * Roles from the `roles` claim: a non-empty array of role names. Undefined when present with
 * any other shape — not an array, empty, or holding a value that is not a role name (an empty
 * or whitespace string, a number, a nested array) — so the token is refused.
 */
export function readRoles(claims: Readonly<Record<string, unknown>>): string[] | undefined {
  const { roles } = claims;
  if (roles === undefined) return [];
  if (!Array.isArray(roles) || roles.length === 0) return undefined;
  return roles.every((role) => typeof role === "string" && ROLE_NAME.test(role))
    ? [...new Set(roles as string[])]
    : undefined;
}

const PARTNER_ID = new RegExp(idPatterns.partner);

/**
 * The partner a token names in claim `name`: undefined when the claim is absent, else exactly
 * one partner id. An array (even of one id), an empty or whitespace string, a number, an
 * object, null or a string no partner id can be makes the token invalid (`token_partner`).
 */
export function readPartnerClaim(
  claims: Readonly<Record<string, unknown>>,
  name: string,
): string | undefined {
  if (!Object.hasOwn(claims, name)) return undefined;
  const value = claims[name];
  if (typeof value === "string" && PARTNER_ID.test(value)) return value;
  throw new TokenVerificationError("token_partner", `token ${name} claim does not name exactly one partner`);
}

/** Longest tenant value a binding can require (its tenant_value). */
const MAX_TENANT_LENGTH = 1024;

/**
 * The tenant a token names in claim `name`: undefined when absent, else one non-empty string
 * without surrounding whitespace or control characters. Anything else makes the token invalid
 * (`token_tenant`), whether or not the verifier requires a tenant.
 */
export function readTenantClaim(claims: Readonly<Record<string, unknown>>, name: string): string | undefined {
  if (!Object.hasOwn(claims, name)) return undefined;
  const value = claims[name];
  if (
    typeof value === "string" &&
    value.length > 0 &&
    value.length <= MAX_TENANT_LENGTH &&
    value.trim() === value &&
    !/\p{Cc}/u.test(value)
  ) {
    return value;
  }
  throw new TokenVerificationError("token_tenant", `token ${name} claim does not name exactly one tenant`);
}

export function readAudience(claims: Readonly<Record<string, unknown>>): string[] {
  const { aud } = claims;
  if (typeof aud === "string") return [aud];
  return isStringArray(aud) ? aud : [];
}

/** A client id (`client_id`, else `azp`): absent, or one non-empty string; any other shape is refused. */
export function readClientId(claims: Readonly<Record<string, unknown>>): string | undefined {
  for (const name of ["client_id", "azp"] as const) {
    if (!Object.hasOwn(claims, name)) continue;
    const value = claims[name];
    if (typeof value === "string" && value.length > 0 && value.trim() === value) return value;
    throw new TokenVerificationError("token_malformed", `token ${name} claim is not one client id`);
  }
  return undefined;
}
