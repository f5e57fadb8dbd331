/**
 * One table of every failure the system reports: stable code → HTTP status, gRPC status
 * code and public message. Deny reasons of the spec are codes here too, so every path
 * (HTTP, MCP, ext_authz) turns the same failure into the same answer.
 */

/** gRPC status codes (google.rpc.Code) used when a failure crosses gRPC. */
export const GrpcCode = {
  OK: 0,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  UNAUTHENTICATED: 16,
} as const;

interface ErrorSpec {
  readonly status: number;
  readonly grpc: number;
  readonly message: string;
}

const deny = (status: number, grpc: number, message: string): ErrorSpec => ({ status, grpc, message });

/**
 * The ten deny reasons of the spec, plus the ones this system adds (each with its decision
 * record in docs/decisions/), with the HTTP status each deny outcome carries.
 */
export const denyReasons = {
  missing_subject: deny(401, GrpcCode.UNAUTHENTICATED, "No authenticated subject was supplied."),
  missing_capability: deny(400, GrpcCode.INVALID_ARGUMENT, "Capability context is absent."),
  unknown_capability: deny(403, GrpcCode.PERMISSION_DENIED, "Capability does not resolve."),
  missing_policy: deny(403, GrpcCode.PERMISSION_DENIED, "No policy artifact exists for the subject."),
  policy_verification_failed: deny(
    403,
    GrpcCode.PERMISSION_DENIED,
    "Policy artifact could not be decrypted and signature-verified.",
  ),
  subject_mismatch: deny(403, GrpcCode.PERMISSION_DENIED, "Verified policy belongs to another subject."),
  policy_revoked: deny(403, GrpcCode.PERMISSION_DENIED, "Policy is revoked."),
  policy_expired: deny(403, GrpcCode.PERMISSION_DENIED, "Policy is expired."),
  unknown_operation: deny(
    403,
    GrpcCode.PERMISSION_DENIED,
    "Method and path do not match the capability catalog.",
  ),
  operation_not_allowed: deny(
    403,
    GrpcCode.PERMISSION_DENIED,
    "Operation exists but its permission ID is not in the allowlist.",
  ),
  // docs/decisions/0301-ambiguous-path-values.md
  ambiguous_path: deny(
    403,
    GrpcCode.PERMISSION_DENIED,
    "A path parameter value could select another operation or breaks the parameter's declared schema.",
  ),
} as const satisfies Record<string, ErrorSpec>;

export type DenyReason = keyof typeof denyReasons;

