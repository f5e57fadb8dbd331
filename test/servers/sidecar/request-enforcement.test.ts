/**
 * The sidecar enforces what it can see, as MCP does: a signed maximum, the snapshot's query
 * and header schema and the JSON body, through ext_authz (a grpc-js client speaking Envoy's
 * CheckRequest) and the forward proxy (a real HTTP client), against a recording upstream.
 * Attacks first: every refused request must never reach the upstream, and the same request
 * gets the same answer and reason through MCP, ext_authz and the proxy.
 */
import assert from "node:assert/strict";
import { createServer, request as httpRequest, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, beforeEach, describe, test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { importOpenApi } from "../../../src/admin/capabilities.ts";
import { assignCapability } from "../../../src/admin/policies.ts";
import { ROUTING_OVERRIDE_HEADERS } from "../../../src/execute/routing-overrides.ts";
import {
  createExtAuthzClient,
  type ExtAuthzAnswer,
  type ExtAuthzClient,
} from "../../helpers/ext-authz-client.ts";
import {
  AGENT,
  PARTNER,
  PROFILE,
  type ProxyReply,
  proxyRequest,
  type SidecarHandle,
  startWorld,
  UPSTREAM_SECRET,
  type World,
} from "./world.ts";

const PAYMENTS = "payments";
const PAYMENTS_HOST = "payments.internal";
const MAX_LIMIT = 50;
const MAX_AMOUNT = 100;
const MAX_REQUEST_BYTES = 4096;

function paymentsApi(): Record<string, unknown> {
  const ok = {
    "200": { description: "ok", content: { "application/json": { schema: { type: "object" } } } },
  };
  return {
    openapi: "3.1.0",
    info: { title: "Payments", version: "1.0.0" },
    paths: {
      "/payments": {
        get: {
          operationId: "listPayments",
          parameters: [
            { name: "limit", in: "query", schema: { type: "integer" } },
            { name: "q", in: "query", schema: { type: "string", maxLength: 8 } },
            { name: "X-Tenant", in: "header", schema: { type: "string", pattern: "^[a-z]+$" } },
          ],
          "x-authority-constraints": [{ in: "query", name: "limit", maximum: MAX_LIMIT }],
          responses: ok,
        },
        post: {
          operationId: "createPayment",
          requestBody: {
            content: {
              "application/json": {
                schema: {
                  type: "object",
                  properties: { amount: { type: "number" }, memo: { type: "string" } },
                  required: ["amount"],
                },
              },
            },
          },
          "x-authority-constraints": [{ in: "body", name: "/amount", maximum: MAX_AMOUNT }],
          responses: ok,
        },
      },
    },
  };
}

interface Received {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

/** A hostile-looking but honest upstream: records everything it receives, answers 200 JSON. */
async function startRecordingUpstream(): Promise<{ url: string; seen: Received[]; close(): Promise<void> }> {
  const seen: Received[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      seen.push({
        method: req.method ?? "",
        url: req.url ?? "",
        headers: { ...req.headers },
        body: Buffer.concat(chunks).toString("utf8"),
      });
      res.writeHead(200, { "content-type": "application/json" });
      res.end('{"ok":true}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

interface Outcome {
  readonly allowed: boolean;
  readonly status: number;
  readonly reason: string | undefined;
}

/** One HTTP request, as the three paths take it. */
interface Attempt {
  readonly method: "GET" | "POST";
  readonly path: string;
  readonly query?: Record<string, string | string[]>;
  readonly headers?: Record<string, string>;
  readonly body?: unknown;
}

function target(attempt: Attempt): string {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(attempt.query ?? {}))
    for (const item of Array.isArray(value) ? value : [value]) search.append(name, item);
  const text = search.toString();
  return text === "" ? attempt.path : `${attempt.path}?${text}`;
}

let world: World;
let sidecar: SidecarHandle;
let extAuthz: ExtAuthzClient;
let upstream: Awaited<ReturnType<typeof startRecordingUpstream>>;
let mcp: Client;
const tools = new Map<string, string>();

before(async () => {
  upstream = await startRecordingUpstream();
  world = await startWorld({ parameterScoping: true, allowUpstreams: [upstream.url] });
  await importOpenApi(world.context, { subject: "root-admin", requestId: "seed" }, PARTNER, {
    capability_id: PAYMENTS,
    name: "Payments",
    document: paymentsApi(),
    upstream_base_url: upstream.url,
    auth_profile_ref: PROFILE,
  });
  await assignCapability(
    world.context,
    { subject: "root-admin", requestId: "seed" },
    PARTNER,
    AGENT,
    PAYMENTS,
    {
      allowed_permission_ids: [`${PAYMENTS}:get:/payments`, `${PAYMENTS}:post:/payments`],
      ttl_seconds: 3600,
    },
  );
  sidecar = await world.startSidecar({
    constraintsRollout: { enabled: true, partnerAllowlist: [PARTNER] },
    maxRequestBytes: MAX_REQUEST_BYTES,
  });
  extAuthz = createExtAuthzClient(sidecar.ports.grpc);
  mcp = new Client({ name: "sidecar-cross-path", version: "1.0.0" });
  await mcp.connect(
    new StreamableHTTPClientTransport(new URL(`${world.authorityUrl}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${world.tokens.agent}` } },
    }),
  );
  for (const tool of (await mcp.listTools()).tools) {
    const operation = tool.name.replace(/_[0-9a-f]{8}$/, "");
    tools.set(operation, tool.name);
  }
});
after(async () => {
  await mcp?.close();
  extAuthz?.close();
  await upstream?.close();
  await world?.close();
});
beforeEach(() => {
  upstream.seen.length = 0;
});

function check(attempt: Attempt, extra: { body?: string; headers?: Record<string, string> } = {}) {
  return extAuthz.check(
    {
      method: attempt.method,
      path: target(attempt),
      token: world.tokens.agent,
      headers: { ...attempt.headers, ...extra.headers },
      ...(extra.body === undefined ? {} : { body: extra.body }),
    },
    { host: PAYMENTS_HOST, capability: PAYMENTS },
  );
}

function checkOutcome(answer: ExtAuthzAnswer): Outcome {
  if (answer.allowed) return { allowed: true, status: 200, reason: undefined };
  return {
    allowed: false,
    status: answer.status,
    reason: JSON.parse(answer.response.denied_response.body).reason,
  };
}

/** Through ext_authz with the body as Envoy's with_request_body sends it. */
async function viaExtAuthz(attempt: Attempt): Promise<Outcome> {
  const body = attempt.body === undefined ? undefined : JSON.stringify(attempt.body);
  return checkOutcome(
    await check(
      attempt,
      body === undefined
        ? {}
        : {
            body,
            headers: {
              "content-type": "application/json",
              "content-length": String(Buffer.byteLength(body)),
              "x-envoy-auth-partial-body": "false",
            },
          },
    ),
  );
}

function proxy(attempt: Attempt, headers: Record<string, string> = {}, body?: string): Promise<ProxyReply> {
  return proxyRequest(
    sidecar.ports.proxy,
    {
      method: attempt.method,
      target: `http://${PAYMENTS_HOST}${target(attempt)}`,
      headers: { "x-authority-capability": PAYMENTS, ...attempt.headers, ...headers },
      ...(body === undefined ? {} : { body }),
    },
    world.tokens.agent,
  );
}

async function viaProxy(attempt: Attempt): Promise<Outcome> {
  const body = attempt.body === undefined ? undefined : JSON.stringify(attempt.body);
  const reply = await proxy(attempt, body === undefined ? {} : { "content-type": "application/json" }, body);
  const denied = reply.headers["content-type"] === "application/json" && reply.json().status === "denied";
  return denied
    ? { allowed: false, status: reply.status, reason: reply.json().reason }
    : { allowed: true, status: 200, reason: undefined };
}

async function viaMcp(attempt: Attempt): Promise<Outcome> {
  const name = tools.get(attempt.method === "GET" ? "listPayments" : "createPayment");
  assert.ok(name !== undefined, "the MCP tool is listed");
  const args: Record<string, unknown> = {};
  if (attempt.query !== undefined) args.query = attempt.query;
  if (attempt.headers !== undefined) args.headers = attempt.headers;
  if (attempt.body !== undefined) args.body = attempt.body;
  const result = (await mcp.callTool({ name, arguments: args })) as CallToolResult;
  if (result.isError !== true) return { allowed: true, status: 200, reason: undefined };
  const first = result.content[0];
  assert.ok(first?.type === "text");
  const error = JSON.parse(first.text) as { error: string };
  return { allowed: false, status: 0, reason: error.error };
}

describe("a signed maximum and the input schema hold on ext_authz and the proxy", () => {
  test("over the signed maximum: 403 constraint_violation on both, nothing reaches the upstream", async () => {
    const attempt: Attempt = { method: "GET", path: "/payments", query: { limit: String(MAX_LIMIT + 1) } };
    assert.deepEqual(await viaExtAuthz(attempt), {
      allowed: false,
      status: 403,
      reason: "constraint_violation",
    });
    assert.deepEqual(await viaProxy(attempt), {
      allowed: false,
      status: 403,
      reason: "constraint_violation",
    });
    // Spellings an upstream reads as the same number are the same violation.
    for (const limit of ["51.0", "5.1e1", "0051"]) {
      const spelled = { ...attempt, query: { limit } };
      assert.equal((await viaProxy(spelled)).allowed, false, limit);
      assert.equal((await viaExtAuthz(spelled)).allowed, false, limit);
    }
    // A second value cannot hide behind a first one that passes.
    const repeated: Attempt = { ...attempt, query: { limit: ["5", "500"] } };
    assert.equal((await viaExtAuthz(repeated)).allowed, false);
    assert.equal((await viaProxy(repeated)).allowed, false);
    assert.equal(upstream.seen.length, 0);
  });

  test("a query value that violates the schema: 400 invalid_input on both", async () => {
    const queries: Array<Record<string, string>> = [
      { limit: "ten" },
      { q: "much-too-long" },
      { limit: "5", debug: "1" },
    ];
    for (const query of queries) {
      const attempt: Attempt = { method: "GET", path: "/payments", query };
      assert.deepEqual(await viaExtAuthz(attempt), { allowed: false, status: 400, reason: "invalid_input" });
      assert.deepEqual(await viaProxy(attempt), { allowed: false, status: 400, reason: "invalid_input" });
    }
    // A declared header is an input too.
    const header: Attempt = { method: "GET", path: "/payments", headers: { "x-tenant": "NOT lower" } };
    assert.deepEqual(await viaExtAuthz(header), { allowed: false, status: 400, reason: "invalid_input" });
    assert.deepEqual(await viaProxy(header), { allowed: false, status: 400, reason: "invalid_input" });
    assert.equal(upstream.seen.length, 0);
  });

  test("a body over the signed maximum: 403 on both; the proxy forwards only the checked body", async () => {
    const over: Attempt = { method: "POST", path: "/payments", body: { amount: MAX_AMOUNT + 1 } };
    assert.deepEqual(await viaExtAuthz(over), {
      allowed: false,
      status: 403,
      reason: "constraint_violation",
    });
    assert.deepEqual(await viaProxy(over), { allowed: false, status: 403, reason: "constraint_violation" });
    assert.equal(upstream.seen.length, 0);

    // Duplicate keys: JSON.parse keeps the last, an upstream's parser may keep the first.
    for (const text of ['{"amount": 1000, "amount": 5}', '{"amount": 1000, "\\u0061mount": 5}']) {
      const duplicate = await proxy(
        { method: "POST", path: "/payments" },
        { "content-type": "application/json" },
        text,
      );
      assert.equal(duplicate.status, 400, text);
      const answer = await check(
        { method: "POST", path: "/payments" },
        { body: text, headers: { "content-type": "application/json", "x-envoy-auth-partial-body": "false" } },
      );
      assert.deepEqual(checkOutcome(answer), { allowed: false, status: 400, reason: "invalid_input" });
    }
    assert.equal(upstream.seen.length, 0);

    // What the proxy forwards is the checked value, re-serialized.
    const reply = await proxy(
      { method: "POST", path: "/payments" },
      { "content-type": "application/json; charset=utf-8" },
      '{ "amount" : 5.0, "memo": "ok" }',
    );
    assert.equal(reply.status, 200);
    assert.equal(upstream.seen.length, 1);
    assert.equal(upstream.seen[0]?.body, '{"amount":5,"memo":"ok"}');
    assert.equal(upstream.seen[0]?.headers["content-type"], "application/json");
    assert.equal(upstream.seen[0]?.headers["x-api-key"], UPSTREAM_SECRET);
  });
});

describe("the proxy reads a bounded body before deciding", () => {
  test("over max-request-bytes: 413 payload_too_large, declared or streamed; nothing reaches the upstream", async () => {
    const big = JSON.stringify({ amount: 1, memo: "x".repeat(MAX_REQUEST_BYTES) });
    const declared = await proxy(
      { method: "POST", path: "/payments" },
      { "content-type": "application/json" },
      big,
    );
    assert.equal(declared.status, 413);
    assert.equal(declared.json().reason, "payload_too_large");
    const streamed = await new Promise<number>((resolve, reject) => {
      const req = httpRequest(
        {
          host: "127.0.0.1",
          port: sidecar.ports.proxy,
          method: "POST",
          path: `http://${PAYMENTS_HOST}/payments`,
          headers: {
            "proxy-authorization": `Bearer ${world.tokens.agent}`,
            "x-authority-capability": PAYMENTS,
            "content-type": "application/json",
            "transfer-encoding": "chunked",
          },
          agent: false,
        },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      req.on("error", reject);
      for (let i = 0; i < 8; i++) req.write("x".repeat(1024));
      req.end();
    });
    assert.equal(streamed, 413);
    assert.equal(upstream.seen.length, 0);
  });

  test("a body that never finishes is cut at the upstream deadline, not held forever", async () => {
    const started = performance.now();
    const status = await new Promise<number>((resolve, reject) => {
      const req = httpRequest(
        {
          host: "127.0.0.1",
          port: sidecar.ports.proxy,
          method: "POST",
          path: `http://${PAYMENTS_HOST}/payments`,
          headers: {
            "proxy-authorization": `Bearer ${world.tokens.agent}`,
            "x-authority-capability": PAYMENTS,
            "content-type": "application/json",
            "content-length": "100",
          },
          agent: false,
        },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      req.on("error", reject);
      req.write('{"amount":');
    });
    assert.equal(status, 400);
    // The world's sidecars have a 1 s upstream deadline.
    assert.ok(performance.now() - started < 5000);
    assert.equal(upstream.seen.length, 0);
  });
});

describe("ext_authz never allows a body it did not see", () => {
  test("a body operation without with_request_body: 403 request_body_required", async () => {
    const answer = await check(
      { method: "POST", path: "/payments" },
      { headers: { "content-type": "application/json", "content-length": "16" } },
    );
    assert.deepEqual(checkOutcome(answer), { allowed: false, status: 403, reason: "request_body_required" });
  });

  test("a body Envoy cut at max_request_bytes: 403 request_body_required", async () => {
    const answer = await check(
      { method: "POST", path: "/payments" },
      {
        body: '{"amount": 1',
        headers: {
          "content-type": "application/json",
          "content-length": "4096",
          "x-envoy-auth-partial-body": "true",
        },
      },
    );
    assert.deepEqual(checkOutcome(answer), { allowed: false, status: 403, reason: "request_body_required" });
  });

  test("a client's own x-envoy-auth-partial-body: false does not pass for a body Envoy sent", async () => {
    const answer = await check(
      { method: "POST", path: "/payments" },
      {
        headers: {
          "content-type": "application/json",
          "content-length": "20",
          "x-envoy-auth-partial-body": "false",
        },
      },
    );
    assert.deepEqual(checkOutcome(answer), { allowed: false, status: 403, reason: "request_body_required" });
  });

  test("a body in raw_body (pack_as_bytes) is read too", async () => {
    const answer = await extAuthz.check(
      {
        method: "POST",
        path: "/payments",
        token: world.tokens.agent,
        headers: { "content-type": "application/json", "x-envoy-auth-partial-body": "false" },
        rawBody: new TextEncoder().encode(JSON.stringify({ amount: MAX_AMOUNT * 10 })),
      },
      { host: PAYMENTS_HOST, capability: PAYMENTS },
    );
    assert.deepEqual(checkOutcome(answer), { allowed: false, status: 403, reason: "constraint_violation" });
  });
});

describe("only what the snapshot declares reaches the upstream", () => {
  const overrides = [...ROUTING_OVERRIDE_HEADERS];

  test("routing-override headers are refused and never reach the upstream", async () => {
    for (const name of overrides) {
      const attempt: Attempt = { method: "GET", path: "/payments", headers: { [name]: "DELETE" } };
      assert.equal((await viaExtAuthz(attempt)).allowed, false, name);
      const reply = await proxy(attempt);
      assert.equal(reply.status, 400, name);
    }
    const overrideQueries: Array<Record<string, string>> = [{ _method: "DELETE" }, { _METHOD: "DELETE" }];
    for (const query of overrideQueries) {
      const attempt: Attempt = { method: "GET", path: "/payments", query };
      assert.deepEqual(await viaExtAuthz(attempt), { allowed: false, status: 400, reason: "invalid_input" });
      assert.deepEqual(await viaProxy(attempt), { allowed: false, status: 400, reason: "invalid_input" });
    }
    // A method override in a JSON body (frameworks read `_method` from it too).
    const inBody: Attempt = { method: "POST", path: "/payments", body: { amount: 1, _method: "DELETE" } };
    assert.deepEqual(await viaExtAuthz(inBody), { allowed: false, status: 400, reason: "invalid_input" });
    assert.deepEqual(await viaProxy(inBody), { allowed: false, status: 400, reason: "invalid_input" });
    assert.equal(upstream.seen.length, 0);
  });

  test("proxy: the caller's credentials, x-authority-* and undeclared headers stay behind", async () => {
    const reply = await proxy(
      { method: "GET", path: "/payments", query: { limit: "5" } },
      {
        authorization: "Bearer caller-token",
        cookie: "session=caller",
        "x-authority-subject": "root-admin",
        "x-authority-permission-id": "payments:delete:/payments",
        "x-forwarded-host": "admin.internal",
        "x-custom": "1",
        "x-tenant": "acme",
        traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        accept: "application/json",
      },
    );
    assert.equal(reply.status, 200);
    assert.equal(upstream.seen.length, 1);
    const seen = upstream.seen[0];
    assert.ok(seen !== undefined);
    assert.equal(seen.url, "/payments?limit=5");
    assert.equal(seen.headers.authorization, undefined);
    assert.equal(seen.headers["proxy-authorization"], undefined);
    assert.equal(seen.headers.cookie, undefined);
    assert.equal(seen.headers["x-authority-subject"], undefined);
    assert.equal(seen.headers["x-authority-permission-id"], `${PAYMENTS}:get:/payments`);
    assert.equal(seen.headers["x-forwarded-host"], undefined);
    assert.equal(seen.headers["x-custom"], undefined);
    assert.equal(seen.headers["x-tenant"], "acme");
    assert.equal(seen.headers.traceparent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    assert.equal(seen.headers.accept, "application/json");
    assert.equal(seen.headers["x-api-key"], UPSTREAM_SECRET);
  });

  test("ext_authz: the same headers go with headers_to_remove; declared and Envoy's own stay", async () => {
    const answer = await check(
      { method: "GET", path: "/payments?limit=5" },
      {
        headers: {
          cookie: "session=caller",
          "proxy-authorization": "Basic eA==",
          "x-authority-subject": "root-admin",
          "x-forwarded-host": "admin.internal",
          "x-custom": "1",
          "x-tenant": "acme",
          traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
          "x-forwarded-proto": "https",
          "x-envoy-attempt-count": "1",
        },
      },
    );
    assert.equal(answer.allowed, true);
    const removed = new Set<string>(answer.response.ok_response.headers_to_remove);
    for (const name of [
      "authorization",
      "cookie",
      "proxy-authorization",
      "x-authority-subject",
      "x-forwarded-host",
      "x-custom",
    ]) {
      assert.ok(removed.has(name), `${name} is removed`);
    }
    for (const name of [
      "x-tenant",
      "traceparent",
      "x-forwarded-proto",
      "x-envoy-attempt-count",
      ":path",
      "host",
    ]) {
      assert.ok(!removed.has(name), `${name} stays`);
    }
    const set = new Map<string, string>(
      answer.response.ok_response.headers.map((option: { header: { key: string; value: string } }) => [
        option.header.key,
        option.header.value,
      ]),
    );
    assert.equal(set.get("x-api-key"), UPSTREAM_SECRET);
  });
});

describe("cross-path: MCP, ext_authz and the proxy give the same answer and reason", () => {
  const cases: Array<{ name: string; attempt: Attempt; allowed: boolean; reason?: string }> = [
    {
      name: "within the maximum",
      attempt: { method: "GET", path: "/payments", query: { limit: "50" } },
      allowed: true,
    },
    {
      name: "over the maximum",
      attempt: { method: "GET", path: "/payments", query: { limit: "51" } },
      allowed: false,
      reason: "constraint_violation",
    },
    {
      name: "not an integer",
      attempt: { method: "GET", path: "/payments", query: { limit: "ten" } },
      allowed: false,
      reason: "invalid_input",
    },
    {
      name: "undeclared query parameter",
      attempt: { method: "GET", path: "/payments", query: { limit: "5", admin: "true" } },
      allowed: false,
      reason: "invalid_input",
    },
    {
      name: "method override parameter",
      attempt: { method: "GET", path: "/payments", query: { _method: "DELETE" } },
      allowed: false,
      reason: "invalid_input",
    },
    {
      name: "declared header against its pattern",
      attempt: { method: "GET", path: "/payments", headers: { "x-tenant": "ACME" } },
      allowed: false,
      reason: "invalid_input",
    },
    {
      name: "body within the maximum",
      attempt: { method: "POST", path: "/payments", body: { amount: 100 } },
      allowed: true,
    },
    {
      name: "body over the maximum",
      attempt: { method: "POST", path: "/payments", body: { amount: 100.5 } },
      allowed: false,
      reason: "constraint_violation",
    },
    {
      name: "body against the schema",
      attempt: { method: "POST", path: "/payments", body: { memo: "no amount" } },
      allowed: false,
      reason: "invalid_input",
    },
  ];
  for (const { name, attempt, allowed, reason } of cases) {
    test(name, async () => {
      const [viaMcpOutcome, viaCheck, viaForward] = [
        await viaMcp(attempt),
        await viaExtAuthz(attempt),
        await viaProxy(attempt),
      ];
      for (const [path, outcome] of [
        ["mcp", viaMcpOutcome],
        ["ext_authz", viaCheck],
        ["proxy", viaForward],
      ] as const) {
        assert.equal(outcome.allowed, allowed, `${path}: allowed`);
        assert.equal(outcome.reason, reason, `${path}: reason`);
      }
      // ext_authz and the proxy answer with the error table's status, as the authority's HTTP routes do.
      assert.equal(viaCheck.status, viaForward.status);
      // MCP and the proxy called the upstream once each for an allowed request, never for a refused one.
      assert.equal(upstream.seen.length, allowed ? 2 : 0);
    });
  }
});
