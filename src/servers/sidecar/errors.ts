/** A sidecar option or setting that cannot work, found at construction or start. */
export class SidecarConfigError extends Error {
  readonly code = "sidecar_config_invalid";

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "SidecarConfigError";
  }
}

/** A positive integer option (`fallback` when absent), checked at construction. */
export function positiveIntOption(
  value: number | undefined,
  fallback: number,
  name: string,
  max = Number.MAX_SAFE_INTEGER,
): number {
  const out = value ?? fallback;
  if (!Number.isSafeInteger(out) || out < 1 || out > max) {
    throw new SidecarConfigError(
      max === Number.MAX_SAFE_INTEGER
        ? `${name} must be a positive integer`
        : `${name} must be an integer from 1 to ${max}`,
    );
  }
  return out;
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