/** Every other failure: request problems, authentication, faults. */
export const errorCodes = {
  ...denyReasons,
  invalid_user_assertion: deny(401, GrpcCode.UNAUTHENTICATED, "The end-user assertion was rejected."),
  invalid_token: deny(401, GrpcCode.UNAUTHENTICATED, "The bearer token is missing or invalid."),
  insufficient_role: deny(403, GrpcCode.PERMISSION_DENIED, "The caller's role does not allow this action."),
  // docs/mcp.md, "Scopes": a token issued for the MCP resource without the scope /mcp needs.
  insufficient_scope: deny(403, GrpcCode.PERMISSION_DENIED, "The token lacks a scope this request needs."),
  invalid_request: deny(400, GrpcCode.INVALID_ARGUMENT, "The request is malformed."),
  payload_too_large: deny(413, GrpcCode.RESOURCE_EXHAUSTED, "The request body is too large."),
  // docs/security.md, "Bounded work on caller input": nesting, members per object, pointer length.
  input_too_complex: deny(
    400,
    GrpcCode.INVALID_ARGUMENT,
    "The JSON input nests too deeply, has too many members or too long a path.",
  ),
  uri_too_long: deny(414, GrpcCode.INVALID_ARGUMENT, "A path segment is too long."),
  unsupported_media_type: deny(
    415,
    GrpcCode.INVALID_ARGUMENT,
    "Unsupported Content-Type; send application/json.",
  ),
  not_found: deny(404, GrpcCode.NOT_FOUND, "The resource does not exist."),
  conflict: deny(409, GrpcCode.FAILED_PRECONDITION, "The resource already exists or changed."),
  rate_limited: deny(429, GrpcCode.RESOURCE_EXHAUSTED, "Too many requests."),
  // docs/admin-api.md, "What-if replay": one per partner and two per replica (decision 2861).
  replay_busy: deny(
    429,
    GrpcCode.RESOURCE_EXHAUSTED,
    "A dry-run replay of this partner is already running, or this replica runs as many as it allows: retry after Retry-After seconds.",
  ),
  invalid_input: deny(
    400,
    GrpcCode.INVALID_ARGUMENT,
    "The arguments do not match the operation's input schema.",
  ),
  constraint_violation: deny(
    403,
    GrpcCode.PERMISSION_DENIED,
    "The arguments are outside the policy's parameter constraints.",
  ),
  request_body_required: deny(
    403,
    GrpcCode.PERMISSION_DENIED,
    "The request body is needed to enforce the policy and was not received whole: enable with_request_body on the Envoy ext_authz filter (max_request_bytes above the largest body, allow_partial_message false).",
  ),
  egress_denied: deny(
    403,
    GrpcCode.PERMISSION_DENIED,
    "The upstream destination is not allowed by the platform's egress policy.",
  ),
  // docs/execution.md, "User OAuth": the end user has no usable grant for the auth profile.
  user_grant_required: deny(
    403,
    GrpcCode.PERMISSION_DENIED,
    "The end user has not connected this upstream account, or the grant expired or was revoked: connect first (start the user's grant), then retry.",
  ),
  // docs/admin-api.md, "User grants": a callback whose state cannot complete a grant.
  oauth_state_invalid: deny(
    400,
    GrpcCode.INVALID_ARGUMENT,
    "The authorization state is unknown, expired, already used, or was issued for another user or profile: start the user's grant again.",
  ),
  idempotency_key_required: deny(400, GrpcCode.INVALID_ARGUMENT, "An Idempotency-Key header is required."),
  idempotency_conflict: deny(
    422,
    GrpcCode.FAILED_PRECONDITION,
    "This Idempotency-Key was already used with a different request.",
  ),
  // docs/bindings.md, "Idempotency": the replica that ran this key stopped after the upstream
  // call may have been sent; running it again could execute the operation twice (decision 2751).
  idempotency_outcome_unknown: deny(
    409,
    GrpcCode.FAILED_PRECONDITION,
    "A request with this Idempotency-Key may have reached the upstream, but its outcome was not kept: it is not run again. Check the upstream's state, then retry with a new Idempotency-Key.",
  ),
  invalid_credentials: deny(403, GrpcCode.PERMISSION_DENIED, "The partner credentials were rejected."),
  invalid_ciphertext: deny(
    400,
    GrpcCode.INVALID_ARGUMENT,
    "The encrypted data is not valid for these credentials, or it was altered.",
  ),
  // The spec's "Authority verify statuses" answer an invalid signature with 403; the managed
  // API and the crypto service use the same code, so the same status.
  invalid_signature: deny(403, GrpcCode.PERMISSION_DENIED, "The signed data could not be verified."),
  // POST /v1/authority/verify (spec: "Authority verify statuses"; docs/bindings.md).
  unknown_profile: deny(400, GrpcCode.INVALID_ARGUMENT, "The authority profile is not supported."),
  unsupported_operation: deny(
    400,
    GrpcCode.INVALID_ARGUMENT,
    "The operation is not supported by this profile for this binding.",
  ),
  invalid_arguments: deny(400, GrpcCode.INVALID_ARGUMENT, "The arguments are not valid for this profile."),
  binding_mismatch: deny(
    403,
    GrpcCode.PERMISSION_DENIED,
    "The binding does not match the workload client's binding.",
  ),
  binding_inactive: deny(403, GrpcCode.PERMISSION_DENIED, "The binding is not active."),
  signer_mismatch: deny(
    403,
    GrpcCode.PERMISSION_DENIED,
    "The envelope was not signed by the expected signer.",
  ),
  invalid_envelope: deny(
    403,
    GrpcCode.PERMISSION_DENIED,
    "The envelope content is not valid for this profile.",
  ),
  profile_mismatch: deny(403, GrpcCode.PERMISSION_DENIED, "The envelope was issued for another profile."),
  issuer_mismatch: deny(403, GrpcCode.PERMISSION_DENIED, "The envelope issuer does not match."),
  audience_mismatch: deny(403, GrpcCode.PERMISSION_DENIED, "The envelope audience does not match."),
  operation_mismatch: deny(403, GrpcCode.PERMISSION_DENIED, "The envelope was issued for another operation."),
  permission_mismatch: deny(
    403,
    GrpcCode.PERMISSION_DENIED,
    "The envelope permission does not match the operation.",
  ),
  decision_denied: deny(403, GrpcCode.PERMISSION_DENIED, "The envelope does not carry an allow decision."),
  lifetime_exceeded: deny(
    403,
    GrpcCode.PERMISSION_DENIED,
    "The envelope lifetime exceeds the profile maximum.",
  ),
  envelope_expired: deny(403, GrpcCode.PERMISSION_DENIED, "The envelope is outside its validity window."),
  digest_mismatch: deny(403, GrpcCode.PERMISSION_DENIED, "The arguments do not match the envelope's digest."),
  crypto_unavailable: deny(503, GrpcCode.UNAVAILABLE, "Envelope verification is unavailable."),
  subject_keys_unavailable: deny(
    503,
    GrpcCode.UNAVAILABLE,
    "The subject's policy keys are missing or unusable at the crypto service.",
  ),
  upstream_error: deny(502, GrpcCode.UNAVAILABLE, "The upstream answered with an unusable response."),
  redaction_failed: deny(
    502,
    GrpcCode.UNAVAILABLE,
    "The upstream response must be redacted but is not plain JSON; it was not returned.",
  ),
  scrub_failed: deny(
    502,
    GrpcCode.UNAVAILABLE,
    "The upstream response could not be checked for injected credentials; it was not returned.",
  ),
  upstream_timeout: deny(504, GrpcCode.DEADLINE_EXCEEDED, "The upstream did not answer in time."),
  upstream_unavailable: deny(503, GrpcCode.UNAVAILABLE, "A required service is unavailable."),
  internal: deny(500, GrpcCode.INTERNAL, "Internal error."),
} as const satisfies Record<string, ErrorSpec>;

