/**
 * Path-parameter values cannot select another operation (issue 15, item 4), through the
 * real servers: a catalog with `GET /things/{id}` allowed and its literal sibling
 * `GET /things/me` denied. Every spelling an upstream framework would route to the sibling
 * (issue 26, item 8: zero-width characters, `::$DATA`, `~`, 8.3 names, double extensions,
 * overlong forms too) is refused as `ambiguous_path` on binding invoke (permission id, template and concrete
 * path forms), broker execute, MCP tools/call, ext_authz and the forward proxy — and the
 * upstream receives nothing.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { InvocationEvidence } from "../../src/store/binding-model.ts";
import { bindingCollections } from "../../src/store/binding-model.ts";
import type { HttpReply } from "../helpers/http-client.ts";
import { AGENT, AUTH_PROFILE, BINDING, PARTNER, type System, startSystem } from "../helpers/system.ts";

const THINGS = "things";
const BY_ID = `${THINGS}:get:/things/{id}`;

function thingsOpenApi(): Record<string, unknown> {
  const ok = {
    "200": { description: "ok", content: { "application/json": { schema: { type: "object" } } } },
  };
  return {
    openapi: "3.1.0",
    info: { title: "Things", version: "1.0.0" },
    paths: {
      "/things/{id}": {
        parameters: [{ name: "id", in: "path", required: true, schema: { type: "string", maxLength: 64 } }],
        get: { operationId: "getThing", responses: ok },
      },
      "/things/me": { get: { operationId: "getMe", responses: ok } },
    },
  };
}

/** Values (template forms) an upstream may route to GET /things/me, and one outside the declared schema. */
const HOSTILE_VALUES = [
  "me",
  "Me",
  "ME",
  "me.json",
  "me;jsessionid=1",
  "me ",
  "me.",
  "ＭＥ",
  "me%2e",
  "x".repeat(65),
  // Issue 26, item 8: what upstreams strip or map beside a literal sibling.
  "me\u200B",
  "me::$DATA",
  "me~",
  "ME~1",
  "me.json.bak",
  "%C1%ADe", // an overlong "m" to an upstream that decodes again
];
/** Request paths (ext_authz, proxy, invoke by path) of the issue. */
const HOSTILE_PATHS = [
  "/things/me;jsessionid=1",
  "/things/Me",
  "/things/me.json",
  "/things/me%20",
  "/things/me%2e",
  "/things/%EF%BC%AD%EF%BC%A5",
  `/things/${"x".repeat(65)}`, // over the declared maxLength
  "/things/me%E2%80%8B",
  "/things/me::$DATA",
  "/things/me~",
  "/things/ME~1",
  "/things/me.json.bak",
];

