/**
 * Authentication of the headless runtime paths: the binding-scoped workload token
 * (steps 1–2 of binding invoke) and the partner's user assertion (steps 3–4).
 */
import { AuthorityError } from "../errors.ts";
import { extractBearer } from "../identity/bearer.ts";
import { tokenErrorToAuthorityError } from "../identity/errors.ts";
import type { VerifiedToken } from "../identity/jwt-verifier.ts";
import { traced } from "../observability/tracing.ts";
import type { BindingRecord, WorkloadClientRecord, WorkloadScope } from "../store/binding-model.ts";
import { USER_ASSERTION_HEADER } from "./assertions.ts";
import { type DerivedSubject, deriveExternalSubject } from "./derive.ts";
import type { BindingRuntime } from "./runtime.ts";
import { TokenKeyError } from "./token-keys.ts";
import type { WorkloadTokenClaims } from "./workload-tokens.ts";

export interface AuthenticatedWorkload {
  readonly client: WorkloadClientRecord;
  readonly binding: BindingRecord;
  readonly token: WorkloadTokenClaims;
}

export interface AuthenticatedUser {
  readonly assertion: VerifiedToken;
  /** The verified assertion itself: exchanged for token-exchange profiles, never forwarded or logged. */
  readonly token: string;
  readonly derived: DerivedSubject;
}

type HeaderValue = string | string[] | undefined;

const unknownClient = () => new AuthorityError("invalid_token", "The workload client is unknown or revoked.");

/**
 * Steps 1–2: a valid workload token of a known, active client (checked before anything
 * about the route), then the route's binding must be the client's own, server-side
 * binding; then the scope the path needs.
 */
export async function authenticateWorkload(
  runtime: BindingRuntime,
  authorization: HeaderValue,
  required: { readonly scope: WorkloadScope; readonly routeBindingId?: string },
): Promise<AuthenticatedWorkload> {
  let token: string | undefined;
  try {
    token = extractBearer(authorization);
  } catch (error) {
    throw tokenErrorToAuthorityError(error, "invalid_token");
  }
  if (token === undefined) throw new AuthorityError("invalid_token", "A workload bearer token is required.");
  let claims: WorkloadTokenClaims;
  try {
    claims = await traced("authority.verify_token", () => runtime.tokens.verify(token));
  } catch (error) {
    if (error instanceof TokenKeyError)
      throw new AuthorityError("upstream_unavailable", undefined, { cause: error });
    throw tokenErrorToAuthorityError(error, "invalid_token");
  }
  const client = await runtime.records.client(claims.clientId);
  if (
    client === undefined ||
    client.status !== "active" ||
    client.binding_id !== claims.bindingId ||
    client.partner_id !== claims.partnerId
  ) {
    throw unknownClient();
  }
  if (required.routeBindingId !== undefined && required.routeBindingId !== client.binding_id) {
    throw new AuthorityError("insufficient_role", "The workload client is not bound to this binding.");
  }
  if (!client.scopes.includes(required.scope) || !claims.scopes.includes(required.scope)) {
    throw new AuthorityError("insufficient_role", `The workload token lacks the scope ${required.scope}.`);
  }
  let binding: BindingRecord;
  try {
    binding = await runtime.records.binding(client.binding_id);
  } catch (error) {
    if (error instanceof AuthorityError && error.code === "not_found") throw unknownClient();
    throw error;
  }
  if (binding.partner_id !== client.partner_id) throw unknownClient();
  return { client, binding, token: claims };
}

/** Steps 3–4: the user assertion against the binding, then the subject derived from it. */
export async function authenticateUser(
  runtime: BindingRuntime,
  binding: BindingRecord,
  assertionHeader: HeaderValue,
): Promise<AuthenticatedUser> {
  const value = typeof assertionHeader === "string" ? assertionHeader : undefined;
  const assertion = await traced("authority.verify_token", () => runtime.assertions.verify(binding, value));
  return {
    assertion,
    token: value ?? "",
    derived: deriveExternalSubject(binding, binding.issuer, assertion.subject),
  };
}

export { USER_ASSERTION_HEADER };
