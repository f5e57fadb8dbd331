/**
 * Patterns from partners cannot wedge a shared process (issue 26, item 2), through the real
 * servers: a partner imports an API whose path parameter declares `^(a+)+$` and whose signed
 * constraint is a chain of bounded repeats (`a{0,16}` eight times, which the old safety
 * heuristic accepted); a caller then sends the inputs that make a backtracking engine try
 * every split. On the backtracking engine one such call held the authority's event loop for
 * seconds (every tenant's requests and /healthz waited). Here every call is answered with its
 * deny reason while /healthz keeps answering, on authorize-invocation, MCP tools/call and the
 * sidecar's ext_authz Check. The event-loop bound below is 2 s: hundreds of times what a
 * linear-time answer takes, and a small fraction of what one backtracking call took.
 */
import assert from "node:assert/strict";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { after, before, describe, test } from "node:test";
import type { HttpReply } from "../helpers/http-client.ts";
import { AGENT, AUTH_PROFILE, PARTNER, type System, startSystem } from "../helpers/system.ts";

const CAPABILITY = "patterns";
const BY_ID = `${CAPABILITY}:get:/things/{id}`;
const SEARCH = `${CAPABILITY}:get:/search`;
/** Accepted by the old heuristic (bounded repeats only); exponential for a backtracking engine. */
const BOUNDED_CHAIN = "a{0,16}".repeat(8);
/** 2^30 ways to split for `^(a+)+$`; 17^8 for the chain. */
const HOSTILE_ID = `${"a".repeat(30)}!`;
const HOSTILE_Q = `${"a".repeat(40)}!`;
const MAX_EVENT_LOOP_STALL_MS = 2000;

function patternsOpenApi(): Record<string, unknown> {
  const ok = {
    "200": { description: "ok", content: { "application/json": { schema: { type: "object" } } } },
  };
  return {
    openapi: "3.1.0",
    info: { title: "Patterns", version: "1.0.0" },
    paths: {
      "/things/{id}": {
        get: {
          operationId: "getThing",
          parameters: [
            { name: "id", in: "path", required: true, schema: { type: "string", pattern: "^(a+)+$" } },
          ],
          responses: ok,
        },
      },
      "/search": {
        get: {
          operationId: "search",
          parameters: [{ name: "q", in: "query", schema: { type: "string" } }],
          "x-authority-constraints": [{ in: "query", name: "q", pattern: BOUNDED_CHAIN }],
          responses: ok,
        },
      },
    },
  };
}

