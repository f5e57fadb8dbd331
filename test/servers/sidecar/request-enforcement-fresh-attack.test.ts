/**
 * Attack on the sidecar's input step through the real sidecar (ext_authz over gRPC and the forward proxy,
 * against a recording upstream). The imported OpenAPI schemas are closed (additionalProperties
 * false), so every request here takes the new path: ordinary parameter objects, validated and
 * coerced in place, and no override scan for sections that name no override.
 */
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, beforeEach, describe, test } from "node:test";
import { importOpenApi } from "../../../src/admin/capabilities.ts";
import { assignCapability } from "../../../src/admin/policies.ts";
import { ROUTING_OVERRIDE_HEADERS } from "../../../src/execute/routing-overrides.ts";
import { createExtAuthzClient, type ExtAuthzClient } from "../../helpers/ext-authz-client.ts";
import {
  AGENT,
  PARTNER,
  PROFILE,
  proxyRequest,
  type SidecarHandle,
  startWorld,
  type World,
} from "./world.ts";

const API = "orders";
const HOST = "orders.internal";

function ordersApi(): Record<string, unknown> {
  const ok = {
    "200": { description: "ok", content: { "application/json": { schema: { type: "object" } } } },
  };
  return {
    openapi: "3.1.0",
    info: { title: "Orders", version: "1.0.0" },
    paths: {
      "/orders": {
        get: {
          operationId: "listOrders",
          parameters: [
            { name: "limit", in: "query", schema: { type: "integer" } },
            { name: "tags", in: "query", schema: { type: "array", items: { type: "integer" } } },
            { name: "X-Tenant", in: "header", schema: { type: "string", pattern: "^[a-z]+$" } },
          ],
          "x-authority-constraints": [
            { in: "query", name: "limit", maximum: 50 },
            { in: "query", name: "tags", maximum: 9 },
          ],
          responses: ok,
        },
      },
      "/widgets": {
        get: {
          operationId: "listWidgets",
          parameters: [
            { name: "limit", in: "query", schema: { type: "integer" } },
            { name: "constructor", in: "query", schema: { type: "integer" } },
          ],
          "x-authority-constraints": [{ in: "query", name: "constructor", maximum: 5 }],
          responses: ok,
        },
      },
    },
  };
}

const seen: string[] = [];
let upstream: Server;
let upstreamUrl: string;
let world: World;
let sidecar: SidecarHandle;
let extAuthz: ExtAuthzClient;

before(async () => {
  upstream = createServer((req, res) => {
    seen.push(
      `${req.method} ${req.url} ${JSON.stringify(Object.keys(req.headers).filter((h) => h.includes("method") || h.includes("original") || h.includes("rewrite")))}`,
    );
    res.writeHead(200, { "content-type": "application/json" });
    res.end("{}");
  });
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  world = await startWorld({ parameterScoping: true, allowUpstreams: [upstreamUrl] });
  const actor = { subject: "root-admin", requestId: "seed" };
  await importOpenApi(world.context, actor, PARTNER, {
    capability_id: API,
    name: "Orders",
    document: ordersApi(),
    upstream_base_url: upstreamUrl,
    auth_profile_ref: PROFILE,
  });
  await assignCapability(world.context, actor, PARTNER, AGENT, API, {
    allowed_permission_ids: [`${API}:get:/orders`, `${API}:get:/widgets`],
    ttl_seconds: 3600,
  });
  sidecar = await world.startSidecar({ constraintsRollout: { enabled: true, partnerAllowlist: [PARTNER] } });
  extAuthz = createExtAuthzClient(sidecar.ports.grpc);
});
after(async () => {
  extAuthz?.close();
  await world?.close();
  await new Promise<void>((resolve) => {
    upstream?.close(() => resolve());
    upstream?.closeAllConnections();
  });
});
beforeEach(() => {
  seen.length = 0;
});

async function viaExtAuthz(path: string, headers: Record<string, string> = {}): Promise<string> {
  const answer = await extAuthz.check(
    { method: "GET", path, token: world.tokens.agent, headers },
    { host: HOST, capability: API },
  );
  return answer.allowed ? "allow" : JSON.parse(answer.response.denied_response.body).reason;
}

