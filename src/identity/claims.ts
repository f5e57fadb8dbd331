/**
 * Pure readers for the claims every path relies on, shared by the verifier and the
 * development identity provider so both agree on one shape.
 */

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

/**
 * Scopes from `scope` (RFC 8693/9068: space-separated string) or, as some issuers send,
 * `scp` (array or string). Undefined when present but not one of those shapes.
 */
export function readScopes(claims: Readonly<Record<string, unknown>>): string[] | undefined {
  const { scope, scp } = claims;
  if (scope !== undefined) {
    if (typeof scope === "string") return parseScopeString(scope);
    if (isStringArray(scope)) return [...new Set(scope)];
    return undefined;
  }
  if (scp !== undefined) {
    if (typeof scp === "string") return parseScopeString(scp);
    if (isStringArray(scp)) return [...new Set(scp)];
    return undefined;
  }
  return [];
}

/** Roles from the `roles` claim (array of strings); undefined when present with another shape. */
export function readRoles(claims: Readonly<Record<string, unknown>>): string[] | undefined {
  const { roles } = claims;
  if (roles === undefined) return [];
  return isStringArray(roles) ? [...new Set(roles)] : undefined;
}

export function readAudience(claims: Readonly<Record<string, unknown>>): string[] {
  const { aud } = claims;
  if (typeof aud === "string") return [aud];
  return isStringArray(aud) ? aud : [];
}

export function readClientId(claims: Readonly<Record<string, unknown>>): string | undefined {
  if (typeof claims.client_id === "string" && claims.client_id.length > 0) return claims.client_id;
  if (typeof claims.azp === "string" && claims.azp.length > 0) return claims.azp;
  return undefined;
}
