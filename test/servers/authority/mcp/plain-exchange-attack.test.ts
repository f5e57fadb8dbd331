/**
 * Attack pass on the plain exchange (decision 3181): odd inputs through the exchange and
 * through the SDK's transport alone must be answered alike (status, headers, body), and
 * nothing may hang.
 */
import assert from "node:assert/strict";
import type { IncomingHttpHeaders } from "node:http";
import { after, before, test } from "node:test";
import { isLegacyRequest, WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/server";
import type { Principal } from "../../../../src/identity/principal.ts";
import { createMcpExchange, type McpAnswer } from "../../../../src/mcp/http-exchange.ts";
import { createLogLevels, createProtocolServer } from "../../../../src/mcp/protocol-server.ts";
import type { McpCaller } from "../../../../src/mcp/service.ts";
import { type Harness, PARTNER, PUBLIC_URL, permission, startHarness } from "./harness.ts";

let h: Harness;
const SUBJECT = "attack-agent";
before(async () => {
  h = await startHarness({});
  await h.grant(SUBJECT, [permission("get", "/orders"), permission("get", "/slow")]);
  await h.grant("attack-other", [permission("delete", "/orders/{orderId}"), permission("get", "/orders")]);
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
const caller = (who: Principal): McpCaller => ({ principal: who, requestId: "req_attack" });

const webHeaders = (headers: IncomingHttpHeaders): Headers => {
  const web = new Headers();
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined && name !== "host")
      web.set(name, Array.isArray(value) ? value.join(", ") : value);
  }
  return web;
};

/** The SDK's stateless transport alone, as the exchange answered every 2025-era POST before decision 3151. */
async function sdkAnswer(headers: IncomingHttpHeaders, body: unknown, who: McpCaller): Promise<McpAnswer> {
  const server = createProtocolServer(h.context.mcp.service, who, createLogLevels());
  const transport = new WebStandardStreamableHTTPServerTransport({
    sessionIdGenerator: undefined,
    enableJsonResponse: true,
  });
  await server.connect(transport);
  try {
    const response = await transport.handleRequest(
      new Request(`${PUBLIC_URL}/mcp`, { method: "POST", headers: webHeaders(headers) }),
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

const within = <T>(p: Promise<T>, label: string): Promise<T> =>
  Promise.race([
    p,
    new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`${label}: hung`)), 20_000).unref()),
  ]);

