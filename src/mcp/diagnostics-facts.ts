/**
 * The MCP part of GET /admin/diagnostics: the hosted endpoint's resolved settings and the
 * protocol revisions it answers. It lives with the MCP settings it resolves, so the admin
 * folder (an inner one) needs nothing of mcp: the route hands these facts to diagnostics.
 */
import { displayUrl, type McpFacts } from "../admin/platform-diagnostics.ts";
import { type McpConfig, resolveMcpConfig } from "./config.ts";
import { MODERN_PROTOCOL_VERSION, supportedProtocolVersions } from "./protocol-server.ts";

export function mcpFacts(config: { readonly publicUrl: string; readonly mcp?: McpConfig }): McpFacts {
  const resolved = resolveMcpConfig(config.mcp, config.publicUrl);
  return {
    endpoint: `${(displayUrl(config.publicUrl) ?? config.publicUrl).replace(/\/$/, "")}/mcp`,
    protocol_versions: [...supportedProtocolVersions],
    latest_protocol_version: MODERN_PROTOCOL_VERSION,
    allowed_origins: resolved.allowedOrigins,
    upstream_timeout_ms: resolved.upstreamTimeoutMs,
    max_response_bytes: resolved.maxResponseBytes,
    scopes_supported: resolved.scopesSupported,
    tool_cache_size: resolved.toolCacheSize,
  };
}
