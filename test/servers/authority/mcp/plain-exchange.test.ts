/**
 * The exchange answers a single 2025-era JSON-RPC request without the SDK's web transport
 * (src/mcp/plain-exchange.ts, decision 3151). Every answer must be the one the SDK's
 * Streamable HTTP transport gives for the same request, byte for byte: status, headers and
 * body, over the real service — successes, JSON-RPC errors, and every request the
 * transport refuses or treats otherwise (those are left to it).
 */
import assert from "node:assert/strict";
import type { IncomingHttpHeaders } from "node:http";
import { after, before, test } from "node:test";
import { Server, WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/server";
import type { Principal } from "../../../../src/identity/principal.ts";
import { sseData } from "../../../../src/mcp/downstream-client.ts";
import { createMcpExchange, type McpAnswer } from "../../../../src/mcp/http-exchange.ts";
import { answerPlainRequest, plainRequestOf } from "../../../../src/mcp/plain-exchange.ts";
import { createLogLevels, createProtocolServer } from "../../../../src/mcp/protocol-server.ts";
import type { McpCaller } from "../../../../src/mcp/service.ts";
import { encodeToolCursor } from "../../../../src/mcp/tool-pages.ts";
import { type Harness, PARTNER, PUBLIC_URL, permission, startHarness } from "./harness.ts";

let h: Harness;
const SUBJECT = "plain-agent";
before(async () => {
  h = await startHarness({ extraOperations: 150 });
  await h.grant(SUBJECT, [permission("get", "/orders"), permission("delete", "/orders/{orderId}")]);
});
after(() => h.close());

const principal = (subject: string, roles: readonly string[]): Principal => ({
  subject,
  roles,
  scopes: [],
  partnerId: PARTNER,
  clientId: undefined,
  vouchable: false,
});

const caller = (who: Principal): McpCaller => ({ principal: who, requestId: "req_plain_exchange" });

const HEADERS: IncomingHttpHeaders = {
  host: "127.0.0.1",
  "content-type": "application/json",
  accept: "application/json, text/event-stream",
  "mcp-protocol-version": "2025-06-18",
};

/** The SDK's transport alone, as the exchange used it for every 2025-era request before. */
async function sdkAnswer(headers: IncomingHttpHeaders, body: unknown, who: McpCaller): Promise<McpAnswer> {
  const web = new Headers();
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined && name !== "host")
      web.set(name, Array.isArray(value) ? value.join(", ") : value);
  }
  const server = createProtocolServer(h.context.mcp.service, who, createLogLevels());
  const transport = new WebStandardStreamableHTTPServerTransport({
    sessionIdGenerator: undefined,
    enableJsonResponse: true,
  });
  await server.connect(transport);
  try {
    const response = await transport.handleRequest(
      new Request(`${PUBLIC_URL}/mcp`, { method: "POST", headers: web }),
      { parsedBody: body, authInfo: { token: "", clientId: "", scopes: [], extra: { caller: who } } },
    );
    return {
      status: response.status,
      headers: [...response.headers],
      body: Buffer.from(await response.arrayBuffer()),
    };
  } finally {
    await server.close();
  }
}

const rpc = (method: string, params?: unknown, id: string | number = 7) => ({
  jsonrpc: "2.0",
  id,
  method,
  ...(params === undefined ? {} : { params }),
});

/** What differs from one call to the next whoever answers it: the receipt's id, the upstream's date. */
const perCall = (body: Buffer): Buffer =>
  Buffer.from(
    body
      .toString("latin1")
      .replace(/"x-authority-receipt":"[^"]*"/g, '"x-authority-receipt":"…"')
      .replace(/(\\?"date\\?":\\?")[^"\\]*/g, "$1…"),
    "latin1",
  );

async function assertSameAnswer(
  label: string,
  headers: IncomingHttpHeaders,
  body: unknown,
  who: McpCaller,
  normalize: (body: Buffer) => Buffer = (same) => same,
): Promise<McpAnswer> {
  const exchange = createMcpExchange({ service: h.context.mcp.service, publicUrl: PUBLIC_URL });
  const ours = await exchange.answer({ headers, body, caller: who });
  const sdk = await sdkAnswer(headers, body, who);
  assert.equal(ours.status, sdk.status, label);
  assert.deepEqual(ours.headers, sdk.headers, label);
  assert.equal(normalize(ours.body).toString("utf8"), normalize(sdk.body).toString("utf8"), label);
  assert.ok(normalize(ours.body).equals(normalize(sdk.body)), label);
  return ours;
}

test("single requests answered without the SDK's transport are the SDK transport's answers, byte for byte", async () => {
  const agent = caller(principal(SUBJECT, ["agent"]));
  const admin = caller(principal("plain-admin", ["partner_admin"]));
  const cases: Array<[string, unknown, McpCaller]> = [
    ["tools/list", rpc("tools/list"), agent],
    ["tools/list, string id", rpc("tools/list", {}, "a-b"), agent],
    ["tools/list, management tools", rpc("tools/list"), admin],
    [
      "tools/list, a cursor of the list",
      rpc("tools/list", { cursor: encodeToolCursor("list_partners") }),
      admin,
    ],
    ["tools/list, a cursor of no tool", rpc("tools/list", { cursor: encodeToolCursor("nothing") }), agent],
    ["tools/list, a cursor that is no cursor", rpc("tools/list", { cursor: "%%%" }), agent],
    ["tools/call of an unknown tool", rpc("tools/call", { name: "no_such_tool", arguments: {} }), agent],
    ["tools/call without a name", rpc("tools/call", { arguments: {} }), agent],
    ["tools/call with arguments not an object", rpc("tools/call", { name: "x", arguments: [1] }), agent],
    ["a management tool", rpc("tools/call", { name: "list_partners", arguments: {} }), admin],
    ["ping", rpc("ping"), agent],
    ["logging/setLevel", rpc("logging/setLevel", { level: "warning" }), agent],
    ["logging/setLevel, no such level", rpc("logging/setLevel", { level: "loud" }), agent],
    ["a method the server has not", rpc("prompts/list"), agent],
    ["a method nobody has", rpc("no/such/method"), agent],
  ];
  for (const [label, body, who] of cases) {
    assert.ok(plainRequestOf(HEADERS, body) !== undefined, `${label}: taken without the SDK's transport`);
    await assertSameAnswer(label, HEADERS, body, who);
  }
});

