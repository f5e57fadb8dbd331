import { setOwn } from "../../../core/own-property.ts";
import {
  type DenyExplanation,
  type DenyRemedy,
  denyOutcome,
  errorCodes,
  GrpcCode,
  grpcCodeForStatus,
  isErrorCode,
} from "../../../errors.ts";
import type { CheckResponse, HeaderValueOption, ProtoStruct } from "./proto.ts";
import type { AllowDecision, CheckDecision, DenyDecision, DenyHttpStatus } from "./types.ts";

/**
 * Maps decisions to CheckResponse messages. Pure. A value that is not a well-formed decision
 * is never turned into an allow: `validateDecision` returns null and the caller denies.
 */

const denyStatuses: ReadonlySet<number> = new Set<DenyHttpStatus>([
  400, 401, 402, 403, 404, 405, 406, 407, 408, 409, 410, 411, 412, 413, 414, 415, 416, 417, 421, 422, 423,
  424, 426, 428, 429, 431, 500, 501, 502, 503, 504, 505, 506, 507, 508, 510, 511,
]);

/**
 * The google.rpc code sent beside a deny, from the one error table (src/errors.ts): the
 * reason's own gRPC code when the table gives the reason this very HTTP status, else the code
 * the table pairs with the status. Envoy treats every non-zero code as a deny, so the code is
 * informational — but never 0.
 */
export function rpcCodeFor(httpStatus: number, reason: string): number {
  if (isErrorCode(reason) && errorCodes[reason].status === httpStatus) return errorCodes[reason].grpc;
  return grpcCodeForStatus(httpStatus);
}

// RFC 9110 token; Envoy rejects header mutations outside it.
export const headerName = /^[!#$%&'*+\-.^_`|~0-9a-z]+$/;
// Field values may not hold CR, LF or NUL (RFC 9110 §5.5).
export const badHeaderValue = /[\r\n\0]/;

export type Bag = Readonly<Record<string, unknown>>;

export function bag(value: unknown): Bag | undefined {
  return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Bag) : undefined;
}

// The rules of a well-formed decision.

/** A header to set: a lower-cased token name and a value without CR, LF or NUL. */
export function isHeaderToSet(lowerName: string, value: unknown): value is string {
  return headerName.test(lowerName) && typeof value === "string" && !badHeaderValue.test(value);
}

/** A dynamic_metadata fact: a string, a boolean or a finite number. */
export function isMetadataFact(value: unknown): value is string | number | boolean {
  return (
    typeof value === "string" ||
    typeof value === "boolean" ||
    (typeof value === "number" && Number.isFinite(value))
  );
}

/** A query parameter to set: a non-empty name and a value, both without CR, LF or NUL. */
export function isQueryParameter(name: string, value: unknown): value is string {
  return (
    name !== "" && !badHeaderValue.test(name) && typeof value === "string" && !badHeaderValue.test(value)
  );
}

// The records below are built by for…in over own keys, without entry arrays or maps in between:
// they are made for every Check (docs/decisions/2961).

function headerRecord(value: unknown): Record<string, string> | null {
  const source = bag(value);
  if (source === undefined) return null;
  const out: Record<string, string> = {};
  for (const name in source) {
    if (!Object.hasOwn(source, name)) continue;
    const key = name.toLowerCase();
    const headerValue = source[name];
    if (!isHeaderToSet(key, headerValue)) return null;
    setOwn(out, key, headerValue);
  }
  return out;
}

