/**
 * The gateway's client toward downstream MCP servers (src/mcp/downstream-client.ts), against a
 * real SDK 2.x server on loopback: a 2026-07-28 server's client is kept across calls, and what
 * is kept never mixes one call's credentials, headers or reviewed output schema with another's.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { ProtocolError, type Tool } from "@modelcontextprotocol/client";
import { createDownstreamCaller, type DownstreamExchange } from "../../src/mcp/downstream-client.ts";
import { type DownstreamMcp, startDownstreamMcp } from "../helpers/downstream-mcp.ts";

const echo: Tool = { name: "echo", inputSchema: { type: "object" } };
/** Two reviewed tools whose output schemas share an `$id` but disagree. */
const textual: Tool = {
  name: "textual",
  inputSchema: { type: "object" },
  outputSchema: {
    $id: "https://schemas.example/shared",
    type: "object",
    properties: { n: { type: "string" } },
    required: ["n"],
  },
};
const numeric: Tool = {
  name: "numeric",
  inputSchema: { type: "object" },
  outputSchema: {
    $id: "https://schemas.example/shared",
    type: "object",
    properties: { n: { type: "integer" } },
    required: ["n"],
  },
};
/** A reviewed output schema with a pattern that backtracks exponentially on a near-miss. */
const patterned: Tool = {
  name: "patterned",
  inputSchema: { type: "object" },
  outputSchema: {
    type: "object",
    properties: { n: { type: "string", pattern: "^(a+)+$" } },
    required: ["n"],
  },
};

let downstream: DownstreamMcp;
before(async () => {
  const answer = (args: Record<string, unknown>) => ({
    content: [{ type: "text" as const, text: JSON.stringify(args) }],
    structuredContent: { n: "text" },
  });
  downstream = await startDownstreamMcp([echo, textual, numeric, patterned], {
    echo: (args) => ({ content: [{ type: "text", text: JSON.stringify(args) }] }),
    textual: answer,
    numeric: answer,
    patterned: () => ({ content: [], structuredContent: { n: `${"a".repeat(40)}!` } }),
  });
});
after(() => downstream.close());

function exchange(headers: Record<string, string>): DownstreamExchange {
  return { fetch: globalThis.fetch, maxResponseBytes: 1 << 20, timeoutMs: 10_000, headers };
}

test("a kept client sends each call's own headers, even when calls overlap; one discover in all", async () => {
  const caller = createDownstreamCaller();
  const from = downstream.requests.length;
  await caller.call(downstream.url, echo, { call: "first" }, exchange({ "x-call": "first" }), "ctx");
  await Promise.all(
    Array.from({ length: 12 }, (_, i) =>
      caller.call(downstream.url, echo, { call: `c${i}` }, exchange({ "x-call": `c${i}` }), "ctx"),
    ),
  );
  const seen = downstream.requests.slice(from).map((r) => ({
    header: r.headers["x-call"],
    message: JSON.parse(r.body) as { method: string; params?: { arguments?: { call?: string } } },
  }));
  const calls = seen.filter((s) => s.message.method === "tools/call");
  assert.equal(calls.length, 13);
  for (const call of calls) assert.equal(call.header, call.message.params?.arguments?.call);
  // The era is probed once; the kept client sends nothing but the calls.
  assert.equal(seen.filter((s) => s.message.method === "server/discover").length, 1);
  assert.equal(seen.length, 14);
});

test("output schemas sharing an $id are each checked against their own reviewed form", async () => {
  const caller = createDownstreamCaller();
  for (let round = 0; round < 2; round++) {
    const ok = await caller.call(downstream.url, textual, {}, exchange({}), "ctx-schemas");
    assert.deepEqual(ok.structuredContent, { n: "text" });
    await assert.rejects(
      caller.call(downstream.url, numeric, {}, exchange({}), "ctx-schemas"),
      (error: unknown) => error instanceof ProtocolError && /output schema/.test(error.message),
    );
  }
});

test("a downstream's answer never meets a backtracking pattern: a near-miss is refused at once", async () => {
  const caller = createDownstreamCaller();
  // On a backtracking engine this answer takes 2^40 steps and the process stops answering.
  await assert.rejects(
    caller.call(downstream.url, patterned, {}, exchange({}), "ctx-patterns"),
    (error: unknown) => error instanceof ProtocolError && /output schema/.test(error.message),
  );
});

test("a kept client that fails is dropped with its era: the next call negotiates again", async () => {
  const caller = createDownstreamCaller();
  const discovers = () =>
    downstream.requests.filter((r) => r.body.includes('"method":"server/discover"')).length;
  await caller.call(downstream.url, echo, {}, exchange({}), "ctx-fails");
  await caller.call(downstream.url, echo, {}, exchange({}), "ctx-fails");
  const before = discovers();
  downstream.redirectTo = "http://127.0.0.1:9/elsewhere";
  try {
    await assert.rejects(caller.call(downstream.url, echo, {}, exchange({}), "ctx-fails"));
  } finally {
    downstream.redirectTo = undefined;
  }
  const again = await caller.call(downstream.url, echo, {}, exchange({}), "ctx-fails");
  assert.equal(again.isError, undefined);
  assert.equal(discovers(), before + 1);
});
