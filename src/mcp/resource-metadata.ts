/**
 * OAuth 2.0 Protected Resource Metadata (RFC 9728) for the MCP endpoint, and the
 * `WWW-Authenticate` challenge that points clients at it (RFC 9728 §5.1, RFC 6750 §3).
 * Pure.
 */

export const MCP_PATH = "/mcp";
export const PROTECTED_RESOURCE_METADATA_PATH = "/.well-known/oauth-protected-resource";

export interface ProtectedResourceMetadata {
  readonly resource: string;
  readonly authorization_servers: readonly string[];
  readonly bearer_methods_supported: readonly string[];
  readonly scopes_supported: readonly string[];
  readonly resource_name: string;
}

function trimSlash(url: string): string {
  return url.endsWith("/") ? url.slice(0, -1) : url;
}

/** `<publicUrl>/mcp`: the resource identifier clients ask tokens for. */
export function mcpResourceUrl(publicUrl: string): string {
  return `${trimSlash(publicUrl)}${MCP_PATH}`;
}

/**
 * `<publicUrl>/.well-known/oauth-protected-resource/mcp`. For a public URL without a path
 * this is exactly RFC 9728 §3.1's location (well-known segment between host and the
 * resource path); with a path prefix the prefix stays in front, as the proxy in front of
 * the service routes by prefix.
 */
export function metadataUrl(publicUrl: string): string {
  return `${trimSlash(publicUrl)}${PROTECTED_RESOURCE_METADATA_PATH}${MCP_PATH}`;
}

export function protectedResourceMetadata(options: {
  readonly publicUrl: string;
  readonly issuer: string;
  readonly scopes: readonly string[];
}): ProtectedResourceMetadata {
  return {
    resource: mcpResourceUrl(options.publicUrl),
    authorization_servers: [options.issuer],
    bearer_methods_supported: ["header"],
    scopes_supported: [...options.scopes],
    resource_name: "Authority hosted MCP",
  };
}

/** RFC 6750 error codes a challenge may carry. */
export type BearerChallengeError = "invalid_token" | "insufficient_scope" | "invalid_request";

/**
 * `scope` (RFC 6750 §3, MCP authorization "scope selection"): what a client should ask its
 * authorization server for — scope tokens only (config.ts checks them), so no quoting issue.
 */
export function bearerChallenge(publicUrl: string, error?: BearerChallengeError, scope?: string): string {
  const parts = [`resource_metadata="${metadataUrl(publicUrl)}"`];
  if (scope !== undefined) parts.push(`scope="${scope}"`);
  if (error !== undefined) parts.push(`error="${error}"`);
  return `Bearer ${parts.join(", ")}`;
}

/**
 * The scope a token issued for the MCP resource itself (its `aud` names the resource URL,
 * RFC 8707) must carry to use /mcp, when it lacks it; undefined when nothing is missing.
 * Tokens for the service's configured audience are governed by roles and policy, as on
 * every other route, and need no scope.
 */
export function missingMcpScope(
  token: { readonly audience?: readonly string[]; readonly scopes: readonly string[] },
  resource: string,
  requiredScope: string,
): string | undefined {
  if (!(token.audience ?? []).includes(resource)) return undefined;
  return token.scopes.includes(requiredScope) ? undefined : requiredScope;
}
