import { positiveIntegerOption } from "../../core/positive-integer.ts";

/** A sidecar option or setting that cannot work, found at construction or start. */
export class SidecarConfigError extends Error {
  readonly code = "sidecar_config_invalid";

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "SidecarConfigError";
  }
}

const configFailure = (message: string): never => {
  throw new SidecarConfigError(message);
};

/** A positive integer option (`fallback` when absent; undefined: required), checked at construction. */
export function positiveIntOption(
  value: number | undefined,
  fallback: number | undefined,
  name: string,
  max = Number.MAX_SAFE_INTEGER,
): number {
  return positiveIntegerOption(value, fallback, name, configFailure, max);
}

/** The authority service could not be asked, or answered something unusable. */
export class AuthorityFetchError extends Error {
  readonly code = "authority_unavailable";
  readonly authorityCode = "upstream_unavailable" as const;
  readonly status: number | undefined;

  constructor(message: string, status?: number, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "AuthorityFetchError";
    this.status = status;
  }
}

/** What a log line may say about an error: name, code and HTTP status, never its message (it may quote a token or upstream text). */
export function errorSummary(error: unknown): Record<string, unknown> {
  if (!(error instanceof Error)) return { type: typeof error };
  const { code, status } = error as { code?: unknown; status?: unknown };
  return {
    name: error.name,
    ...(typeof code === "string" ? { code } : {}),
    ...(typeof status === "number" ? { status } : {}),
  };
}
