import { randomUUID } from "node:crypto";

/**
 * A caller's request id (`X-Request-Id`, Envoy's own) is kept, so that a decision, its
 * audit record and the caller's logs name the same request, only when it is short and plain:
 * it is echoed in headers, deny bodies, logs and records. It is a correlation field, never a
 * key — every record has its own random id — so a caller choosing another request's id
 * cannot overwrite or hide that request's record, only make its own record name it.
 */
const callerRequestId = /^[A-Za-z0-9._:-]{8,128}$/;

/** The caller's request id when acceptable, else undefined. */
export function acceptedRequestId(value: unknown): string | undefined {
  return typeof value === "string" && callerRequestId.test(value) ? value : undefined;
}

/** A caller-supplied X-Request-Id when acceptable; otherwise a fresh one. */
export function requestIdFrom(header: string | string[] | undefined): string {
  return acceptedRequestId(header) ?? `req_${randomUUID()}`;
}
