/**
 * What an application supplies to the MCP SDK client's OAuth support, and nothing more: token
 * and registration storage, and a "browser" that follows the authorization URL (the dev IdP
 * signs its user in without a page) and hands the redirect's query back to the transport.
 */
import assert from "node:assert/strict";
import {
  Client,
  type OAuthClientMetadata,
  type OAuthClientProvider,
  type StoredOAuthClientInformation,
  type StoredOAuthTokens,
  StreamableHTTPClientTransport,
  UnauthorizedError,
} from "@modelcontextprotocol/client";

export const OAUTH_REDIRECT = "http://127.0.0.1:9/callback";

export class TestOAuthProvider implements OAuthClientProvider {
  client: StoredOAuthClientInformation | undefined;
  stored: StoredOAuthTokens | undefined;
  verifier = "";
  authorizationUrl: URL | undefined;
  get redirectUrl(): string {
    return OAUTH_REDIRECT;
  }
  get clientMetadata(): OAuthClientMetadata {
    return { redirect_uris: [OAUTH_REDIRECT], client_name: "interop", token_endpoint_auth_method: "none" };
  }
  clientInformation() {
    return this.client;
  }
  saveClientInformation(info: StoredOAuthClientInformation) {
    this.client = info;
  }
  tokens() {
    return this.stored;
  }
  saveTokens(tokens: StoredOAuthTokens) {
    this.stored = tokens;
  }
  redirectToAuthorization(url: URL) {
    this.authorizationUrl = url;
  }
  saveCodeVerifier(verifier: string) {
    this.verifier = verifier;
  }
  codeVerifier() {
    return this.verifier;
  }
}

/** Follows an authorization URL as a browser would, up to the redirect back to the client. */
export async function followAuthorization(url: URL | string): Promise<URL> {
  const response = await fetch(url, { redirect: "manual" });
  assert.equal(response.status, 302, await response.clone().text());
  return new URL(response.headers.get("location") ?? "");
}

/**
 * The whole flow as an application runs it: connect, meet the 401, authorize, finish, connect
 * again. Returns the connected client (close it) and the provider (its tokens, its URL).
 */
export async function connectWithOAuth(
  mcpUrl: string,
): Promise<{ client: Client; provider: TestOAuthProvider; callback: URL }> {
  const provider = new TestOAuthProvider();
  const url = new URL(mcpUrl);
  const first = new Client({ name: "oauth-interop", version: "1" });
  await assert.rejects(
    first.connect(new StreamableHTTPClientTransport(url, { authProvider: provider })),
    UnauthorizedError,
  );
  assert.ok(provider.authorizationUrl !== undefined, "the client was sent to authorize");
  const callback = await followAuthorization(provider.authorizationUrl);
  const transport = new StreamableHTTPClientTransport(url, { authProvider: provider });
  await transport.finishAuth(callback.searchParams);
  const client = new Client({ name: "oauth-interop", version: "1" });
  await client.connect(transport);
  return { client, provider, callback };
}
