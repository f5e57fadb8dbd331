import { TokenVerificationError } from "./errors.ts";

/** RFC 6750 §2.1 b68token: the only characters a bearer credential may use. */
const B64TOKEN = /^[A-Za-z0-9\-._~+/]+=*$/;
const DEFAULT_MAX_HEADER_LENGTH = 8192 + "Bearer ".length;

/**
 * The bearer token of an Authorization header, parsed strictly: scheme `Bearer` in any
 * case, exactly one space, one b64token and nothing else. Returns undefined when no
 * header was sent (the caller decides between missing_subject and invalid_token);
 * throws TokenVerificationError for anything present but not a well-formed credential.
 */
export function extractBearer(
  authorization: string | readonly string[] | undefined,
  maxLength = DEFAULT_MAX_HEADER_LENGTH,
): string | undefined {
  if (authorization === undefined) return undefined;
  if (typeof authorization !== "string") {
    throw new TokenVerificationError("token_malformed", "more than one Authorization header");
  }
  if (authorization.length === 0) return undefined;
  if (authorization.length > maxLength) {
    throw new TokenVerificationError("token_too_large", "Authorization header exceeds the maximum length");
  }
  const space = authorization.indexOf(" ");
  if (space !== 6 || authorization.slice(0, 6).toLowerCase() !== "bearer") {
    throw new TokenVerificationError("token_malformed", "Authorization scheme is not Bearer");
  }
  const token = authorization.slice(7);
  if (!B64TOKEN.test(token)) {
    throw new TokenVerificationError("token_malformed", "Authorization header is not a single bearer token");
  }
  return token;
}

export function hasScope(token: { readonly scopes: readonly string[] }, scope: string): boolean {
  return token.scopes.includes(scope);
}

export function hasRole(token: { readonly roles: readonly string[] }, role: string): boolean {
  return token.roles.includes(role);
}

export function hasAnyRole(token: { readonly roles: readonly string[] }, roles: readonly string[]): boolean {
  return roles.some((role) => token.roles.includes(role));
}