export type ErrorCode = keyof typeof errorCodes;

export function isDenyReason(code: string): code is DenyReason {
  return Object.hasOwn(denyReasons, code);
}

export function isErrorCode(code: string): code is ErrorCode {
  return Object.hasOwn(errorCodes, code);
}

/**
 * The gRPC code the table pairs with an HTTP status (the table gives every status one gRPC
 * code; a test keeps it so), for an answer whose reason is not a code of the table. A status
 * the table does not use is UNAVAILABLE when 5xx and PERMISSION_DENIED otherwise: never OK.
 */
export function grpcCodeForStatus(status: number): number {
  for (const spec of Object.values(errorCodes) as ErrorSpec[]) if (spec.status === status) return spec.grpc;
  return status >= 500 ? GrpcCode.UNAVAILABLE : GrpcCode.PERMISSION_DENIED;
}

/**
 * A failure with a stable code. `details` is public (safe to return to callers);
 * `cause` is for logs only and never serialized into a response.
 */
export class AuthorityError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly details: Readonly<Record<string, unknown>> | undefined;
  /**
   * The caller's mistake although the status is a 5xx (the managed API answers wrong
   * identity-provider credentials with 500, as its spec says): logged as a rejection, not a fault.
   */
  readonly callerFault: boolean;

  constructor(
    code: ErrorCode,
    message?: string,
    options?: { details?: Record<string, unknown>; cause?: unknown; callerFault?: boolean },
  ) {
    super(
      message ?? errorCodes[code].message,
      options?.cause === undefined ? undefined : { cause: options.cause },
    );
    this.name = "AuthorityError";
    this.code = code;
    this.status = errorCodes[code].status;
    this.details = options?.details;
    this.callerFault = options?.callerFault ?? this.status < 500;
  }

  get grpcCode(): number {
    return errorCodes[this.code].grpc;
  }

  /** The public body: never a stack, a cause or an internal message. */
  toJSON(): { error: ErrorCode; message: string; details?: Readonly<Record<string, unknown>> } {
    return this.details === undefined
      ? { error: this.code, message: this.message }
      : { error: this.code, message: this.message, details: this.details };
  }
}

