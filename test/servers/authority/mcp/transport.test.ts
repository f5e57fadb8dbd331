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
  assert.equal(
    response.headers.get("www-authenticate"),
    `Bearer resource_metadata="${METADATA_URL}", scope="authority/mcp"`,
  );
  const body = (await response.json()) as { error: string; requestId: string };
  assert.equal(body.error, "invalid_token");
  assert.equal(typeof body.requestId, "string");
});

test("a bad token: 401 with error=invalid_token", async () => {
  const response = await post(initialize("2025-06-18"), { authorization: "Bearer not-a-jwt" });
  assert.equal(response.status, 401);
  assert.equal(
    response.headers.get("www-authenticate"),
    `Bearer resource_metadata="${METADATA_URL}", scope="authority/mcp", error="invalid_token"`,
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
  assert.deepEqual(supportedProtocolVersions, ["2026-07-28", ...SUPPORTED_PROTOCOL_VERSIONS]);
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

const MODERN = "2026-07-28";
const envelope = {
  "io.modelcontextprotocol/protocolVersion": MODERN,
  "io.modelcontextprotocol/clientCapabilities": {},
  "io.modelcontextprotocol/clientInfo": { name: "raw", version: "1" },
};

/** A stateless 2026-07-28 request: no initialize before it, the revision in `_meta` and the headers. */
function modern(token: string, method: string, params: Record<string, unknown> = {}, name?: string) {
  return post(
    { jsonrpc: "2.0", id: 7, method, params: { ...params, _meta: envelope } },
    {
      authorization: `Bearer ${token}`,
      "mcp-protocol-version": MODERN,
      "mcp-method": method,
      ...(name === undefined ? {} : { "mcp-name": name }),
    },
  );
}

test("2026-07-28: server/discover and tools/list without a handshake or session; capabilities are truthful", async () => {
  const token = await h.token("modern-raw");
  const discover = await modern(token, "server/discover");
  assert.equal(discover.status, 200);
  const found = (await discover.json()) as {
    result: {
      supportedVersions: string[];
      capabilities: { tools?: Record<string, unknown> };
      resultType?: string;
    };
  };
  assert.ok(found.result.supportedVersions.includes(MODERN), JSON.stringify(found));
  assert.deepEqual(found.result.capabilities.tools, {}, "no listChanged: a stateless server never sends it");
  const list = await modern(token, "tools/list");
  assert.equal(list.status, 200);
  assert.equal(list.headers.get("mcp-session-id"), null);
  const listed = (await list.json()) as { result: { tools: unknown[]; resultType: string } };
  assert.deepEqual(listed.result.tools, []);
  assert.equal(listed.result.resultType, "complete");
});

test("legacy initialize advertises tools without listChanged", async () => {
  const token = await h.token("legacy-caps");
  const init = await post(initialize("2025-11-25"), { authorization: `Bearer ${token}` });
  const body = (await init.json()) as { result: { capabilities: { tools: Record<string, unknown> } } };
  assert.deepEqual(body.result.capabilities.tools, {});
});

test("malformed JSON is JSON-RPC -32700, not the service's error body", async () => {
  const token = await h.token("parse-tester");
  for (const version of [MODERN, "2025-11-25"]) {
    const response = await fetch(`${h.url}/mcp`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        authorization: `Bearer ${token}`,
        "mcp-protocol-version": version,
      },
      body: '{"jsonrpc":"2.0",',
    });
    assert.equal(response.status, 400);
    const body = (await response.json()) as { jsonrpc: string; error: { code: number } };
    assert.equal(body.jsonrpc, "2.0");
    assert.equal(body.error.code, -32700);
  }
});

test("batches: refused (-32600) from 2025-06-18 on, answered where the revision has them, bounded", async () => {
  const token = await h.token("batch-tester");
  const ping = (id: number) => ({ jsonrpc: "2.0", id, method: "ping" });
  for (const version of ["2025-06-18", "2025-11-25", MODERN]) {
    const response = await post([ping(1), ping(2)], {
      authorization: `Bearer ${token}`,
      "mcp-protocol-version": version,
    });
    assert.equal(response.status, 400, version);
    assert.equal(((await response.json()) as { error: { code: number } }).error.code, -32600);
  }
  const old = await post([ping(1), ping(2)], {
    authorization: `Bearer ${token}`,
    "mcp-protocol-version": "2025-03-26",
  });
  assert.equal(old.status, 200);
  assert.equal(((await old.json()) as unknown[]).length, 2);
  const huge = await post(
    Array.from({ length: 33 }, (_, i) => ping(i)),
    { authorization: `Bearer ${token}`, "mcp-protocol-version": "2025-03-26" },
  );
  assert.equal(huge.status, 400);
});

test("CORS preflight allows the 2026-07-28 Mcp-Method and Mcp-Name headers", async () => {
  const preflight = await fetch(`${h.url}/mcp`, {
    method: "OPTIONS",
    headers: {
      origin: ALLOWED_ORIGIN,
      "access-control-request-method": "POST",
      "access-control-request-headers": "mcp-method, mcp-name",
    },
  });
  assert.equal(preflight.status, 204);
  const allowed = preflight.headers.get("access-control-allow-headers") ?? "";
  assert.match(allowed, /mcp-method/);
  assert.match(allowed, /mcp-name/);
});

const RESOURCE = `${PUBLIC_URL}/mcp`;

test("RFC 8707: a token for the MCP resource URL is accepted at /mcp with its scope, and nowhere else", async () => {
  const token = await h.token("resource-holder", ["agent"], undefined, {
    audience: RESOURCE,
    scopes: ["authority/mcp"],
  });
  const init = await post(initialize("2025-11-25"), { authorization: `Bearer ${token}` });
  assert.equal(init.status, 200);
  const discover = await modern(token, "server/discover");
  assert.equal(discover.status, 200);
  // The admin API keeps its own audience: a token minted for the MCP resource opens nothing else.
  const admin = await fetch(`${h.url}/admin/diagnostics`, { headers: { authorization: `Bearer ${token}` } });
  assert.equal(admin.status, 401);
});

test("a token for the MCP resource without the scope: 403 insufficient_scope naming it", async () => {
  for (const scopes of [[], ["authority/admin"], ["authority/mcpx"]]) {
    const token = await h.token("scopeless", ["agent"], undefined, { audience: RESOURCE, scopes });
    const response = await post(initialize("2025-11-25"), { authorization: `Bearer ${token}` });
    assert.equal(response.status, 403, JSON.stringify(scopes));
    assert.equal(
      response.headers.get("www-authenticate"),
      `Bearer resource_metadata="${METADATA_URL}", scope="authority/mcp", error="insufficient_scope"`,
    );
    const body = (await response.json()) as { error: string; details: { scope: string } };
    assert.equal(body.error, "insufficient_scope");
    assert.equal(body.details.scope, "authority/mcp");
  }
});

test("a token for another resource is refused (401), whatever its scopes", async () => {
  for (const audience of [
    "http://127.0.0.1:8080/mcp/",
    "http://127.0.0.1:8080",
    "https://other.example/mcp",
  ]) {
    const token = await h.token("elsewhere", ["agent"], undefined, { audience, scopes: ["authority/mcp"] });
    const response = await post(initialize("2025-11-25"), { authorization: `Bearer ${token}` });
    assert.equal(response.status, 401, audience);
  }
});

test("2026-07-28: the Mcp-Name header must name the tool the body calls", async () => {
  const token = await h.token("header-tester");
  const mismatch = await modern(token, "tools/call", { name: "a_tool", arguments: {} }, "another_tool");
  assert.equal(mismatch.status, 400);
  const body = (await mismatch.json()) as { error: { code: number } };
  assert.ok(body.error.code < 0, JSON.stringify(body));
  // With the header right, the name reaches the tool lookup: the one "not available" answer.
  const matched = await modern(token, "tools/call", { name: "a_tool", arguments: {} }, "a_tool");
  const answer = (await matched.json()) as { error: { code: number; message: string } };
  assert.equal(answer.error.code, -32602);
  assert.match(answer.error.message, /not available to this caller/);
});

test("2026-07-28: subscriptions/listen is acknowledged with nothing and ends (no stream is held open)", async () => {
  const token = await h.token("listener");
  const response = await post(
    {
      jsonrpc: "2.0",
      id: 9,
      method: "subscriptions/listen",
      params: { notifications: { toolsListChanged: true }, _meta: envelope },
    },
    {
      authorization: `Bearer ${token}`,
      "mcp-protocol-version": MODERN,
      "mcp-method": "subscriptions/listen",
    },
  );
  // The body ends: the answer is complete, not a stream kept open per caller.
  const text = await response.text();
  assert.match(text, /"notifications":\{\}/, "no notification is granted: none can be sent");
  assert.match(text, /"resultType":"complete"/);
});
