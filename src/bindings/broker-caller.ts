/**
 * Who may call `POST /v1/authority/verify` (spec: "bearer token from the identity provider
 * with scope authority/authority.broker.execute; bindingId must match the workload client"):
 *
 * - the authority's own workload token of an active client with the broker scope
 *   (authenticateWorkload, unchanged), or
 * - an access token of the configured identity provider carrying that scope and naming its
 *   partner connection in two claims the IdP sets for the client (`binding_id`,
 *   `partner_id`; registered claims a caller cannot choose). The binding must exist and
 *   belong to that partner.
 *
 * The token's (unverified) issuer only picks which verifier runs; each verifier checks
 * signature, issuer, audience and lifetime itself. Either way the caller ends up with one
 * server-side binding, and rule 1 (the request's bindingId equals it) is checked by
 * verifyEnvelope exactly as before (docs/decisions/0801-verify-accepts-idp-tokens.md).
 */
import { decodeJwt } from "jose";
import type { AdminDeps } from "../admin/deps.ts";
import { AuthorityError } from "../errors.ts";
import { extractBearer, hasScope } from "../identity/bearer.ts";
import { tokenErrorToAuthorityError } from "../identity/errors.ts";
import { type BindingRecord, BROKER_EXECUTE_SCOPE } from "../store/binding-model.ts";
import { authenticateWorkload } from "./authenticate.ts";
import { getBinding } from "./bindings.ts";
import type { BindingRuntime } from "./runtime.ts";

export interface BrokerCaller {
  readonly binding: BindingRecord;
  readonly via: "workload_token" | "identity_provider";
}

export interface IdentityProviderVerifier {
  /** The configured identity provider's issuer. */
  readonly issuer: string;
  verify(token: string): Promise<{
    readonly scopes: readonly string[];
    readonly tokenUse?: string | undefined;
    /** The partner claim, read strictly (VerifiedToken.partnerId). */
    readonly partnerId?: string | undefined;
    readonly claims: Readonly<Record<string, unknown>>;
  }>;
}

function unverifiedIssuer(token: string): string | undefined {
  try {
    const iss = decodeJwt(token).iss;
    return typeof iss === "string" ? iss : undefined;
  } catch {
    return undefined;
  }
}

const noConnection = () =>
  new AuthorityError("insufficient_role", "The token names no partner connection this service knows.");

async function identityProviderCaller(
  deps: Pick<AdminDeps, "store">,
  verifier: IdentityProviderVerifier,
  token: string,
): Promise<BrokerCaller> {
  let verified: Awaited<ReturnType<IdentityProviderVerifier["verify"]>>;
  try {
    verified = await verifier.verify(token);
  } catch (error) {
    throw tokenErrorToAuthorityError(error, "invalid_token");
  }
  // Only access tokens are bearer credentials (as on every other route; RFC 9068 / token_use).
  if (verified.tokenUse !== "access") {
    throw new AuthorityError("invalid_token", "An access token is required.");
  }
  if (!hasScope(verified, BROKER_EXECUTE_SCOPE)) {
    throw new AuthorityError("insufficient_role", `The token lacks the scope ${BROKER_EXECUTE_SCOPE}.`);
  }
  const { partnerId } = verified;
  const bindingId = verified.claims.binding_id;
  if (typeof bindingId !== "string" || bindingId === "" || partnerId === undefined) throw noConnection();
  let binding: BindingRecord;
  try {
    binding = await getBinding(deps, bindingId);
  } catch (error) {
    if (error instanceof AuthorityError && error.code === "not_found") throw noConnection();
    throw error;
  }
  if (binding.partner_id !== partnerId) throw noConnection();
  return { binding, via: "identity_provider" };
}

export async function authenticateBrokerCaller(
  runtime: BindingRuntime,
  deps: Pick<AdminDeps, "store">,
  identityProvider: IdentityProviderVerifier,
  authorization: string | string[] | undefined,
): Promise<BrokerCaller> {
  let token: string | undefined;
  try {
    token = extractBearer(authorization);
  } catch (error) {
    throw tokenErrorToAuthorityError(error, "invalid_token");
  }
  if (token === undefined) throw new AuthorityError("invalid_token", "A bearer token is required.");
  const issuer = unverifiedIssuer(token);
  if (issuer !== undefined && issuer === identityProvider.issuer && issuer !== runtime.tokens.issuer) {
    return identityProviderCaller(deps, identityProvider, token);
  }
  const workload = await authenticateWorkload(runtime, authorization, { scope: BROKER_EXECUTE_SCOPE });
  return { binding: workload.binding, via: "workload_token" };
}
