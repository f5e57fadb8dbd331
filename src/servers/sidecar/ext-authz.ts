import { randomUUID } from "node:crypto";
import { RECEIPT_HEADER } from "../../audit/receipts.ts";
import type { SidecarAllow, SidecarDecision, SidecarEngine } from "../../pipeline/check.ts";
import { declaredHeaders, type HeaderBag, type RequestBody } from "../../pipeline/request-arguments.ts";
import { REQUEST_ID_HEADER } from "./grpc/check-response.ts";
import type {
  AllowDecision,
  CheckDecision,
  CheckFunction,
  CheckInput,
  DenyDecision,
  DenyHttpStatus,
} from "./grpc/types.ts";
import { headersToRemove } from "./request-input.ts";

/**
 * ext_authz on top of the engine. An allow sets (OVERWRITE_IF_EXISTS_OR_ADD) the request id,
 * the permission id and the auth profile's upstream credentials, and removes (headers_to_remove)
 * every caller header the upstream must not see: the caller's credentials unless the
 * injected ones replace them, every client-sent `x-authority-*`, routing overrides and any
 * header neither declared by the snapshot nor in the forwarded set (request-input.ts). The
 * upstream must be able to trust the `x-authority-*` namespace, and Envoy can only remove
 * headers by exact name, which the caller chooses. Decision facts go to `dynamic_metadata`.
 * A deny is the engine's status and reason; the transport (grpc/check-server.ts) writes the
 * JSON body.
 */

/**
 * Per-route `context_extensions` key: `keep` forwards the caller's own `Authorization` to the
 * upstream (an authorization-only route whose upstream checks the same token); anything else,
 * or nothing, removes it. Envoy's route configuration sets it; the caller cannot.
 */
export const CALLER_AUTHORIZATION_EXTENSION = "caller_authorization";

export { REQUEST_ID_HEADER };
export const PERMISSION_ID_HEADER = "x-authority-permission-id";

/** What an allow tells the upstream, the same on both transports. */
export function allowHeaders(decision: SidecarAllow): Record<string, string> {
  return {
    ...decision.credentials.headers,
    [REQUEST_ID_HEADER]: decision.requestId,
    [PERMISSION_ID_HEADER]: decision.permissionId,
  };
}

export function decisionMetadata(decision: SidecarAllow): Record<string, string | number | boolean> {
  const rules = decision.operation.response_rules.length + decision.redactions.length;
  // Each Struct field costs encoding time on every allow: facts only, the rest is in metrics.
  return {
    request_id: decision.requestId,
    subject_id: decision.subjectId,
    partner_id: decision.partnerId,
    capability_id: decision.capabilityId,
    permission_id: decision.permissionId,
    policy_head: decision.policyHead,
    // ext_authz cannot rewrite responses: operations with rules belong behind the forward proxy.
    response_redaction_rules: rules,
  };
}

const RESERVED_PREFIX = "x-authority-";

/** The caller's `x-authority-*` header names that an allow does not overwrite. */
export function callerReservedHeaders(
  headers: Readonly<Record<string, unknown>>,
  set: Readonly<Record<string, string>>,
): string[] {
  // A loop, not key arrays and a set: it runs on every allow.
  const names: string[] = [];
  for (const raw in headers) {
    if (!Object.hasOwn(headers, raw)) continue;
    const name = raw.toLowerCase();
    if (name.startsWith(RESERVED_PREFIX) && !setsName(set, name)) names.push(name);
  }
  return names;
}

function setsName(set: Readonly<Record<string, string>>, lowerName: string): boolean {
  for (const name in set) if (Object.hasOwn(set, name) && name.toLowerCase() === lowerName) return true;
  return false;
}

/** Envoy's marker of a body cut at max_request_bytes (allow_partial_message: true). */
export const PARTIAL_BODY_HEADER = "x-envoy-auth-partial-body";

/**
 * The body as Envoy sent it; absent when it sent none (with_request_body off, or no body).
 * The marker alone proves nothing: without with_request_body Envoy passes a client's own
 * `x-envoy-auth-partial-body: false` through, so only a body Envoy actually sent counts.
 */
export function checkBody(input: CheckInput): RequestBody | undefined {
  if (input.headers[PARTIAL_BODY_HEADER] === "true") return { state: "partial" };
  return input.body === undefined ? undefined : { state: "complete", bytes: input.body };
}

export function toCheckDecision(
  decision: SidecarDecision,
  requestHeaders: HeaderBag = {},
  route: { readonly keepCallerAuthorization?: boolean } = {},
): CheckDecision {
  // The record's receipt goes back to the client on either answer (Envoy passes it on).
  const { receipt } = decision;
  const toClient = receipt === undefined ? undefined : { [RECEIPT_HEADER]: receipt };
  if (!decision.allow) {
    const headers =
      decision.headers === undefined && toClient === undefined
        ? undefined
        : { ...decision.headers, ...toClient };
    const deny: DenyDecision = {
      allow: false,
      httpStatus: decision.httpStatus as DenyHttpStatus,
      reason: decision.reason,
      requestId: decision.requestId,
      ...(headers === undefined ? {} : { headers }),
      ...(decision.explanation === undefined ? {} : { explanation: decision.explanation }),
    };
    return deny;
  }
  const headersToSet = allowHeaders(decision);
  const setByAllow: Record<string, string> = {};
  for (const name in headersToSet) setByAllow[name.toLowerCase()] = "";
  let remove = headersToRemove(requestHeaders, declaredHeaders(decision.operation), setByAllow);
  if (route.keepCallerAuthorization === true && !Object.hasOwn(setByAllow, "authorization")) {
    // The route forwards the caller's own token (authorization only); injected credentials
    // would still replace it (set wins).
    remove = remove.filter((name) => name !== "authorization");
  } else if (!Object.hasOwn(setByAllow, "authorization") && !remove.includes("authorization")) {
    // The caller's token goes even when the request did not show it to us.
    remove.push("authorization");
  }
  // The x-authority-* namespace in any spelling, whatever the forwarded set says.
  for (const name of callerReservedHeaders(requestHeaders, headersToSet))
    if (!remove.includes(name)) remove.push(name);
  const allow: AllowDecision = {
    allow: true,
    headersToSet,
    headersToRemove: remove,
    dynamicMetadata: decisionMetadata(decision),
    ...(toClient === undefined ? {} : { responseHeadersToAdd: toClient }),
    ...(Object.keys(decision.credentials.query).length === 0
      ? {}
      : { queryParametersToSet: decision.credentials.query }),
  };
  return allow;
}

export function createExtAuthzCheck(engine: SidecarEngine): CheckFunction {
  return (input: CheckInput, signal?: AbortSignal) => {
    const body = checkBody(input);
    const decision = engine.decide({
      transport: "grpc",
      authorization: input.headers.authorization,
      capabilityId: input.contextExtensions.capability_id,
      host: input.host,
      method: input.method,
      path: input.path,
      headers: input.headers,
      ...(body === undefined ? {} : { body }),
      requestId: input.requestId ?? randomUUID(),
      ...(signal === undefined ? {} : { signal }),
    });
    const route = {
      keepCallerAuthorization: input.contextExtensions[CALLER_AUTHORIZATION_EXTENSION] === "keep",
    };
    // Synchronous when everything was cached: the transport answers without a microtask.
    return decision instanceof Promise
      ? decision.then((settled) => toCheckDecision(settled, input.headers, route))
      : toCheckDecision(decision, input.headers, route);
  };
}