describe("path values cannot select another operation, on every path", () => {
  let system: System;
  let agent: string;
  let getThing: string;

  before(async () => {
    system = await startSystem({ sidecar: {} });
    agent = await system.agentToken();
    const admin = await system.adminToken();
    const adminCall = async (method: string, path: string, json: unknown, status: number) => {
      const reply = await system.call(method, `${system.url}${path}`, { token: admin, json });
      assert.equal(reply.status, status, `${method} ${path}: ${reply.text}`);
      return reply;
    };
    await adminCall(
      "POST",
      `/partners/${PARTNER}/api-specs/import-openapi`,
      {
        capability_id: THINGS,
        name: "Things",
        document: thingsOpenApi(),
        upstream_base_url: system.upstream.url,
        auth_profile_ref: AUTH_PROFILE,
      },
      201,
    );
    await adminCall(
      "PUT",
      `/partners/${PARTNER}/caab/subjects/${AGENT}/policies/${THINGS}`,
      { allowed_permission_ids: [BY_ID], ttl_seconds: 3600 },
      200,
    );
    const binding = system.binding;
    assert.ok(binding);
    await adminCall(
      "POST",
      `/v1/bindings/${BINDING}/apis`,
      {
        subject_id: binding.subjectId,
        capability_id: THINGS,
        allowed_permission_ids: [BY_ID],
        ttl_seconds: 3600,
      },
      200,
    );
    const listed = await system.mcp("tools/list", {}, agent);
    const names: string[] = listed.json.result.tools.map((tool: { name: string }) => tool.name);
    const found = names.find((name) => name.startsWith("getThing"));
    assert.ok(found, `getThing listed: ${names.join(", ")}`);
    assert.ok(!names.some((name) => name.startsWith("getMe")), "the denied sibling is not a tool");
    getThing = found;
  });
  after(() => system?.close());

  const thingHits = () => system.upstream.hits.filter((hit) => hit.path.startsWith("/things")).length;

  function assertAmbiguous(reply: HttpReply, what: string): void {
    assert.equal(reply.status, 403, `${what}: ${reply.text}`);
    assert.equal(reply.json.status, "denied", what);
    assert.equal(reply.json.reason, "ambiguous_path", what);
  }

  async function allEvidence(): Promise<InvocationEvidence[]> {
    const out: InvocationEvidence[] = [];
    let after: string | undefined;
    do {
      const page = await system.store.list<InvocationEvidence>(bindingCollections.invocations, {
        limit: 1000,
        ...(after === undefined ? {} : { after }),
      });
      out.push(...page.items.map((item) => item.value));
      after = page.next;
    } while (after !== undefined);
    return out;
  }

  async function broker(json: unknown): Promise<HttpReply> {
    const binding = system.binding;
    assert.ok(binding);
    return system.call("POST", `${system.url}/v1/broker/execute`, {
      token: await system.workloadToken(binding.agent, "authority/authority.broker.execute"),
      headers: { "x-authority-user-assertion": await system.userAssertion() },
      json,
    });
  }

  test("a legitimate value reaches the upstream on invoke, broker, MCP, ext_authz and the proxy", async () => {
    const before = thingHits();
    const byPermission = await system.invoke({
      capability_id: THINGS,
      permission_id: BY_ID,
      arguments: { path: { id: "cus_00000001" } },
    });
    assert.equal(byPermission.status, 200, byPermission.text);
    assert.equal(byPermission.json.permissionId, BY_ID);
    const viaBroker = await broker({ capability_id: THINGS, method: "GET", path: "/things/john.doe" });
    assert.equal(viaBroker.status, 200, viaBroker.text);
    const mcp = await system.mcp(
      "tools/call",
      { name: getThing, arguments: { path: { id: "José" } } },
      agent,
    );
    // The test upstream knows no /things: its 404 proves the call was made.
    assert.equal(mcp.json.result?.structuredContent?.status, 404, mcp.text);
    const check = await system.check({
      method: "GET",
      path: "/things/cus_00000002",
      capability: THINGS,
      token: agent,
    });
    assert.equal(check.allowed, true);
    assert.deepEqual(
      system.upstream.hits
        .slice(-3)
        .map((hit) => hit.path)
        .sort(),
      ["/things/Jos%C3%A9", "/things/cus_00000001", "/things/john.doe"],
    );
    assert.equal(thingHits(), before + 3);
  });

  test("binding invoke, permission_id and template forms: ambiguous values are denied before any upstream call", async () => {
    const before = thingHits();
    for (const id of HOSTILE_VALUES) {
      assertAmbiguous(
        await system.invoke({ capability_id: THINGS, permission_id: BY_ID, arguments: { path: { id } } }),
        `permission_id, id=${JSON.stringify(id)}`,
      );
      assertAmbiguous(
        await system.invoke({
          capability_id: THINGS,
          method: "GET",
          path: "/things/{id}",
          arguments: { path: { id } },
        }),
        `template, id=${JSON.stringify(id)}`,
      );
    }
    for (const path of HOSTILE_PATHS) {
      assertAmbiguous(await system.invoke({ capability_id: THINGS, method: "GET", path }), `path ${path}`);
    }
    assert.equal(thingHits(), before, "the upstream received nothing");
    // The evidence says denied, with the reason, and names the permission the decision mapped to.
    const evidence = await allEvidence();
    const denied = evidence.filter((e) => e.capability_id === THINGS && e.reason === "ambiguous_path");
    assert.equal(denied.length, HOSTILE_VALUES.length * 2 + HOSTILE_PATHS.length);
    for (const record of denied) {
      assert.equal(record.decision, "denied");
      assert.equal(record.upstream_status, null);
      assert.ok(
        record.permission_id === null || record.permission_id === BY_ID,
        String(record.permission_id),
      );
    }
  });

  test("broker execute: the same denials", async () => {
    const before = thingHits();
    for (const id of HOSTILE_VALUES) {
      assertAmbiguous(
        await broker({
          capability_id: THINGS,
          method: "GET",
          path: "/things/{id}",
          arguments: { path: { id } },
        }),
        `broker id=${JSON.stringify(id)}`,
      );
    }
    for (const path of HOSTILE_PATHS) {
      assertAmbiguous(await broker({ capability_id: THINGS, method: "GET", path }), `broker ${path}`);
    }
    assert.equal(thingHits(), before, "the upstream received nothing");
  });

  test("MCP tools/call: the tool result is an ambiguous_path error and nothing is sent", async () => {
    const before = thingHits();
    for (const id of HOSTILE_VALUES) {
      const reply = await system.mcp("tools/call", { name: getThing, arguments: { path: { id } } }, agent);
      assert.equal(reply.status, 200, reply.text);
      assert.equal(reply.json.result?.isError, true, `id=${JSON.stringify(id)}: ${reply.text}`);
      assert.ok(reply.text.includes("ambiguous_path"), `id=${JSON.stringify(id)}: ${reply.text}`);
    }
    assert.equal(thingHits(), before, "the upstream received nothing");
  });

  test("ext_authz Check and the forward proxy deny the issue's spellings", async () => {
    const before = thingHits();
    for (const path of HOSTILE_PATHS) {
      const check = await system.check({ method: "GET", path, capability: THINGS, token: agent });
      assert.equal(check.allowed, false, `ext_authz ${path}`);
      assert.equal(check.status, 403, `ext_authz ${path}`);
      const sidecar = system.sidecar;
      assert.ok(sidecar);
      const proxied = await system.call("GET", `http://127.0.0.1:${sidecar.proxyPort}${path}`, {
        headers: {
          host: "things.internal",
          "x-authority-capability": THINGS,
          "proxy-authorization": `Bearer ${agent}`,
        },
      });
      assert.equal(proxied.status, 403, `proxy ${path}: ${proxied.text}`);
      assert.ok(proxied.text.includes("ambiguous_path"), `proxy ${path}: ${proxied.text}`);
    }
    assert.equal(thingHits(), before, "the upstream received nothing");
  });
});
