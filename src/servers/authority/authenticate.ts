import type { FastifyInstance, FastifyRequest } from "fastify";
import { AuthorityError } from "../../errors.ts";
import { extractBearer } from "../../identity/bearer.ts";
import { tokenErrorToAuthorityError } from "../../identity/errors.ts";
import type { Principal } from "../../identity/principal.ts";
import { traced } from "../../observability/tracing.ts";
import type { AuthorityContext, BearerVerifier } from "./context.ts";

/** A verified `aud` claim as a list (RFC 7519: one string or an array of them). */
function audienceOf(claims: Readonly<Record<string, unknown>>): string[] {
  const aud = claims.aud;
  if (typeof aud === "string") return [aud];
  return Array.isArray(aud) ? aud.filter((value): value is string => typeof value === "string") : [];
}

/**
 * The caller's principal, or undefined when no Authorization header was sent. A header
 * that is present but malformed or fails verification is an `invalid_token` error
 * (`upstream_unavailable` when the issuer's keys cannot be fetched) — never anonymous.
 */
export async function optionalPrincipal(
  request: FastifyRequest,
  context: AuthorityContext,
  /** /mcp verifies with its own (context.mcpVerifier): it also accepts its resource URL as audience. */
  verifier: BearerVerifier = context.verifier,
): Promise<Principal | undefined> {
  let token: string | undefined;
  try {
    token = extractBearer(request.headers.authorization);
  } catch (error) {
    throw tokenErrorToAuthorityError(error, "invalid_token");
  }
  if (token === undefined) return undefined;
  try {
    const verified = await traced("authority.verify_token", () => verifier.verify(token));
    return {
      subject: verified.subject,
      roles: verified.roles,
      scopes: verified.scopes,
      // Read strictly by the verifier: a malformed partner claim never reaches here.
      partnerId: verified.partnerId,
      clientId: verified.clientId,
      vouchable: verified.vouchable !== false,
      audience: audienceOf(verified.claims),
      ...(typeof verified.claims.exp === "number" ? { expiresAt: new Date(verified.claims.exp * 1000) } : {}),
    };
  } catch (error) {
    throw tokenErrorToAuthorityError(error, "invalid_token");
  }
}

/** Like optionalPrincipal, but a missing token is `invalid_token` (401). */
export async function requirePrincipal(
  request: FastifyRequest,
  context: AuthorityContext,
): Promise<Principal> {
  const principal = await optionalPrincipal(request, context);
  if (principal === undefined) throw new AuthorityError("invalid_token", "A bearer token is required.");
  return principal;
}

/**
 * Authenticates every route of a group in `onRequest`, before its body is validated (so an
 * unauthenticated caller gets 401, not 400); returns the lookup the handlers use.
 */
export function authenticateAll(
  app: FastifyInstance,
  context: AuthorityContext,
  /** A further check on every principal of the group (throws to refuse). */
  admit?: (principal: Principal) => void,
): (request: FastifyRequest) => Principal {
  const principals = new WeakMap<FastifyRequest, Principal>();
  app.addHook("onRequest", async (request) => {
    const principal = await requirePrincipal(request, context);
    admit?.(principal);
    principals.set(request, principal);
  });
  return (request) => {
    const principal = principals.get(request);
    if (principal === undefined) throw new AuthorityError("invalid_token", "A bearer token is required.");
    return principal;
  };
}
