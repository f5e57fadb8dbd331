/**
 * Settings of the hosted MCP endpoint, validated once at start. Everything has a default
 * derived from the service's own configuration, so the endpoint works without any.
 */

import { positiveIntegerOption } from "../core/positive-integer.ts";
import { createOriginPolicy } from "./origin.ts";

export interface McpConfig {
  /**
   * Browser origins allowed to call /mcp (exact scheme://host:port). Requests without an
   * Origin header (non-browser clients) are always allowed. Default: the public URL's origin.
   */
  readonly allowedOrigins?: readonly string[];
  /** Deadline of one upstream call in tools/call (default 10000 ms). */
  readonly upstreamTimeoutMs?: number;
  /** Largest upstream response body kept (default 1 MiB). */
  readonly maxResponseBytes?: number;
  /** Scopes advertised in the protected-resource metadata (default ["authority/mcp"]). */
  readonly scopesSupported?: readonly string[];
  /** Built API tool lists kept in memory, one per (subject, document hash) (default 1000). */
  readonly toolCacheSize?: number;
}

export interface ResolvedMcpConfig {
  readonly allowedOrigins: readonly string[];
  readonly upstreamTimeoutMs: number;
  readonly maxResponseBytes: number;
  readonly scopesSupported: readonly string[];
  readonly toolCacheSize: number;
}

export const DEFAULT_UPSTREAM_TIMEOUT_MS = 10_000;
export const DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024;
export const DEFAULT_SCOPES = ["authority/mcp"] as const;
export const DEFAULT_TOOL_CACHE_SIZE = 1000;

const SCOPE_TOKEN = /^[\x21\x23-\x5b\x5d-\x7e]+$/;

export function resolveMcpConfig(config: McpConfig | undefined, publicUrl: string): ResolvedMcpConfig {
  const given = config ?? {};
  let publicOrigin: string;
  try {
    publicOrigin = new URL(publicUrl).origin;
  } catch {
    throw new TypeError("publicUrl must be an absolute URL");
  }
  const allowedOrigins = given.allowedOrigins ?? [publicOrigin];
  // Validates every entry (throws TypeError on a malformed one).
  const normalized = createOriginPolicy(allowedOrigins).allowed;
  const scopes = given.scopesSupported ?? DEFAULT_SCOPES;
  for (const scope of scopes) {
    if (typeof scope !== "string" || !SCOPE_TOKEN.test(scope)) {
      throw new TypeError("mcp.scopesSupported entries must be RFC 6749 scope tokens");
    }
  }
  return {
    allowedOrigins: normalized,
    upstreamTimeoutMs: positiveIntegerOption(
      given.upstreamTimeoutMs,
      DEFAULT_UPSTREAM_TIMEOUT_MS,
      "mcp.upstreamTimeoutMs",
    ),
    maxResponseBytes: positiveIntegerOption(
      given.maxResponseBytes,
      DEFAULT_MAX_RESPONSE_BYTES,
      "mcp.maxResponseBytes",
    ),
    scopesSupported: [...scopes],
    toolCacheSize: positiveIntegerOption(given.toolCacheSize, DEFAULT_TOOL_CACHE_SIZE, "mcp.toolCacheSize"),
  };
}

/** The MCP settings carried in the service configuration. */
export function mcpConfigOf(config: { readonly mcp?: McpConfig }): McpConfig | undefined {
  return config.mcp;
}
