/**
 * Faults with real processes, part 3: the governed upstream API is slow, hangs or cuts
 * connections. Every execution path — binding invoke, broker execute, hosted MCP
 * `tools/call` and the sidecar's forward proxy — answers within its upstream deadline plus
 * a margin, with the documented error, never leaves the upstream call open behind it, and
 * recovers on the next request once the upstream is healthy. A timed-out invoke keeps its
 * Idempotency-Key: the retry gets the same answer and the upstream is not called again.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { HttpReply } from "../helpers/http-client.ts";
import { assertNoLeaks, assertWithin, newCounts, report } from "../helpers/suite-report.ts";
import { CAPABILITY, recoveryTime, type System, startSystem } from "../helpers/system.ts";

/** docs/security.md, "Recovery bounds". */
const UPSTREAM_TIMEOUT_MS = 1000;
const ANSWER_MS = UPSTREAM_TIMEOUT_MS + 4000;
const RECOVERY_MS = 5000;

const counts = newCounts();

describe("faults: a slow, hanging or failing upstream API", () => {
  let system: System;
  let agent: string;
  let tools: Map<string, string>;

  before(async () => {
    system = await startSystem({ sidecar: {}, upstreamTimeoutMs: UPSTREAM_TIMEOUT_MS });
    agent = await system.agentToken();
    const listed = await system.mcp("tools/list", {}, agent);
    tools = new Map(
      listed.json.result.tools.map((tool: { name: string }) => [
        tool.name.replace(/_[0-9a-f]{8}$/, ""),
        tool.name,
      ]),
    );
  });
  after(() => system?.close());

  const tool = (operationId: string): string => {
    const name = tools.get(operationId);
    assert.ok(name, `tool for ${operationId}`);
    return name;
  };

  async function broker(path: string): Promise<HttpReply> {
    const binding = system.binding;
    assert.ok(binding);
    return system.call("POST", `${system.url}/v1/broker/execute`, {
      token: await system.workloadToken(binding.agent, "authority/authority.broker.execute"),
      headers: { "x-authority-user-assertion": await system.userAssertion() },
      json: { capability_id: CAPABILITY, method: "GET", path },
    });
  }

  /** The upstream calls the system made are all closed again (nothing left hanging). */
  async function noOpenUpstreamCalls(): Promise<void> {
    const closed = await recoveryTime(async () => system.upstream.pending() === 0, 5000);
    assert.ok(closed !== undefined, `upstream calls still open: ${system.upstream.pending()}`);
  }

  test("a hanging operation: 504 on every path within the deadline, the call cancelled, the key kept", async () => {
    counts.faultsInjected++;
    const key = "hang-key-0001";
    const before = system.upstream.count("/hang");
    const [invoke, viaBroker, mcp, proxied] = await Promise.all([
      system.invoke({ capability_id: CAPABILITY, method: "GET", path: "/hang" }, { key }),
      broker("/hang"),
      system.mcp("tools/call", { name: tool("getHang"), arguments: {} }, agent),
      system.proxy("/hang", agent),
    ]);
    for (const [name, reply] of Object.entries({ invoke, viaBroker, mcp, proxied })) {
      assertWithin(reply.elapsedMs, ANSWER_MS, name);
    }
    for (const reply of [invoke, viaBroker, proxied]) {
      assert.equal(reply.status, 504, reply.text);
      assert.equal(reply.json.error ?? reply.json.reason, "upstream_timeout");
    }
    assert.equal(mcp.status, 200);
    assert.equal(mcp.json.result.isError, true);
    assert.match(JSON.stringify(mcp.json.result), /upstream_timeout/);
    assert.equal(system.upstream.count("/hang") - before, 4, "each path called the upstream once");
    await noOpenUpstreamCalls();

    // The upstream may have acted: a retry with the same key is answered from the record.
    const retry = await system.invoke({ capability_id: CAPABILITY, method: "GET", path: "/hang" }, { key });
    assert.equal(retry.status, 504);
    assert.equal(retry.headers["idempotent-replayed"], "true");
    assert.equal(system.upstream.count("/hang") - before, 4, "the retry did not call the upstream again");
  });

  test("many concurrent calls to a hanging upstream: each bounded, none piles up", async () => {
    counts.faultsInjected++;
    const replies = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        i % 2 === 0
          ? system.invoke({ capability_id: CAPABILITY, method: "GET", path: "/hang" })
          : system.proxy("/hang", agent),
      ),
    );
    for (const reply of replies) {
      assertWithin(reply.elapsedMs, ANSWER_MS + 2000, "concurrent hanging call");
      assert.equal(reply.status, 504, reply.text);
    }
    await noOpenUpstreamCalls();
  });

  test("an upstream slower than the deadline on every operation, then healthy again", async () => {
    system.upstream.mode.delayMs = UPSTREAM_TIMEOUT_MS * 3;
    counts.faultsInjected++;
    try {
      const replies = await Promise.all([
        system.invoke({ capability_id: CAPABILITY, method: "GET", path: "/items/7" }),
        system.invoke({
          capability_id: CAPABILITY,
          method: "POST",
          path: "/items",
          arguments: { body: { name: "x" } },
        }),
        system.mcp("tools/call", { name: tool("getItem"), arguments: { path: { itemId: "7" } } }, agent),
        system.proxy("/items/7", agent),
      ]);
      for (const reply of replies) assertWithin(reply.elapsedMs, ANSWER_MS, "slow upstream");
      assert.equal(replies[0]?.status, 504);
      assert.equal(replies[1]?.status, 504);
      assert.equal(replies[2]?.json.result.isError, true);
      assert.equal(replies[3]?.status, 504);
    } finally {
      system.upstream.mode.delayMs = 0;
    }
    await noOpenUpstreamCalls();
    const took = await recoveryTime(
      async () =>
        (await system.invoke({ capability_id: CAPABILITY, method: "GET", path: "/items/7" })).status === 200,
      RECOVERY_MS,
    );
    assert.ok(took !== undefined, "invoke works again");
    assert.equal((await system.proxy("/items/7", agent)).status, 200);
  });

  test("an upstream that cuts connections: 503 upstream_unavailable on every path; recovery", async () => {
    system.upstream.mode.reset = true;
    counts.faultsInjected++;
    try {
      const [invoke, viaBroker, mcp, proxied] = await Promise.all([
        system.invoke({ capability_id: CAPABILITY, method: "GET", path: "/items/8" }),
        broker("/items/8"),
        system.mcp("tools/call", { name: tool("getItem"), arguments: { path: { itemId: "8" } } }, agent),
        system.proxy("/items/8", agent),
      ]);
      for (const [name, reply] of Object.entries({ invoke, viaBroker, mcp, proxied })) {
        assertWithin(reply.elapsedMs, ANSWER_MS, name);
      }
      for (const reply of [invoke, viaBroker, proxied]) {
        assert.equal(reply.status, 503, reply.text);
        assert.equal(reply.json.error ?? reply.json.reason, "upstream_unavailable");
      }
      assert.equal(mcp.json.result.isError, true);
      assert.match(JSON.stringify(mcp.json.result), /upstream_unavailable/);
    } finally {
      system.upstream.mode.reset = false;
    }
    const took = await recoveryTime(
      async () =>
        (await system.invoke({ capability_id: CAPABILITY, method: "GET", path: "/items/8" })).status === 200,
      RECOVERY_MS,
    );
    assert.ok(took !== undefined, "invoke works again");
    const call = await system.mcp(
      "tools/call",
      { name: tool("getItem"), arguments: { path: { itemId: "8" } } },
      agent,
    );
    assert.notEqual(call.json.result.isError, true, call.text);
  });

  test("no canary, secret or token in any log line or response; summary", (t) => {
    const scanned = assertNoLeaks(system);
    report(
      t,
      "faults-upstream",
      counts,
      `responses scanned: ${scanned.responses}, log lines scanned: ${scanned.logLines}`,
    );
  });
});
