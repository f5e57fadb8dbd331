/**
 * Failures of the ext_authz gRPC server itself (configuration and lifecycle). They reach the
 * operator starting the sidecar, never an Envoy caller: a Check call always gets a CheckResponse.
 */

export type CheckServerErrorCode = "invalid_options" | "already_listening" | "closed" | "bind_failed";

export class CheckServerError extends Error {
  readonly code: CheckServerErrorCode;

  constructor(code: CheckServerErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "CheckServerError";
    this.code = code;
  }
}