test("2025-era POSTs built to split the two paths are answered as the SDK transport alone answers them, and none hangs", async () => {
  const agent = caller(principal(SUBJECT, ["agent"]));
  const base = {
    host: "127.0.0.1",
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
  };
  const versions = [
    undefined,
    "2024-11-05",
    "2025-03-26",
    "2025-06-18",
    "2025-11-25",
    "2026-07-28",
    "2025-06-18, 2025-03-26",
    "2020-01-01",
    "",
  ];
  const ids: unknown[] = [0, -1, 1.5, 2 ** 53 + 1, "", "x".repeat(5000), null, true, {}, [], -0, 1e300];
  let deep: unknown = {};
  for (let i = 0; i < 3000; i++) deep = { a: deep };
  const bodies: Array<[string, unknown]> = [];
  for (const id of ids)
    bodies.push([`id ${JSON.stringify(id)?.slice(0, 20)}`, { jsonrpc: "2.0", id, method: "tools/list" }]);
  const methods = [
    "__proto__",
    "constructor",
    "toString",
    "hasOwnProperty",
    "server/discover",
    "Initialize",
    "initialize",
    "tools/call",
    "notifications/cancelled",
    "resources/list",
    "completion/complete",
    "logging/setLevel",
    "tasks/get",
    "ping",
    "",
  ];
  for (const method of methods) bodies.push([`method ${method}`, { jsonrpc: "2.0", id: 9, method }]);
  for (const method of methods)
    bodies.push([`method ${method} params`, { jsonrpc: "2.0", id: 9, method, params: {} }]);
  const names = [
    "__proto__",
    "constructor",
    "toString",
    "a\u0000b",
    "\ud800",
    "listOrders_x\n",
    " ",
    "x".repeat(100000),
  ];
  for (const name of names)
    bodies.push([
      `tool ${JSON.stringify(name).slice(0, 20)}`,
      { jsonrpc: "2.0", id: 3, method: "tools/call", params: { name, arguments: {} } },
    ]);
  bodies.push([
    "proto params",
    JSON.parse(
      '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"__proto__":{"name":"x"},"name":"y","arguments":{"__proto__":{"a":1}}}}',
    ),
  ]);
  bodies.push([
    "proto top",
    JSON.parse('{"jsonrpc":"2.0","id":4,"method":"tools/list","__proto__":{"method":"initialize"}}'),
  ]);
  bodies.push([
    "deep params",
    { jsonrpc: "2.0", id: 5, method: "tools/call", params: { name: "n", arguments: deep } },
  ]);
  bodies.push(["deep meta", { jsonrpc: "2.0", id: 5, method: "tools/list", params: { _meta: deep } }]);
  bodies.push([
    "big params",
    { jsonrpc: "2.0", id: 5, method: "tools/list", params: { cursor: "c".repeat(1_000_000) } },
  ]);
  bodies.push(["jsonrpc 1.0", { jsonrpc: "1.0", id: 5, method: "tools/list" }]);
  bodies.push(["no jsonrpc", { id: 5, method: "tools/list" }]);
  bodies.push(["request+result", { jsonrpc: "2.0", id: 5, method: "tools/list", result: {} }]);
  bodies.push([
    "request+error",
    { jsonrpc: "2.0", id: 5, method: "tools/list", error: { code: 1, message: "x" } },
  ]);
  bodies.push(["params array", { jsonrpc: "2.0", id: 5, method: "tools/list", params: [] }]);
  bodies.push(["params null", { jsonrpc: "2.0", id: 5, method: "tools/list", params: null }]);
  bodies.push([
    "progress token",
    { jsonrpc: "2.0", id: 5, method: "tools/list", params: { _meta: { progressToken: {} } } },
  ]);
  bodies.push([
    "modern envelope",
    {
      jsonrpc: "2.0",
      id: 5,
      method: "tools/list",
      params: { _meta: { "io.modelcontextprotocol/protocolVersion": "2025-06-18" } },
    },
  ]);
  // `_meta` of every shape, on a listing and on a call (what the protocol lifts from it).
  for (const meta of [
    "x",
    null,
    [],
    1,
    { progressToken: 1 },
    { progressToken: "t" },
    { "io.modelcontextprotocol/logLevel": "debug" },
    { "io.modelcontextprotocol/related-task": {} },
    { __proto__: null, progressToken: 2 },
  ]) {
    bodies.push([
      `meta ${JSON.stringify(meta)}`,
      { jsonrpc: "2.0", id: 6, method: "tools/list", params: { _meta: meta } },
    ]);
    bodies.push([
      `call meta ${JSON.stringify(meta)}`,
      { jsonrpc: "2.0", id: 6, method: "tools/call", params: { name: "x", arguments: {}, _meta: meta } },
    ]);
  }
  bodies.push([
    "task param",
    { jsonrpc: "2.0", id: 6, method: "tools/call", params: { name: "x", arguments: {}, task: { ttl: 1 } } },
  ]);
  bodies.push([
    "cancel self",
    { jsonrpc: "2.0", id: 6, method: "notifications/cancelled", params: { requestId: 6 } },
  ]);
  bodies.push(["response", { jsonrpc: "2.0", id: 5, result: {} }]);
  bodies.push(["batch of one", [{ jsonrpc: "2.0", id: 5, method: "tools/list" }]]);
  bodies.push(["empty object", {}]);
  bodies.push(["null", null]);
  bodies.push(["string", "x"]);
  const headerSets: Array<[string, IncomingHttpHeaders]> = [];
  for (const v of versions)
    headerSets.push([`v=${v}`, v === undefined ? base : { ...base, "mcp-protocol-version": v }]);
  headerSets.push(["session id", { ...base, "mcp-protocol-version": "2025-06-18", "mcp-session-id": "abc" }]);
  headerSets.push(["accept star", { ...base, accept: "*/*" }]);
  headerSets.push(["accept q0", { ...base, accept: "application/json;q=0, text/event-stream;q=0" }]);
  headerSets.push(["ct charset", { ...base, "content-type": "application/json; charset=latin1" }]);
  headerSets.push(["ct upper", { ...base, "content-type": "APPLICATION/JSON" }]);
  headerSets.push(["ct json-seq", { ...base, "content-type": "application/json-seq" }]);
  headerSets.push(["mcp-method mismatch", { ...base, "mcp-method": "tools/call", "mcp-name": "x" }]);
  const other = caller(principal("attack-other", ["agent"]));
  const listOf = async (who: McpCaller) =>
    (
      JSON.parse(
        (
          await createMcpExchange({ service: h.context.mcp.service, publicUrl: PUBLIC_URL }).answer({
            headers: { ...base, "mcp-protocol-version": "2025-06-18" },
            body: { jsonrpc: "2.0", id: 1, method: "tools/list" },
            caller: who,
          })
        ).body.toString(),
      ).result.tools as Array<{ name: string }>
    ).map((t) => t.name);
  const ownTools = await listOf(agent);
  const otherTools = (await listOf(other)).filter((name) => !ownTools.includes(name));
  assert.ok(ownTools.length > 0 && otherTools.length > 0);
  for (const name of [...ownTools, ...otherTools]) {
    bodies.push([
      `real tool ${name}`,
      { jsonrpc: "2.0", id: 3, method: "tools/call", params: { name, arguments: {} } },
    ]);
    bodies.push([
      `real tool ${name} bad args`,
      {
        jsonrpc: "2.0",
        id: 3,
        method: "tools/call",
        params: { name, arguments: { path: { orderId: "../x" }, extra: 1 } },
      },
    ]);
  }
  const failures: string[] = [];
  let compared = 0;
  for (const [hl, headers] of headerSets) {
    for (const [bl, body] of bodies) {
      const label = `${hl} / ${bl}`;
      // The modern (2026-07-28) path is the SDK's own handler, unchanged: only 2025-era POSTs are compared.
      const legacy = await isLegacyRequest(
        new Request(`${PUBLIC_URL}/mcp`, { method: "POST", headers: webHeaders(headers) }),
        body,
      );
      if (!legacy) continue;
      compared++;
      try {
        const exchange = createMcpExchange({ service: h.context.mcp.service, publicUrl: PUBLIC_URL });
        const norm = (b: Buffer) =>
          b
            .toString()
            .replace(/"x-authority-receipt":"[^"]*"/g, "")
            .replace(/(\\?"date\\?":\\?")[^"\\]*/g, "$1");
        const aborted = bl.startsWith("real tool") && hl === "v=undefined" ? AbortSignal.abort() : undefined;
        const who = aborted === undefined ? agent : { ...agent, signal: aborted };
        const ours = await within(exchange.answer({ headers, body, caller: who }), `${label} ours`);
        const sdk = await within(sdkAnswer(headers, body, who), `${label} sdk`).catch(
          (e) => ({ status: -1, headers: [], body: Buffer.from(String(e)) }) as McpAnswer,
        );
        if (
          ours.status !== sdk.status ||
          norm(ours.body) !== norm(sdk.body) ||
          JSON.stringify(ours.headers) !== JSON.stringify(sdk.headers)
        ) {
          failures.push(
            `${label}: ours ${ours.status} ${JSON.stringify(ours.headers)} ${ours.body.toString().slice(0, 200)} | sdk ${sdk.status} ${JSON.stringify(sdk.headers)} ${sdk.body.toString().slice(0, 200)}`,
          );
        }
      } catch (error) {
        failures.push(`${label}: threw ${String(error).slice(0, 300)}`);
      }
    }
  }
  assert.deepEqual(failures, []);
  assert.ok(compared > 500, `${compared} compared`);
});