/**
 * The stable rule vocabulary (docs/errors.md, "Deny rules"): which rule of the pipeline decided a
 * deny, `<stage>/<rule>`. A step that knows more names a finer rule of the same stage (the
 * decision step says `decide/constraints-rollout` or `binding/experience` for an
 * `operation_not_allowed`; a signed constraint says `constraints/<keyword>:<location>.<name>`);
 * anything else is the code's rule here. Never a value the caller sent, never a secret.
 */
export const denyRules = {
  missing_subject: "auth/subject",
  invalid_token: "auth/token",
  invalid_user_assertion: "auth/user-assertion",
  insufficient_scope: "auth/scope",
  missing_capability: "request/capability",
  unknown_capability: "catalog/capability",
  missing_policy: "policy/missing",
  policy_verification_failed: "policy/verification",
  subject_mismatch: "policy/subject",
  policy_revoked: "policy/revoked",
  policy_expired: "policy/expired",
  unknown_operation: "catalog/operation",
  operation_not_allowed: "decide/allowlist",
  ambiguous_path: "decide/path-values",
  invalid_input: "input/schema",
  constraint_violation: "constraints/parameter",
  request_body_required: "input/body-required",
  egress_denied: "egress/destination",
  user_grant_required: "grant/user",
  upstream_unavailable: "service/unavailable",
  internal: "service/internal",
} as const satisfies Partial<Record<ErrorCode, string>>;

/** The finer rules a step may name instead of its code's (see denyRules). */
export const refinedDenyRules = {
  constraintsRollout: "decide/constraints-rollout",
  bindingExperience: "binding/experience",
  /** Prefix of `constraints/<keyword>:<location>.<name>`. */
  constraint: "constraints/",
} as const;

/** The rule of a code when no step named a finer one: its own rule, else `<code's stage>/<code>`. */
export function denyRuleOf(code: string): string {
  if (Object.hasOwn(denyRules, code)) return denyRules[code as keyof typeof denyRules];
  return `service/${code}`;
}

/**
 * What a client can do about a deny, where something exists: ask for the permission (only
 * named where the caller's own verified policy covers the capability and the request matched
 * one of its operations — never for an unknown operation, a missing policy or another
 * subject), step up to a scope, contact the partner (a revoked or expired policy), connect
 * the user's grant, send the body, or retry later (an outage).
 */
export type DenyRemedy =
  | { readonly action: "request_permission"; readonly permission_id: string }
  | { readonly action: "step_up_scope"; readonly scope: string }
  | { readonly action: "contact_partner" }
  | { readonly action: "connect_user_grant" }
  | { readonly action: "send_request_body" }
  | { readonly action: "retry_later" };

/** The rule and remedy of a deny, as the step that refused knows them. */
export interface DenyExplanation {
  readonly rule: string;
  readonly remedy?: DenyRemedy | undefined;
}

const STATIC_REMEDIES: Readonly<Record<string, DenyRemedy>> = {
  policy_revoked: { action: "contact_partner" },
  policy_expired: { action: "contact_partner" },
  user_grant_required: { action: "connect_user_grant" },
  request_body_required: { action: "send_request_body" },
  upstream_unavailable: { action: "retry_later" },
};

/**
 * The explanation of a deny: what the refusing step named, else the code's rule and its
 * remedy that reveals nothing (a revoked policy, an outage). Every path reads it from here.
 */
