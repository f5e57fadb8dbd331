import type { DenyExplanation } from "../../../errors.ts";
/**
 * The contract between the ext_authz transport and the decision function injected into it.
 * The transport knows nothing about policies; the engine knows nothing about protobuf.
 */

/** One HTTP request as Envoy describes it, parsed from a CheckRequest. */
export interface CheckInput {
  /** As sent (`GET`, `POST`, …); empty when absent. */
  readonly method: string;
  /** The request target as Envoy sends it: path plus query string, not decoded. */
  readonly path: string;
  /** `Host` / `:authority`. */
  readonly host: string;
  /** `http` or `https`; empty when absent. */
  readonly scheme: string;
  /** Lower-cased names; repeated headers merged with `, ` (`; ` for cookie). Includes pseudo headers. */
  readonly headers: Readonly<Record<string, string>>;
  /** Per-route `context_extensions` from the Envoy config (e.g. a capability id). */
  readonly contextExtensions: Readonly<Record<string, string>>;
  /** `HttpRequest.id` (Envoy's x-request-id), else the x-request-id header. */
  readonly requestId?: string;
  /** `source.principal`, e.g. the SPIFFE ID of the mTLS peer. */
  readonly sourcePrincipal?: string;
  /**
   * The body Envoy sent (with_request_body): `raw_body` bytes, else `body` text; absent when
   * none was sent. Whether it is whole is Envoy's `x-envoy-auth-partial-body` header.
   */
  readonly body?: Uint8Array | string;
}

export interface AllowDecision {
  readonly allow: true;
  /** Set on the upstream request, overwriting any value the client sent. */
  readonly headersToSet: Readonly<Record<string, string>>;
  /** Removed from the upstream request (e.g. the caller's bearer token). */
  readonly headersToRemove: readonly string[];
  /** Emitted as Envoy dynamic metadata under the ext_authz filter namespace. */
  readonly dynamicMetadata: Readonly<Record<string, string | number | boolean>>;
  /** Query parameters set on the upstream request (e.g. an API key an auth profile sends in the query). */
  readonly queryParametersToSet?: Readonly<Record<string, string>>;
  /** Added to the response Envoy sends back to the client (the decision's receipt). */
  readonly responseHeadersToAdd?: Readonly<Record<string, string>>;
}

/** HTTP statuses a deny may carry: 4xx and 5xx codes of Envoy's `envoy.type.v3.StatusCode`. */
export type DenyHttpStatus =
  | 400
  | 401
  | 402
  | 403
  | 404
  | 405
  | 406
  | 407
  | 408
  | 409
  | 410
  | 411
  | 412
  | 413
  | 414
  | 415
  | 416
  | 417
  | 421
  | 422
  | 423
  | 424
  | 426
  | 428
  | 429
  | 431
  | 500
  | 501
  | 502
  | 503
  | 504
  | 505
  | 506
  | 507
  | 508
  | 510
  | 511;

export interface DenyDecision {
  readonly allow: false;
  readonly httpStatus: DenyHttpStatus;
  /** A public reason code (see src/errors.ts), e.g. `policy_revoked`. */
  readonly reason: string;
  /** Empty: the transport uses the request's id (or makes one). */
  readonly requestId: string;
  /** Extra response headers to the client, e.g. `www-authenticate` for a 401. */
  readonly headers?: Readonly<Record<string, string>>;
  /** The refusing step's rule and remedy (src/errors.ts explainDeny fills in the rest). */
  readonly explanation?: DenyExplanation;
}

export type CheckDecision = AllowDecision | DenyDecision;

/**
 * The injected decision function. It must stop work when `signal` aborts. It may answer
 * synchronously (a decision from caches) or with a promise.
 */
/** The Check call's gRPC metadata (grpc-js `Metadata`): Envoy's own trace headers when it traces. */
export interface CallMetadata {
  get(key: string): ReadonlyArray<string | Buffer>;
}

export type CheckFunction = (
  input: CheckInput,
  signal: AbortSignal,
  metadata?: CallMetadata,
) => CheckDecision | Promise<CheckDecision>;

/**
 * How a Check call ended, for metrics:
 * - `allow` / `deny`: the decision function answered;
 * - `invalid_request`: the request was undecodable or had no HTTP method/path (deny 400);
 * - `invalid_decision`: the function returned something that is not a valid decision (deny 403);
 * - `error`: the function threw or rejected (deny per the error, else 500 `internal`);
 * - `timeout`: no answer within the deadline (deny 503 `upstream_unavailable`);
 * - `cancelled`: the caller went away; nothing was sent.
 */
export type CheckOutcome =
  | "allow"
  | "deny"
  | "invalid_request"
  | "invalid_decision"
  | "error"
  | "timeout"
  | "cancelled";

export interface DecisionEvent {
  readonly outcome: CheckOutcome;
  readonly allowed: boolean;
  /** 200 for an allow, the denied response's status otherwise; 0 when cancelled. */
  readonly httpStatus: number;
  /** google.rpc.Code sent in CheckResponse.status. */
  readonly rpcCode: number;
  /** The deny reason; null for allow and cancelled. */
  readonly reason: string | null;
  readonly requestId: string;
  readonly durationMs: number;
}
