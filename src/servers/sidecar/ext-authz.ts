import { randomUUID } from "node:crypto";
import type { SidecarAllow, SidecarDecision, SidecarEngine } from "./engine.ts";
import type {
  AllowDecision,
  CheckDecision,
  CheckFunction,
  CheckInput,
  DenyDecision,
  DenyHttpStatus,
} from "./grpc/types.ts";

/**
 * ext_authz on top of the engine. An allow sets (OVERWRITE_IF_EXISTS_OR_ADD) the request id,
 * the permission id and the auth profile's upstream credentials, and removes the caller's
 * `Authorization` unless the credentials replace it — either way the caller's token never
 * reaches the upstream. Every other `x-authority-*` header the caller sent is removed too:
 * the upstream must be able to trust that namespace (the forward proxy strips it likewise),
 * and Envoy's ext_authz can only remove headers by exact name, which the caller chooses.
 * Decision facts go to `dynamic_metadata`. A deny is the engine's
 * status and reason; the transport (grpc/check-server.ts) writes the JSON body.
 */

export const REQUEST_ID_HEADER = "x-authority-request-id";
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
  headers: Readonly<Record<string, string>>,
  set: Readonly<Record<string, string>>,
): string[] {
  const setNames = new Set(Object.keys(set).map((name) => name.toLowerCase()));
  return Object.keys(headers)
    .map((name) => name.toLowerCase())
    .filter((name) => name.startsWith(RESERVED_PREFIX) && !setNames.has(name));
}

export function toCheckDecision(
  decision: SidecarDecision,
  callerHeaders: Readonly<Record<string, string>> = {},
): CheckDecision {
  if (!decision.allow) {
    const deny: DenyDecision = {
      allow: false,
      httpStatus: decision.httpStatus as DenyHttpStatus,
      reason: decision.reason,
      requestId: decision.requestId,
      ...(decision.headers === undefined ? {} : { headers: decision.headers }),
    };
    return deny;
  }
  const replacesAuthorization = Object.keys(decision.credentials.headers).some(
    (name) => name.toLowerCase() === "authorization",
  );
  const headersToSet = allowHeaders(decision);
  const allow: AllowDecision = {
    allow: true,
    headersToSet,
    headersToRemove: [
      ...(replacesAuthorization ? [] : ["authorization"]),
      ...callerReservedHeaders(callerHeaders, headersToSet),
    ],
    dynamicMetadata: decisionMetadata(decision),
    ...(Object.keys(decision.credentials.query).length === 0
      ? {}
      : { queryParametersToSet: decision.credentials.query }),
  };
  return allow;
}

export function createExtAuthzCheck(engine: SidecarEngine): CheckFunction {
  return (input: CheckInput, signal?: AbortSignal) => {
    const decision = engine.decide({
      transport: "grpc",
      authorization: input.headers.authorization,
      capabilityId: input.contextExtensions.capability_id,
      host: input.host,
      method: input.method,
      path: input.path,
      requestId: input.requestId ?? randomUUID(),
      ...(signal === undefined ? {} : { signal }),
    });
    // Synchronous when everything was cached: the transport answers without a microtask.
    return decision instanceof Promise
      ? decision.then((settled) => toCheckDecision(settled, input.headers))
      : toCheckDecision(decision, input.headers);
  };
}
