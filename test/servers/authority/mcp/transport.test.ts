import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { SUPPORTED_PROTOCOL_VERSIONS } from "@modelcontextprotocol/sdk/types.js";
import { supportedProtocolVersions } from "../../../../src/mcp/protocol-server.ts";
import { ALLOWED_ORIGIN, type Harness, PUBLIC_URL, startHarness } from "./harness.ts";

let h: Harness;
before(async () => {
  h = await startHarness();
});
after(() => h.close());

const METADATA_URL = `${PUBLIC_URL}/.well-known/oauth-protected-resource/mcp`;

function post(body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${h.url}/mcp`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      ...headers,
    },
    body: JSON.stringify(body),
  });
}

const initialize = (protocolVersion: string, id = 1) => ({
  jsonrpc: "2.0",
  id,
  method: "initialize",
  params: { protocolVersion, capabilities: {}, clientInfo: { name: "raw", version: "1" } },
});

test("no token: 401 with a challenge naming the protected-resource metadata", async () => {
  const response = await post(initialize("2025-06-18"));
  assert.equal(response.status, 401);
  assert.equal(response.headers.get("www-authenticate"), `Bearer resource_metadata="${METADATA_URL}"`);
  const body = (await response.json()) as { error: string; requestId: string };
  assert.equal(body.error, "invalid_token");
  assert.equal(typeof body.requestId, "string");
});

test("a bad token: 401 with error=invalid_token", async () => {
  const response = await post(initialize("2025-06-18"), { authorization: "Bearer not-a-jwt" });
  assert.equal(response.status, 401);
  assert.equal(
    response.headers.get("www-authenticate"),
    `Bearer resource_metadata="${METADATA_URL}", error="invalid_token"`,
  );
});

test("the SDK client without a token is refused", async () => {
  const client = new Client({ name: "anonymous", version: "1" });
  await assert.rejects(client.connect(new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`))));
  await client.close();
});

test("RFC 9728 protected-resource metadata is served", async () => {
  for (const path of ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"]) {
    const response = await fetch(`${h.url}${path}`);
    assert.equal(response.status, 200);
    assert.deepEqual(await response.json(), {
      resource: `${PUBLIC_URL}/mcp`,
      authorization_servers: [h.context.config.issuer],
      bearer_methods_supported: ["header"],
      scopes_supported: ["authority/mcp"],
      resource_name: "Authority hosted MCP",
    });
  }
});

test("a foreign Origin is refused before authentication; an allowed one gets CORS headers", async () => {
  const token = await h.token("origin-tester");
  const foreign = await post(initialize("2025-06-18"), {
    origin: "http://evil.example",
    authorization: `Bearer ${token}`,
  });
  assert.equal(foreign.status, 403);
  const unauthenticatedForeign = await post(initialize("2025-06-18"), { origin: "http://evil.example" });
  assert.equal(unauthenticatedForeign.status, 403);

  const allowed = await post(initialize("2025-06-18"), {
    origin: ALLOWED_ORIGIN,
    authorization: `Bearer ${token}`,
  });
  assert.equal(allowed.status, 200);
  assert.equal(allowed.headers.get("access-control-allow-origin"), ALLOWED_ORIGIN);

  const preflight = await fetch(`${h.url}/mcp`, {
    method: "OPTIONS",
    headers: { origin: ALLOWED_ORIGIN, "access-control-request-method": "POST" },
  });
  assert.equal(preflight.status, 204);
  assert.match(preflight.headers.get("access-control-allow-headers") ?? "", /authorization/);
  const foreignPreflight = await fetch(`${h.url}/mcp`, {
    method: "OPTIONS",
    headers: { origin: "http://evil.example" },
  });
  assert.equal(foreignPreflight.status, 403);
});

test("stateless: GET and DELETE are 405", async () => {
  for (const method of ["GET", "DELETE"]) {
    const response = await fetch(`${h.url}/mcp`, { method, headers: { accept: "text/event-stream" } });
    assert.equal(response.status, 405, method);
    assert.match(response.headers.get("allow") ?? "", /POST/);
  }
});

test("every protocol version the SDK supports is accepted, with no session id", async () => {
  assert.deepEqual(supportedProtocolVersions, SUPPORTED_PROTOCOL_VERSIONS);
  const token = await h.token("version-tester");
  for (const version of SUPPORTED_PROTOCOL_VERSIONS) {
    const init = await post(initialize(version), { authorization: `Bearer ${token}` });
    assert.equal(init.status, 200, version);
    assert.equal(init.headers.get("mcp-session-id"), null);
    const result = (await init.json()) as {
      result: { protocolVersion: string; serverInfo: { name: string } };
    };
    assert.equal(result.result.protocolVersion, version);
    assert.equal(result.result.serverInfo.name, "authority");
    const list = await post(
      { jsonrpc: "2.0", id: 2, method: "tools/list", params: {} },
      { authorization: `Bearer ${token}`, "mcp-protocol-version": version },
    );
    assert.equal(list.status, 200, version);
    const listed = (await list.json()) as { result: { tools: unknown[] } };
    assert.deepEqual(listed.result.tools, []);
  }
  const unknown = await post(
    { jsonrpc: "2.0", id: 3, method: "tools/list", params: {} },
    { authorization: `Bearer ${token}`, "mcp-protocol-version": "1999-01-01" },
  );
  assert.equal(unknown.status, 400);
});
