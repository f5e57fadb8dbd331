import assert from "node:assert/strict";
import { test } from "node:test";
import { resolveMcpConfig } from "../../src/mcp/config.ts";
import { createOriginPolicy, normalizeOrigin } from "../../src/mcp/origin.ts";
import {
  bearerChallenge,
  mcpResourceUrl,
  metadataUrl,
  missingMcpScope,
  protectedResourceMetadata,
} from "../../src/mcp/resource-metadata.ts";
import { encodeToolCursor, pageOfTools } from "../../src/mcp/tool-pages.ts";

test("origins: absent is allowed, listed ones match exactly, anything else is refused", () => {
  const policy = createOriginPolicy(["https://App.Example.com:443/", "http://localhost:3000"]);
  assert.deepEqual(policy.allowed, ["https://app.example.com", "http://localhost:3000"]);
  assert.equal(policy.allows(undefined), true);
  assert.equal(policy.allows("https://app.example.com"), true);
  assert.equal(policy.allows("http://localhost:3000"), true);
  assert.equal(policy.allows("http://app.example.com"), false, "scheme matters");
  assert.equal(policy.allows("http://localhost:3001"), false, "port matters");
  assert.equal(policy.allows("null"), false);
  assert.equal(policy.allows("https://evil.example"), false);
  assert.equal(policy.allows(["https://app.example.com", "https://app.example.com"]), false);
  assert.equal(normalizeOrigin("file:///etc"), undefined);
  assert.throws(() => createOriginPolicy(["not a url"]), TypeError);
});

test("protected resource metadata and the bearer challenge", () => {
  assert.equal(mcpResourceUrl("https://authority.example.com/"), "https://authority.example.com/mcp");
  assert.equal(
    metadataUrl("https://authority.example.com"),
    "https://authority.example.com/.well-known/oauth-protected-resource/mcp",
  );
  assert.deepEqual(
    protectedResourceMetadata({
      publicUrl: "https://authority.example.com",
      issuer: "https://idp.example.com",
      scopes: ["authority/mcp"],
    }),
    {
      resource: "https://authority.example.com/mcp",
      authorization_servers: ["https://idp.example.com"],
      bearer_methods_supported: ["header"],
      scopes_supported: ["authority/mcp"],
      resource_name: "Authority hosted MCP",
    },
  );
  assert.equal(
    bearerChallenge("https://a.example"),
    'Bearer resource_metadata="https://a.example/.well-known/oauth-protected-resource/mcp"',
  );
  assert.equal(
    bearerChallenge("https://a.example", "invalid_token"),
    'Bearer resource_metadata="https://a.example/.well-known/oauth-protected-resource/mcp", error="invalid_token"',
  );
  assert.equal(
    bearerChallenge("https://a.example", "insufficient_scope", "authority/mcp"),
    'Bearer resource_metadata="https://a.example/.well-known/oauth-protected-resource/mcp", scope="authority/mcp", error="insufficient_scope"',
  );
});

test("scopes: only a token issued for the MCP resource needs the MCP scope", () => {
  const resource = "https://a.example/mcp";
  const scope = "authority/mcp";
  assert.equal(missingMcpScope({ audience: ["authority"], scopes: [] }, resource, scope), undefined);
  assert.equal(missingMcpScope({ scopes: [] }, resource, scope), undefined);
  assert.equal(missingMcpScope({ audience: [resource], scopes: [] }, resource, scope), scope);
  assert.equal(missingMcpScope({ audience: ["authority", resource], scopes: ["x"] }, resource, scope), scope);
  assert.equal(missingMcpScope({ audience: [resource], scopes: ["x", scope] }, resource, scope), undefined);
});

test("tools/list pages: bounded, resumable by cursor, and a cursor outside the list is refused", () => {
  const tools = Array.from({ length: 250 }, (_, i) => ({ name: `t${i}` }));
  const first = pageOfTools(tools, undefined);
  assert.equal(first.tools.length, 100);
  const second = pageOfTools(tools, first.nextCursor);
  assert.equal(second.tools[0]?.name, "t100");
  const third = pageOfTools(tools, second.nextCursor);
  assert.equal(third.tools.length, 50);
  assert.equal(third.nextCursor, undefined);
  assert.deepEqual(pageOfTools([], undefined), { tools: [] });
  for (const cursor of [encodeToolCursor("elsewhere"), "", "!!", Buffer.from("t1:").toString("base64url")]) {
    assert.throws(() => pageOfTools(tools, cursor), { code: -32602, message: "Invalid cursor." });
  }
});

test("configuration defaults and validation", () => {
  const resolved = resolveMcpConfig(undefined, "https://authority.example.com/base");
  assert.deepEqual(resolved, {
    allowedOrigins: ["https://authority.example.com"],
    upstreamTimeoutMs: 10_000,
    maxResponseBytes: 1024 * 1024,
    scopesSupported: ["authority/mcp"],
    toolCacheSize: 1000,
  });
  assert.throws(() => resolveMcpConfig({ upstreamTimeoutMs: 0 }, "https://a.example"), TypeError);
  assert.throws(() => resolveMcpConfig({ allowedOrigins: ["ftp://x"] }, "https://a.example"), TypeError);
  assert.throws(() => resolveMcpConfig({ scopesSupported: ["a b"] }, "https://a.example"), TypeError);
  assert.throws(() => resolveMcpConfig(undefined, "relative"), TypeError);
});