export function explainDeny(code: string, named?: DenyExplanation): DenyExplanation {
  const rule = named?.rule ?? denyRuleOf(code);
  const remedy = named?.remedy ?? (Object.hasOwn(STATIC_REMEDIES, code) ? STATIC_REMEDIES[code] : undefined);
  return remedy === undefined ? { rule } : { rule, remedy };
}

/** The spec's Deny outcome object: the body of every deny, on every path that answers one. */
export interface DenyOutcome {
  readonly status: "denied";
  readonly reason: string;
  readonly requestId: string;
  /** The rule that decided it (denyRules). */
  readonly rule: string;
  readonly remedy?: DenyRemedy;
}

/**
 * The one deny-body builder (authorize-invocation, invoke, broker, the sidecar's two
 * transports, MCP's deny result): the reason, the rule that decided it and a remedy where one
 * exists (explainDeny).
 */
export function denyOutcome(reason: string, requestId: string, named?: DenyExplanation): DenyOutcome {
  const { rule, remedy } = explainDeny(reason, named);
  return remedy === undefined
    ? { status: "denied", reason, requestId, rule }
    : { status: "denied", reason, requestId, rule, remedy };
}

/** One entry of a component's reason table: the error-table code it is answered with and a fixed message. */
export interface ReasonSpec {
  readonly code: ErrorCode;
  readonly message: string;
  /** Set where a 5xx code answers the caller's own mistake (see AuthorityError.callerFault). */
  readonly callerFault?: boolean;
}

/**
 * What a module error says of itself to be answered from the table — the one way onto it:
 * `toAuthorityError` reads these fields and nothing else. `authorityCode` names the entry;
 * the rest is optional and public (never a value the caller sent, never a secret).
 */
export interface TableMapped {
  readonly authorityCode: ErrorCode;
  /** Public details (`reason`, field names…); absent: none. */
  readonly authorityDetails?: Readonly<Record<string, unknown>> | undefined;
  /** A fixed public message; absent: the table's. */
  readonly publicMessage?: string | undefined;
  /** See AuthorityError.callerFault; absent: from the status. */
  readonly callerFault?: boolean | undefined;
}

/**
 * A component failure with a stable `reason` of its own table, answered with the table
 * entry's code and `details.reason` (plus `details.fields`: field or header names, never
 * values). `cause` is for logs only.
 */
export class ReasonError<R extends string> extends Error implements TableMapped {
  readonly reason: R;
  readonly fields: readonly string[] | undefined;
  readonly #spec: ReasonSpec;

  constructor(
    spec: ReasonSpec,
    reason: R,
    options?: { message?: string; fields?: readonly string[]; cause?: unknown },
  ) {
    super(
      options?.message ?? spec.message,
      options?.cause === undefined ? undefined : { cause: options.cause },
    );
    this.reason = reason;
    this.fields = options?.fields;
    this.#spec = spec;
  }

  get authorityCode(): ErrorCode {
    return this.#spec.code;
  }

  get authorityDetails(): Readonly<Record<string, unknown>> {
    return this.fields === undefined
      ? { reason: this.reason }
      : { reason: this.reason, fields: [...this.fields] };
  }

  get publicMessage(): string {
    return this.message;
  }

  get callerFault(): boolean | undefined {
    return this.#spec.callerFault;
  }
}

function isTableMapped(error: unknown): error is TableMapped {
  const code = (error as { authorityCode?: unknown } | null)?.authorityCode;
  return typeof code === "string" && Object.hasOwn(errorCodes, code);
}

/**
 * Turns anything thrown into an AuthorityError: an AuthorityError as it is, a module error
 * by what it says of itself (TableMapped), anything else `internal`.
 */
export function toAuthorityError(error: unknown): AuthorityError {
  if (error instanceof AuthorityError) return error;
  if (!isTableMapped(error)) return new AuthorityError("internal", undefined, { cause: error });
  const { authorityDetails: details, callerFault } = error;
  return new AuthorityError(error.authorityCode, error.publicMessage, {
    cause: error,
    ...(details === undefined ? {} : { details: { ...details } }),
    ...(callerFault === undefined ? {} : { callerFault }),
  });
}
