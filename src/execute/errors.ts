import { AuthorityError, type ErrorCode } from "../errors.ts";

/**
 * Why an execution stopped. Each reason maps onto one row of the public error table
 * (src/errors.ts) so HTTP, MCP and gRPC callers answer the same way; the reason itself
 * travels in `details.reason` so clients and audit can tell the cases apart.
 */
export const executionErrorTable = {
  invalid_input: {
    code: "invalid_input",
    message: "The arguments do not match the operation's input schema.",
  },
  constraint_violation: {
    code: "constraint_violation",
    message: "The arguments violate the operation's parameter constraints.",
  },
  constraint_metadata_invalid: {
    code: "policy_verification_failed",
    message: "The operation's parameter constraint metadata is invalid.",
  },
  constraint_rollout_disabled: {
    code: "operation_not_allowed",
    message: "Parameter-constrained operations are not enabled for this partner.",
  },
  ambiguous_path: {
    code: "ambiguous_path",
    message: "The rendered upstream request would not address exactly the allowed operation.",
  },
  invalid_operation_snapshot: {
    code: "policy_verification_failed",
    message: "The operation snapshot cannot be executed.",
  },
  egress_denied: {
    code: "egress_denied",
    message: "The upstream destination is not allowed by the platform's egress policy.",
  },
  auth_profile_unavailable: {
    code: "upstream_unavailable",
    message: "The upstream auth profile could not provide credentials.",
  },
  user_grant_required: {
    code: "user_grant_required",
    message:
      "The end user has not connected this upstream account, or the grant expired or was revoked: connect first (start the user's grant), then retry.",
  },
  upstream_timeout: { code: "upstream_timeout", message: "The upstream did not answer in time." },
  upstream_unreachable: { code: "upstream_unavailable", message: "The upstream could not be reached." },
  redaction_failed: {
    code: "redaction_failed",
    message: "The upstream response must be redacted but is not plain JSON; it was not returned.",
  },
  scrub_failed: {
    code: "scrub_failed",
    message: "The upstream response could not be checked for injected credentials; it was not returned.",
  },
  upstream_response_too_large: {
    code: "upstream_unavailable",
    message: "The upstream response exceeded the size limit.",
  },
} as const satisfies Record<string, { code: ErrorCode; message: string }>;

export type ExecutionErrorReason = keyof typeof executionErrorTable;

/** What went wrong on the way to or from the upstream; never the upstream's own error text. */
export interface UpstreamError {
  /** `unusable`: the answer arrived but was refused (it could not be scrubbed or redacted). */
  readonly kind: "http_error" | "timeout" | "unreachable" | "too_large" | "unusable";
  readonly status?: number;
}

export interface ExecutionErrorOptions {
  /** Safe, public details (JSON pointers, keywords); merged with `{ reason }`. */
  readonly details?: Record<string, unknown>;
  /** Public message instead of the table's. */
  readonly message?: string;
  /** Set when the upstream was (or was about to be) called: for audit records. */
  readonly upstreamError?: UpstreamError;
  readonly requestHash?: string;
  readonly timings?: { readonly totalMs: number; readonly upstreamMs: number };
}

/**
 * A failure of the execution pipeline. `code` is the public error-table code (so
 * `toAuthorityError` and the HTTP/gRPC mappers pass it through unchanged); `reason` is
 * the execution-specific code. No cause is attached: upstream error text and secrets
 * must not reach a response or a log line.
 */
export class ExecutionError extends AuthorityError {
  readonly reason: ExecutionErrorReason;
  readonly upstreamError: UpstreamError | undefined;
  readonly requestHash: string | undefined;
  readonly timings: { readonly totalMs: number; readonly upstreamMs: number } | undefined;

  constructor(reason: ExecutionErrorReason, options: ExecutionErrorOptions = {}) {
    const row = executionErrorTable[reason];
    super(row.code, options.message ?? row.message, { details: { ...options.details, reason } });
    this.name = "ExecutionError";
    this.reason = reason;
    this.upstreamError = options.upstreamError;
    this.requestHash = options.requestHash;
    this.timings = options.timings;
  }
}
