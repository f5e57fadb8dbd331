/**
 * The `Origin` check of the MCP endpoint (the Streamable HTTP transport's defence against
 * DNS rebinding: a browser page on another site must not reach a local or internal
 * server). Pure. Non-browser clients send no Origin and are allowed; a browser's Origin
 * must be on the allowlist exactly (scheme, host and port); `null` never is.
 */

/** "https://Example.COM:443/" → "https://example.com"; undefined for anything that is not an http(s) origin. */
export function normalizeOrigin(value: string): string | undefined {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return undefined;
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return undefined;
  return url.origin;
}

export interface OriginPolicy {
  /** True when a request with this Origin header (or none) may proceed. */
  allows(origin: string | readonly string[] | undefined): boolean;
  readonly allowed: readonly string[];
}

/** Throws TypeError at construction for an entry that is not an http(s) origin. */
export function createOriginPolicy(allowedOrigins: readonly string[]): OriginPolicy {
  const allowed = allowedOrigins.map((entry) => {
    const origin = normalizeOrigin(entry);
    if (origin === undefined) throw new TypeError(`allowed origin is not an http(s) origin: ${entry}`);
    return origin;
  });
  const set = new Set(allowed);
  return {
    allowed,
    allows(origin) {
      if (origin === undefined) return true;
      // Several Origin headers are never sent by a browser: refuse rather than pick one.
      if (typeof origin !== "string") return false;
      const normalized = normalizeOrigin(origin);
      return normalized !== undefined && set.has(normalized);
    },
  };
}