test("a call whose client goes away mid-call is aborted alike on both paths: the late upstream answer is never relayed", async () => {
  const agent = caller(principal(SUBJECT, ["agent"]));
  const headers = {
    host: "127.0.0.1",
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
    "mcp-protocol-version": "2025-06-18",
  };
  const exchange = createMcpExchange({ service: h.context.mcp.service, publicUrl: PUBLIC_URL });
  const list = JSON.parse(
    (
      await exchange.answer({ headers, body: { jsonrpc: "2.0", id: 1, method: "tools/list" }, caller: agent })
    ).body.toString(),
  );
  const name = (list.result.tools as Array<{ name: string }>).find((tool) =>
    tool.name.startsWith("neverAnswersInTime_"),
  )?.name;
  assert.ok(name !== undefined);
  const body = { jsonrpc: "2.0", id: 8, method: "tools/call", params: { name, arguments: {} } };
  const answers: Record<string, McpAnswer> = {};
  for (const [path, answer] of [
    ["plain", (who: McpCaller) => exchange.answer({ headers, body, caller: who })],
    ["sdk", (who: McpCaller) => sdkAnswer(headers, body, who)],
  ] as const) {
    const gone = new AbortController();
    const before = h.upstream.requests.length;
    const pending = answer({ ...agent, signal: gone.signal });
    // The client goes away once the upstream has the request (it answers only after 5 s).
    while (!h.upstream.requests.slice(before).some((request) => request.url.startsWith("/v1/slow")))
      await new Promise((resolve) => setTimeout(resolve, 5));
    gone.abort();
    answers[path] = await within(pending, path);
  }
  const plain = answers.plain;
  const sdk = answers.sdk;
  assert.ok(plain !== undefined && sdk !== undefined);
  assert.equal(plain.status, sdk.status);
  assert.doesNotMatch(plain.body.toString(), /late/);
  const text = (answer: McpAnswer) => JSON.parse(answer.body.toString()).result?.content?.[0]?.text as string;
  assert.equal(text(plain), text(sdk));
});