test("a tools/call of an API tool: the same answer as through the SDK's transport", async () => {
  const agent = caller(principal(SUBJECT, ["agent"]));
  const exchange = createMcpExchange({ service: h.context.mcp.service, publicUrl: PUBLIC_URL });
  const list = JSON.parse(
    (await exchange.answer({ headers: HEADERS, body: rpc("tools/list"), caller: agent })).body.toString(),
  );
  const name = (list.result.tools as Array<{ name: string }>).find((tool) =>
    tool.name.startsWith("listOrders_"),
  )?.name;
  assert.ok(name !== undefined);
  const body = rpc("tools/call", { name, arguments: {} });
  assert.ok(plainRequestOf(HEADERS, body) !== undefined);
  const answer = await assertSameAnswer("tools/call", HEADERS, body, agent, perCall);
  assert.match(answer.body.toString(), /\\"status\\":200/);
});

test("what the SDK's transport refuses or treats otherwise stays with it, and its answers are unchanged", async () => {
  const agent = caller(principal(SUBJECT, ["agent"]));
  const without = (name: string): IncomingHttpHeaders =>
    Object.fromEntries(Object.entries(HEADERS).filter(([key]) => key !== name));
  const cases: Array<[string, IncomingHttpHeaders, unknown]> = [
    ["Accept without an event stream", { ...HEADERS, accept: "application/json" }, rpc("tools/list")],
    ["no Accept", without("accept"), rpc("tools/list")],
    ["Content-Type not JSON", { ...HEADERS, "content-type": "text/plain" }, rpc("tools/list")],
    [
      "an unsupported protocol version",
      { ...HEADERS, "mcp-protocol-version": "2020-01-01" },
      rpc("tools/list"),
    ],
    ["a notification", HEADERS, { jsonrpc: "2.0", method: "notifications/initialized" }],
    ["a response", HEADERS, { jsonrpc: "2.0", id: 3, result: {} }],
    ["initialize without its params", HEADERS, rpc("initialize")],
    [
      "initialize",
      without("mcp-protocol-version"),
      rpc("initialize", {
        protocolVersion: "2025-06-18",
        capabilities: {},
        clientInfo: { name: "t", version: "1" },
      }),
    ],
  ];
  for (const [label, headers, body] of cases) {
    assert.equal(plainRequestOf(headers, body), undefined, `${label}: left to the SDK's transport`);
    await assertSameAnswer(label, headers, body, agent);
  }
});

/**
 * A relayed call's stream: the SDK's transport in its event-stream mode, read whole as the
 * exchange reads it (its `connection` header dropped; a stream holding only the response is
 * that response in JSON), against the plain exchange with relaying on, for one server whose
 * tool sends notifications for the request before answering.
 */
test("a relayed call: the events of the SDK's stream, or its one response in JSON, byte for byte", async () => {
  const notifyingServer = (notifications: number): Server => {
    const server = new Server({ name: "t", version: "1" }, { capabilities: { tools: {}, logging: {} } });
    server.setRequestHandler("tools/call", async (request, context) => {
      for (let i = 0; i < notifications; i++) {
        await context.mcpReq.notify({
          method: "notifications/message",
          params: { level: "info", data: `line ${i} of ${request.params.name}` },
        });
      }
      return { content: [{ type: "text", text: "done" }] };
    });
    return server;
  };
  const authInfo = { token: "", clientId: "", scopes: [] };
  const web = new Headers();
  for (const [name, value] of Object.entries(HEADERS)) if (name !== "host") web.set(name, String(value));
  for (const notifications of [0, 1, 3]) {
    const body = rpc("tools/call", { name: "chatty", arguments: {} }, 11);
    const plain = plainRequestOf(HEADERS, body);
    assert.ok(plain !== undefined);
    const ours = await answerPlainRequest(notifyingServer(notifications), plain, authInfo, true);
    const server = notifyingServer(notifications);
    const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    await server.connect(transport);
    const response = await transport.handleRequest(
      new Request(`${PUBLIC_URL}/mcp`, { method: "POST", headers: web }),
      { parsedBody: body, authInfo },
    );
    const text = await response.text();
    await server.close();
    const events = sseData(text);
    const label = `${notifications} notifications`;
    if (events.length === 1) {
      assert.deepEqual(ours.headers, [["content-type", "application/json"]], label);
      assert.equal(ours.body.toString(), events[0], label);
    } else {
      assert.equal(events.length, notifications + 1, label);
      assert.deepEqual(
        ours.headers,
        [...response.headers].filter(([name]) => name !== "connection"),
        label,
      );
      assert.equal(ours.body.toString(), text, label);
    }
    assert.equal(ours.status, response.status, label);
  }
});