function queryRecord(value: unknown): Record<string, string> | null {
  const source = bag(value);
  if (source === undefined) return null;
  const out: Record<string, string> = {};
  for (const [name, queryValue] of Object.entries(source)) {
    if (!isQueryParameter(name, queryValue)) return null;
    Object.defineProperty(out, name, {
      value: queryValue,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return out;
}

function metadataRecord(value: unknown): Record<string, string | number | boolean> | null {
  const source = bag(value);
  if (source === undefined) return null;
  for (const entry of Object.values(source)) {
    if (!isMetadataFact(entry)) return null;
  }
  return { ...(source as Record<string, string | number | boolean>) };
}

/**
 * Returns a normalized copy of `value` when it is a well-formed decision, else null.
 * Only `allow: true` (the boolean) can make an allow. Header names come back lower-cased.
 */
export function validateDecision(value: unknown): CheckDecision | null {
  const decision = bag(value);
  if (decision === undefined) return null;
  if (decision.allow === true) {
    const headersToSet = headerRecord(decision.headersToSet);
    const remove = decision.headersToRemove;
    const dynamicMetadata = metadataRecord(decision.dynamicMetadata);
    if (headersToSet === null || dynamicMetadata === null || !Array.isArray(remove)) return null;
    const headersToRemove: string[] = [];
    for (const name of remove) {
      if (typeof name !== "string" || !headerName.test(name.toLowerCase())) return null;
      headersToRemove.push(name.toLowerCase());
    }
    const responseHeadersToAdd =
      decision.responseHeadersToAdd === undefined ? undefined : headerRecord(decision.responseHeadersToAdd);
    if (responseHeadersToAdd === null) return null;
    const toClient = responseHeadersToAdd === undefined ? {} : { responseHeadersToAdd };
    if (decision.queryParametersToSet === undefined) {
      return { allow: true, headersToSet, headersToRemove, dynamicMetadata, ...toClient };
    }
    const queryParametersToSet = queryRecord(decision.queryParametersToSet);
    if (queryParametersToSet === null) return null;
    return { allow: true, headersToSet, headersToRemove, dynamicMetadata, queryParametersToSet, ...toClient };
  }
  if (decision.allow === false) {
    const { httpStatus, reason, requestId } = decision;
    if (typeof httpStatus !== "number" || !denyStatuses.has(httpStatus)) return null;
    if (typeof reason !== "string" || reason === "") return null;
    if (requestId !== undefined && typeof requestId !== "string") return null;
    const headers = decision.headers === undefined ? {} : headerRecord(decision.headers);
    if (headers === null) return null;
    const explanation = explanationOf(decision.explanation);
    return {
      allow: false,
      httpStatus: httpStatus as DenyHttpStatus,
      reason,
      requestId: requestId ?? "",
      headers,
      ...(explanation === undefined ? {} : { explanation }),
    };
  }
  return null;
}

/** A decision's rule and remedy, when well-formed (a rule string, a remedy naming its action); else none. */
function explanationOf(value: unknown): DenyExplanation | undefined {
  const rule = (value as { rule?: unknown } | null | undefined)?.rule;
  if (typeof rule !== "string" || rule === "" || rule.length > 256) return undefined;
  const remedy = (value as { remedy?: unknown }).remedy;
  const action = (remedy as { action?: unknown } | null | undefined)?.action;
  return typeof action === "string" ? { rule, remedy: remedy as DenyRemedy } : { rule };
}

function overwrite(key: string, value: string): HeaderValueOption {
  // append_action alone (no deprecated `append`): Envoy versions that know append_action
  // overwrite; older ones fall back to `append` unset = false, which also overwrites.
  return { header: { key, value }, append_action: "OVERWRITE_IF_EXISTS_OR_ADD" };
}

export function toStruct(values: Readonly<Record<string, string | number | boolean>>): ProtoStruct {
  const fields: ProtoStruct["fields"] = {};
  for (const key in values) {
    if (!Object.hasOwn(values, key)) continue;
    const value = values[key];
    setOwn(
      fields,
      key,
      typeof value === "string"
        ? { stringValue: value }
        : typeof value === "number"
          ? { numberValue: value }
          : { boolValue: value },
    );
  }
  return { fields };
}

function overwriteAll(headers: Readonly<Record<string, string>>): HeaderValueOption[] {
  const options: HeaderValueOption[] = [];
  for (const key in headers)
    if (Object.hasOwn(headers, key)) options.push(overwrite(key, headers[key] as string));
  return options;
}

export function allowResponse(decision: AllowDecision): CheckResponse {
  const query = decision.queryParametersToSet;
  const parameters: { key: string; value: string }[] = [];
  for (const key in query)
    if (Object.hasOwn(query, key)) parameters.push({ key, value: query[key] as string });
  return {
    status: { code: GrpcCode.OK },
    ok_response: {
      headers: overwriteAll(decision.headersToSet),
      headers_to_remove: [...decision.headersToRemove],
      ...(decision.responseHeadersToAdd === undefined
        ? {}
        : { response_headers_to_add: overwriteAll(decision.responseHeadersToAdd) }),
      ...(parameters.length === 0 ? {} : { query_parameters_to_set: parameters }),
    },
    dynamic_metadata: toStruct(decision.dynamicMetadata),
  };
}

/** The deny body: the spec's Deny outcome object. */
export function denyBody(reason: string, requestId: string, explanation?: DenyExplanation): string {
  return JSON.stringify(denyOutcome(reason, requestId, explanation));
}

/** Names the decision on the response, so a client's or Envoy's log matches the audit record. */
export const REQUEST_ID_HEADER = "x-authority-request-id";

export function denyResponse(decision: DenyDecision): CheckResponse {
  const { requestId, reason } = decision;
  const headers = [overwrite("content-type", "application/json")];
  if (requestId !== "") headers.push(overwrite(REQUEST_ID_HEADER, requestId));
  const extra = decision.headers;
  for (const key in extra) {
    // The body is JSON and the request id the decision's, whatever the decision's headers say.
    const name = key.toLowerCase();
    if (Object.hasOwn(extra, key) && name !== "content-type" && name !== REQUEST_ID_HEADER)
      headers.push(overwrite(key, extra[key] as string));
  }
  return {
    status: { code: rpcCodeFor(decision.httpStatus, reason), message: reason },
    denied_response: {
      status: { code: decision.httpStatus },
      headers,
      body: denyBody(reason, requestId, decision.explanation),
    },
    // Envoy's access log reads it as %DYNAMIC_METADATA(envoy.filters.http.ext_authz)%, as for an allow.
    ...(requestId === "" ? {} : { dynamic_metadata: toStruct({ request_id: requestId, reason }) }),
  };
}