describe("partner patterns run in linear time on every decision path", () => {
  let system: System;
  let agent: string;
  let tools: { thing: string; search: string };

  before(async () => {
    system = await startSystem({
      sidecar: { options: { constraintsRollout: { enabled: true, partnerAllowlist: [PARTNER] } } },
    });
    agent = await system.agentToken(AGENT, { lifetimeSec: 3600 });
    const admin = await system.adminToken();
    const adminCall = async (method: string, path: string, json: unknown, status: number) => {
      const reply = await system.call(method, `${system.url}${path}`, { token: admin, json });
      assert.equal(reply.status, status, `${method} ${path}: ${reply.text}`);
    };
    await adminCall(
      "POST",
      `/partners/${PARTNER}/api-specs/import-openapi`,
      {
        capability_id: CAPABILITY,
        name: "Patterns",
        document: patternsOpenApi(),
        upstream_base_url: system.upstream.url,
        auth_profile_ref: AUTH_PROFILE,
      },
      201,
    );
    await adminCall(
      "PUT",
      `/partners/${PARTNER}/caab/subjects/${AGENT}/policies/${CAPABILITY}`,
      { allowed_permission_ids: [BY_ID, SEARCH], ttl_seconds: 3600 },
      200,
    );
    const listed = await system.mcp("tools/list", {}, agent);
    const names: string[] = listed.json.result.tools.map((tool: { name: string }) => tool.name);
    const find = (prefix: string): string => {
      const name = names.find((n) => n.startsWith(prefix));
      assert.ok(name, `${prefix} listed: ${names.join(", ")}`);
      return name;
    };
    tools = { thing: find("getThing"), search: find("search") };
  });
  after(() => system?.close());

  const hits = () => system.upstream.hits.filter((hit) => /^\/(things|search)/.test(hit.path)).length;

  /** Runs the attack beside a /healthz request; returns its answer once both are in. */
  async function beside<T>(attack: () => Promise<T>): Promise<T> {
    const [answer, health] = await Promise.all([attack(), system.call("GET", `${system.url}/healthz`)]);
    assert.equal(health.status, 200, "the authority stays live");
    return answer;
  }

  /** The longest the event loop stood still while `attacks` ran. */
  async function longestStallMs(attacks: () => Promise<void>): Promise<number> {
    const delay = monitorEventLoopDelay({ resolution: 10 });
    delay.enable();
    try {
      await attacks();
    } finally {
      delay.disable();
    }
    return delay.max / 1e6;
  }

  function assertDenied(reply: HttpReply, reason: string, what: string): void {
    assert.equal(reply.status, 403, `${what}: ${reply.text}`);
    assert.equal(reply.json.reason, reason, what);
  }

  test("the legitimate values still pass the same patterns", async () => {
    assert.equal(
      (await system.authorize({ capability_id: CAPABILITY, method: "GET", path: "/things/aaa" }, agent))
        .status,
      200,
    );
    const mcp = await system.mcp(
      "tools/call",
      { name: tools.search, arguments: { query: { q: "aaaa" } } },
      agent,
    );
    // The test upstream knows no /search: its 404 proves the call was made.
    assert.equal(mcp.json.result?.structuredContent?.status, 404, mcp.text);
    const check = await system.check({
      method: "GET",
      path: "/search?q=aaaa",
      capability: CAPABILITY,
      token: agent,
    });
    assert.equal(check.allowed, true);
  });

  test("authorize-invocation: a path parameter's pattern answers at once, /healthz meanwhile", async () => {
    const stall = await longestStallMs(async () => {
      for (let i = 0; i < 3; i++) {
        const reply = await beside(() =>
          system.authorize(
            { capability_id: CAPABILITY, method: "GET", path: `/things/${HOSTILE_ID}` },
            agent,
          ),
        );
        assertDenied(reply, "ambiguous_path", "authorize-invocation");
      }
    });
    assert.ok(stall < MAX_EVENT_LOOP_STALL_MS, `the event loop stood still for ${stall.toFixed(0)} ms`);
  });

  test("MCP tools/call: a signed constraint's pattern answers at once, nothing is sent", async () => {
    const before = hits();
    const stall = await longestStallMs(async () => {
      for (let i = 0; i < 3; i++) {
        const reply = await beside(() =>
          system.mcp("tools/call", { name: tools.search, arguments: { query: { q: HOSTILE_Q } } }, agent),
        );
        assert.equal(reply.json.result?.isError, true, reply.text);
        assert.ok(reply.text.includes("constraint_violation"), reply.text);
        const thing = await system.mcp(
          "tools/call",
          { name: tools.thing, arguments: { path: { id: HOSTILE_ID } } },
          agent,
        );
        assert.equal(thing.json.result?.isError, true, thing.text);
      }
    });
    assert.ok(stall < MAX_EVENT_LOOP_STALL_MS, `the event loop stood still for ${stall.toFixed(0)} ms`);
    assert.equal(hits(), before, "the upstream received nothing");
  });

  test("sidecar ext_authz Check: the same patterns answer at once, /healthz meanwhile", async () => {
    const stall = await longestStallMs(async () => {
      for (let i = 0; i < 3; i++) {
        const byPath = await beside(() =>
          system.check({
            method: "GET",
            path: `/things/${HOSTILE_ID}`,
            capability: CAPABILITY,
            token: agent,
          }),
        );
        assert.equal(byPath.allowed, false);
        assert.equal(JSON.parse(byPath.response.denied_response.body).reason, "ambiguous_path");
        const byQuery = await beside(() =>
          system.check({
            method: "GET",
            path: `/search?q=${HOSTILE_Q}`,
            capability: CAPABILITY,
            token: agent,
          }),
        );
        assert.equal(byQuery.allowed, false);
        assert.equal(byQuery.status, 403);
      }
    });
    assert.ok(stall < MAX_EVENT_LOOP_STALL_MS, `the event loop stood still for ${stall.toFixed(0)} ms`);
  });
});
