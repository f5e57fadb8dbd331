/**
 * Interop with the SDK's 2.x client pinned to 2026-07-28: no initialize, `server/discover`
 * then stateless requests carrying the `_meta` envelope and the Mcp-Method/Mcp-Name
 * headers; the tool list follows the caller's verified policy; an allowed call reaches the
 * upstream, a denied one is the one "not available" answer.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { type Harness, permission, startHarness } from "./harness.ts";

let h: Harness;
before(async () => {
  h = await startHarness();
});
after(() => h.close());

async function modernClient(token: string): Promise<Client> {
  const client = new Client(
    { name: "sdk2-modern", version: "1" },
    { versionNegotiation: { mode: { pin: "2026-07-28" } } },
  );
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${token}` } },
    }),
  );
  return client;
}

test("an SDK 2.x client pinned to 2026-07-28 lists by policy and calls", async () => {
  await h.grant("modern-agent", [permission("get", "/orders")]);
  const client = await modernClient(await h.token("modern-agent"));
  try {
    assert.equal(client.getProtocolEra(), "modern");
    assert.equal(client.getNegotiatedProtocolVersion(), "2026-07-28");
    assert.equal(client.getServerCapabilities()?.tools?.listChanged, undefined);
    const { tools } = await client.listTools();
    assert.deepEqual(
      tools.map((tool) => tool.name.replace(/_[0-9a-f]{8}$/, "")),
      ["listOrders"],
    );
    const before = h.upstream.requests.length;
    const result = await client.callTool({ name: tools[0]?.name ?? "", arguments: {} });
    assert.equal(result.isError, undefined);
    assert.deepEqual((result.structuredContent as { body: unknown }).body, [{ id: "o-1" }, { id: "o-2" }]);
    assert.equal(h.upstream.requests.length, before + 1);
    const headers = h.upstream.requests.at(-1)?.headers ?? {};
    assert.equal(headers.authorization, undefined, "the caller's token never goes upstream");
  } finally {
    await client.close();
  }
});

test("2026-07-28: a tool outside the policy is the same answer as one that does not exist", async () => {
  await h.grant("modern-narrow", [permission("get", "/orders")]);
  await h.grant("modern-wide", [permission("get", "/orders"), permission("post", "/orders")]);
  const wide = await modernClient(await h.token("modern-wide"));
  const narrow = await modernClient(await h.token("modern-narrow"));
  try {
    const hidden = (await wide.listTools()).tools.find((tool) => tool.name.startsWith("createOrder"));
    assert.ok(hidden !== undefined);
    const messages: string[] = [];
    for (const name of [hidden.name, "createOrder_00000000"]) {
      await assert.rejects(narrow.callTool({ name, arguments: {} }), (error: Error & { code?: number }) => {
        assert.equal(error.code, -32602);
        messages.push(error.message.replace(name, "<name>"));
        return true;
      });
    }
    assert.equal(messages[0], messages[1]);
    assert.match(messages[0] ?? "", /not available to this caller/);
  } finally {
    await wide.close();
    await narrow.close();
  }
});
