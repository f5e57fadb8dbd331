/**
 * An unmodified SDK client gets its own token: it meets /mcp's 401, reads the protected-resource
 * metadata, discovers the dev IdP, registers itself (RFC 7591), runs the authorization-code flow
 * with PKCE S256 and `resource` (RFC 8707), and lists tools with the token. The test is only the
 * "browser": it follows the authorization URL and hands the redirect's query back. Then the
 * attacks on the flow: open redirects, PKCE downgrade, code replay, resource mismatch,
 * registration abuse.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { after, before, test } from "node:test";
import { discoverAuthorizationServerMetadata } from "@modelcontextprotocol/client";
import { OpenIdProviderDiscoveryMetadataSchema } from "@modelcontextprotocol/sdk/shared/auth.js";
import {
  connectWithOAuth,
  followAuthorization as follow,
  OAUTH_REDIRECT,
} from "../../../helpers/mcp-oauth.ts";
import { type Harness, permission, startHarness } from "./harness.ts";

const REDIRECT = OAUTH_REDIRECT;
let h: Harness;
before(async () => {
  h = await startHarness({ oauthUser: { subject: "oauth-agent", roles: ["agent"] } });
  await h.grant("oauth-agent", [permission("get", "/orders")]);
});
after(() => h.close());

async function issuerUrl(): Promise<string> {
  const metadata = (await (await fetch(`${h.url}/.well-known/oauth-protected-resource/mcp`)).json()) as {
    authorization_servers: string[];
  };
  return metadata.authorization_servers[0] ?? "";
}

test("an unmodified SDK client completes the OAuth flow against the dev IdP, then lists tools", async () => {
  const { client, provider, callback } = await connectWithOAuth(`${h.url}/mcp`);
  try {
    const authorization = provider.authorizationUrl;
    assert.equal(authorization?.searchParams.get("code_challenge_method"), "S256");
    assert.equal(authorization?.searchParams.get("resource"), `${h.publicUrl}/mcp`);
    assert.equal(
      authorization?.searchParams.get("scope"),
      "authority/mcp",
      "the scope from the 401 challenge",
    );
    assert.equal(`${callback.origin}${callback.pathname}`, REDIRECT);
    const token = provider.stored?.access_token ?? "";
    const claims = JSON.parse(Buffer.from(token.split(".")[1] ?? "", "base64url").toString()) as {
      aud: string;
      scope: string;
    };
    assert.equal(claims.aud, `${h.publicUrl}/mcp`);
    assert.equal(claims.scope, "authority/mcp");
    const { tools } = await client.listTools();
    assert.deepEqual(
      tools.map((tool) => tool.name.replace(/_[0-9a-f]{8}$/, "")),
      ["listOrders"],
    );
  } finally {
    await client.close();
  }
});

test("the IdP's OpenID and RFC 8414 documents pass the SDK's schemas", async () => {
  const issuer = await issuerUrl();
  for (const path of ["/.well-known/openid-configuration", "/.well-known/oauth-authorization-server"]) {
    const document = await (await fetch(`${issuer}${path}`)).json();
    const parsed = OpenIdProviderDiscoveryMetadataSchema.safeParse(document);
    assert.ok(parsed.success, JSON.stringify(parsed.error));
    assert.deepEqual(parsed.data.code_challenge_methods_supported, ["S256"]);
  }
  const discovered = await discoverAuthorizationServerMetadata(issuer);
  assert.equal(discovered?.authorization_endpoint, `${issuer}/oauth2/authorize`);
});

/** A registered client and a fresh PKCE pair, for the attacks. */
async function registered(redirectUris = [REDIRECT]) {
  const issuer = await issuerUrl();
  const response = await fetch(`${issuer}/oauth2/register`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ redirect_uris: redirectUris }),
  });
  const body = (await response.json()) as { client_id: string };
  const verifier = randomBytes(32).toString("base64url");
  const challenge = createHash("sha256").update(verifier).digest("base64url");
  const authorize = (params: Record<string, string>) =>
    new URL(
      `${issuer}/oauth2/authorize?${new URLSearchParams({
        response_type: "code",
        client_id: body.client_id,
        redirect_uri: REDIRECT,
        code_challenge: challenge,
        code_challenge_method: "S256",
        resource: `${h.publicUrl}/mcp`,
        scope: "authority/mcp",
        state: "s1",
        ...params,
      })}`,
    );
  const exchange = (code: string, params: Record<string, string> = {}) =>
    fetch(`${issuer}/oauth2/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        grant_type: "authorization_code",
        code,
        client_id: body.client_id,
        redirect_uri: REDIRECT,
        code_verifier: verifier,
        ...params,
      }),
    });
  return { issuer, status: response.status, clientId: body.client_id, authorize, exchange };
}

test("redirect URIs match exactly what was registered: nothing is redirected elsewhere", async () => {
  const c = await registered();
  for (const redirect of [
    "http://127.0.0.1:9/callback/../evil",
    "http://127.0.0.1:9/callback?x=1",
    "http://127.0.0.1:9/callbackx",
    "https://evil.example/callback",
    "http://127.0.0.1:9/Callback",
  ]) {
    const response = await fetch(c.authorize({ redirect_uri: redirect }), { redirect: "manual" });
    assert.equal(response.status, 400, redirect);
    assert.equal(response.headers.get("location"), null, redirect);
  }
  const unknown = await fetch(c.authorize({ client_id: "dyn_nobody" }), { redirect: "manual" });
  assert.equal(unknown.status, 400);
  // Registration refuses what could not be matched safely.
  for (const uris of [
    ["https://a.example/cb#frag"],
    ["http://evil.example/cb"],
    ["javascript:alert(1)"],
    [],
  ]) {
    assert.equal((await registered(uris)).status, 400, JSON.stringify(uris));
  }
});

test("PKCE: required, S256 only; a wrong verifier is refused", async () => {
  const c = await registered();
  const downgrades: Record<string, string>[] = [
    { code_challenge_method: "plain" },
    { code_challenge_method: "" },
    { code_challenge: "short" },
  ];
  for (const params of downgrades) {
    const back = await follow(c.authorize(params));
    assert.equal(back.searchParams.get("error"), "invalid_request", JSON.stringify(params));
    assert.equal(back.searchParams.get("code"), null);
    assert.equal(back.searchParams.get("state"), "s1");
  }
  const code = (await follow(c.authorize({}))).searchParams.get("code") ?? "";
  const wrong = await c.exchange(code, { code_verifier: randomBytes(32).toString("base64url") });
  assert.equal(wrong.status, 400);
  assert.equal(((await wrong.json()) as { error: string }).error, "invalid_grant");
});

test("a code is single use, bound to its client, redirect URI and resource", async () => {
  const c = await registered();
  const code = (await follow(c.authorize({}))).searchParams.get("code") ?? "";
  assert.equal((await c.exchange(code)).status, 200);
  const replay = await c.exchange(code);
  assert.equal(replay.status, 400);
  assert.equal(((await replay.json()) as { error: string }).error, "invalid_grant");

  const other = await registered();
  const stolen = (await follow(c.authorize({}))).searchParams.get("code") ?? "";
  assert.equal((await other.exchange(stolen, { client_id: other.clientId })).status, 400);
  // The failed attempt spent it too.
  assert.equal((await c.exchange(stolen)).status, 400);

  const moved = (await follow(c.authorize({}))).searchParams.get("code") ?? "";
  const mismatch = await c.exchange(moved, { resource: "https://other.example/mcp" });
  assert.equal(((await mismatch.json()) as { error: string }).error, "invalid_target");
  const foreign = await follow(c.authorize({ resource: "https://other.example/mcp" }));
  assert.equal(foreign.searchParams.get("error"), "invalid_target");
  assert.equal(foreign.searchParams.get("code"), null);
});

test("registration is bounded: size of the request and number of clients", async () => {
  const issuer = await issuerUrl();
  const huge = await fetch(`${issuer}/oauth2/register`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ redirect_uris: [REDIRECT], client_name: "x".repeat(20_000) }),
  });
  assert.equal(huge.status, 413);
  const many = await fetch(`${issuer}/oauth2/register`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ redirect_uris: Array.from({ length: 6 }, (_, i) => `${REDIRECT}${i}`) }),
  });
  assert.equal(many.status, 400);
  // The harness allows 5 clients; earlier tests registered some. Past the bound: 429.
  const statuses: number[] = [];
  for (let i = 0; i < 6; i++) statuses.push((await registered()).status);
  assert.equal(statuses.at(-1), 429);
});