async function viaProxy(path: string, headers: Record<string, string> = {}): Promise<string> {
  const reply = await proxyRequest(
    sidecar.ports.proxy,
    {
      method: "GET",
      target: `http://${HOST}${path}`,
      headers: { "x-authority-capability": API, ...headers },
    },
    world.tokens.agent,
  );
  const denied = reply.headers["content-type"] === "application/json" && reply.json().status === "denied";
  return denied ? reply.json().reason : "allow";
}

async function both(path: string, headers: Record<string, string> = {}): Promise<string> {
  const check = await viaExtAuthz(path, headers);
  assert.equal(
    await viaProxy(path, headers),
    check,
    `${path} ${JSON.stringify(headers)}: ext_authz and the proxy disagree`,
  );
  return check;
}

describe("routing overrides through a closed schema (the scan is skipped)", () => {
  test("override query names in any spelling are refused; nothing reaches the upstream", async () => {
    for (const query of [
      "_method=DELETE",
      "_METHOD=DELETE",
      "_Method=DELETE",
      "%5Fmethod=DELETE",
      "_method=DE+LETE",
      "_httpmethod=DELETE",
      "limit=1&_method=DELETE",
      "_method",
    ]) {
      assert.equal(await both(`/orders?${query}`), "invalid_input", query);
    }
    assert.deepEqual(seen, []);
  });

  test("override headers in mixed case are refused on ext_authz and the proxy", async () => {
    for (const name of ROUTING_OVERRIDE_HEADERS) {
      for (const spelled of [
        name,
        name.toUpperCase(),
        name.replace(/(^|-)([a-z])/g, (_m, d: string, c: string) => d + c.toUpperCase()),
      ]) {
        assert.equal(await both("/orders?limit=1", { [spelled]: "DELETE" }), "invalid_input", spelled);
      }
    }
    assert.deepEqual(seen, []);
  });
});

describe("prototype-named and coerced parameters", () => {
  test("a declared `constructor` parameter is constrained; other prototype names are refused", async () => {
    assert.equal(await both("/widgets?constructor=3"), "allow");
    assert.equal(await both("/widgets?constructor=9"), "constraint_violation");
    assert.equal(await both("/widgets?%63onstructor=9"), "constraint_violation");
    assert.equal(await both("/widgets?constructor=3&constructor=9"), "invalid_input");
    for (const name of ["__proto__", "toString", "hasOwnProperty", "valueOf"]) {
      assert.equal(await both(`/orders?${name}=1`), "invalid_input", name);
    }
    assert.deepEqual(seen, ["GET /widgets?constructor=3 []"]);
  });

  // See input-prototype-members-attack.test.ts: without ajv's ownProperties, `data.constructor`
  // is Object.prototype's function when the caller sent none, and the declared OPTIONAL
  // integer `constructor` fails its type check on every request without it.
  test("an optional `constructor` parameter the caller leaves out does not refuse the request", async () => {
    assert.equal(await both("/widgets?limit=1"), "allow");
    assert.equal(await both("/widgets"), "allow");
  });

  test("coercion in place leaks into no later request; the proxy renders what was checked", async () => {
    assert.equal(await both("/orders?limit=05&tags=1&tags=2"), "allow");
    assert.equal(await both("/orders?limit=7"), "allow");
    assert.equal(await both("/orders?tags=3"), "allow");
    assert.equal(await both("/orders?limit=51"), "constraint_violation");
    assert.equal(await both("/orders?tags=1&tags=10"), "constraint_violation");
    assert.equal(await both("/orders?limit="), "invalid_input");
    assert.equal(await both("/orders?limit=1&limit=2"), "invalid_input");
    assert.equal(await both("/orders?limit=7"), "allow");
    // ext_authz lets Envoy send the original request; the proxy sends the validated values.
    assert.deepEqual(seen, [
      "GET /orders?limit=5&tags=1&tags=2 []",
      "GET /orders?limit=7 []",
      "GET /orders?tags=3 []",
      "GET /orders?limit=7 []",
    ]);
  });
});
