/**
 * Issue 26, "Bounded work on caller input, everywhere" (docs/security.md): hostile JSON — nested
 * past any serializer's stack (arrays, objects, both), objects with more keys than the limit,
 * keys and key paths longer than the pointer bound, long strings, long arrays of objects —
 * hostile headers (deep-looking values, signed tokens whose claims nest deeply) and hostile
 * paths, sent on every path: the sidecar's ext_authz Check and forward proxy,
 * authorize-invocation, binding invoke, broker execute, authority verify, MCP tools/call and
 * admin API bodies (fast-check picks the input and the path).
 *
 * Each answer is a documented status — a refusal is a 4xx whose reason is a code of the error
 * table (`input_too_complex` past the JSON limits), never a 5xx — the authority and the sidecar
 * keep serving (they run in this process: a crash fails the suite), and every call that was
 * allowed has its decision record at the authority.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import fc from "fast-check";
import { isErrorCode } from "../../src/errors.ts";
import type { HttpReply } from "../helpers/http-client.ts";
import {
  AGENT,
  BINDING,
  CAPABILITY,
  type ExtAuthzAnswer,
  PARTNER,
  SECOND_AGENT,
  SIDECAR_HOST,
  type System,
  startSystem,
} from "../helpers/system.ts";

const RUNS = 40;

const nest = (depth: number, open: string, close: string, leaf: string): string =>
  `${open.repeat(depth)}${leaf}${close.repeat(depth)}`;

/** JSON texts (they cannot all be built as values: the test could not serialize them either). */
const hostileJson: fc.Arbitrary<string> = fc.oneof(
  fc
    .tuple(fc.integer({ min: 129, max: 60_000 }), fc.constantFrom("array", "object", "mixed"))
    .map(([depth, shape]) =>
      shape === "array"
        ? nest(depth, "[", "]", "")
        : shape === "object"
          ? nest(depth, '{"k":', "}", "1")
          : nest(Math.ceil(depth / 2), '[{"k":', "}]", "null"),
    ),
  fc
    .integer({ min: 10_001, max: 12_000 })
    .map((n) => `{${Array.from({ length: n }, (_, i) => `"k${i}":${i}`).join(",")}}`),
  fc.integer({ min: 4_097, max: 50_000 }).map((n) => `{"${"k".repeat(n)}":1}`),
  fc.integer({ min: 25, max: 60 }).map((levels) => nest(levels, `{"${"p".repeat(200)}":`, "}", "1")),
  fc.integer({ min: 1, max: 400_000 }).map((n) => `{"name":"${"x".repeat(n)}"}`),
  fc.integer({ min: 1, max: 20_000 }).map((n) => `[${Array.from({ length: n }, () => '{"a":1}').join(",")}]`),
  fc.jsonValue({ maxDepth: 4 }).map((value) => JSON.stringify(value)),
  fc.constantFrom("", "{", "[1,", '{"__proto__":{"x":1}}', "\ufeff{}", "nul"),
);

/** Header values a caller controls (all of them are refused or ignored, never fatal). */
const hostileHeader: fc.Arbitrary<string> = fc.oneof(
  fc.integer({ min: 100, max: 4_000 }).map((depth) => nest(depth, "[", "]", "")),
  fc.integer({ min: 100, max: 4_000 }).map((depth) => nest(depth, '{"a":', "}", "1")),
  fc.string({ unit: fc.constantFrom("a", "%", "2", "5", "{", "[", ",", '"', "\\"), maxLength: 6_000 }),
);

/** Paths with deep query structures, traversal and long segments. */
const hostilePath: fc.Arbitrary<string> = fc.oneof(
  fc.integer({ min: 1, max: 2_000 }).map((depth) => `/items?q${"[a]".repeat(depth)}=1`),
  fc.integer({ min: 1, max: 3_000 }).map((n) => `/items?${Array.from({ length: n }, () => "q=1").join("&")}`),
  fc.integer({ min: 1, max: 2_000 }).map((n) => `/items/${"%2e%2e%2f".repeat(n)}`),
  fc.integer({ min: 1, max: 6_000 }).map((n) => `/items/${"a".repeat(n)}`),
  fc.constantFrom("/items/1", "/items", "/items/%00", "/items/..;/1", "/items/1?q={}&q=[[[]]]"),
);

/** The request id an ext_authz allow carries to the upstream (its record has the same). */
function allowRequestId(answer: ExtAuthzAnswer): string | undefined {
  const headers = (answer.response?.ok_response?.headers ?? []) as Array<{
    header: { key: string; value: string };
  }>;
  return headers.find((option) => option.header.key === "x-authority-request-id")?.header.value;
}

type Sent = { readonly path: string; readonly reply: HttpReply; readonly requestId: string };

describe("hostile input on every path", () => {
  let system: System;
  let agent: string;
  let admin: string;
  let invokeToken: string;
  let brokerToken: string;
  let postTool: string;
  let sequence = 0;
  /** Request ids of every call that was allowed, by path. */
  const allowed: Array<{ path: string; requestId: string }> = [];
  const nextId = (path: string) => `hostile-${path}-${++sequence}-${Date.now()}`;

  before(async () => {
    system = await startSystem({ sidecar: {}, bodyLimitBytes: 1024 * 1024 });
    agent = await system.agentToken();
    admin = await system.adminToken();
    const binding = system.binding;
    assert.ok(binding);
    invokeToken = await system.workloadToken(binding.agent, "authority/bindings.invoke");
    brokerToken = await system.workloadToken(binding.upstreamClient, "authority/authority.broker.execute");
    const listed = await system.mcp("tools/list", {}, agent);
    const names: string[] = listed.json.result.tools.map((tool: { name: string }) => tool.name);
    const post = names.find((name) => name.startsWith("createItem"));
    assert.ok(post, names.join(","));
    postTool = post;
  });
  after(() => system?.close());

  /** JSON text → one request on `path`, with a fresh request id. */
  const paths: Record<string, (json: string, requestId: string) => Promise<HttpReply>> = {
    proxy: (json, requestId) =>
      system.call("POST", `http://127.0.0.1:${system.sidecar?.proxyPort}/items`, {
        headers: {
          host: SIDECAR_HOST,
          "proxy-authorization": `Bearer ${agent}`,
          "content-type": "application/json",
          "x-request-id": requestId,
        },
        body: json,
        timeoutMs: 20_000,
      }),
    authorize: (json, requestId) =>
      system.call("POST", `${system.url}/v1/authorize-invocation`, {
        token: agent,
        headers: { "content-type": "application/json", "x-request-id": requestId },
        body: `{"subject":{"subject_id":"${AGENT}"},"capability_id":"${CAPABILITY}","method":"POST","path":"/items","context":${json || "1"}}`,
        timeoutMs: 20_000,
      }),
    invoke: async (json, requestId) =>
      system.call("POST", `${system.url}/v1/bindings/${BINDING}/invoke`, {
        token: invokeToken,
        headers: {
          "content-type": "application/json",
          "x-request-id": requestId,
          "x-authority-user-assertion": await system.userAssertion(),
          "idempotency-key": requestId,
        },
        body: `{"capability_id":"${CAPABILITY}","method":"POST","path":"/items","arguments":{"body":${json || "1"}}}`,
        timeoutMs: 20_000,
      }),
    broker: async (json, requestId) =>
      system.call("POST", `${system.url}/v1/broker/execute`, {
        token: brokerToken,
        headers: {
          "content-type": "application/json",
          "x-request-id": requestId,
          "x-authority-user-assertion": await system.userAssertion(),
        },
        body: `{"capability_id":"${CAPABILITY}","method":"POST","path":"/items","arguments":{"body":${json || "1"}}}`,
        timeoutMs: 20_000,
      }),
    verify: (json, requestId) =>
      system.call("POST", `${system.url}/v1/authority/verify`, {
        token: brokerToken,
        headers: { "content-type": "application/json", "x-request-id": requestId },
        body: `{"profile":"partner-profile-v2","bindingId":"${BINDING}","operationId":"op","arguments":${json || "{}"},"protectedEnvelope":"x"}`,
        timeoutMs: 20_000,
      }),
    mcp: (json, requestId) =>
      system.call("POST", `${system.url}/mcp`, {
        token: agent,
        headers: {
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
          "x-request-id": requestId,
        },
        body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"${postTool}","arguments":{"body":${json || "1"}}}}`,
        timeoutMs: 20_000,
      }),
    admin: (json, requestId) =>
      system.call(
        "PUT",
        `${system.url}/partners/${PARTNER}/caab/subjects/${SECOND_AGENT}/policies/${CAPABILITY}`,
        {
          token: admin,
          headers: { "content-type": "application/json", "x-request-id": requestId },
          body: `{"allowed_permission_ids":["${CAPABILITY}:get:/items/{itemId}"],"response_redactions":${json || "{}"}}`,
          timeoutMs: 20_000,
        },
      ),
  };

  /** A documented answer: below 500, and a refusal names a code of the error table. */
  const expectDocumented = ({ path, reply, requestId }: Sent): void => {
    assert.ok(reply.status < 500, `${path}: ${reply.status} ${reply.text.slice(0, 300)}`);
    // 431: Node's HTTP parser refuses headers over 16 KiB before any handler runs (no body).
    // /mcp answers text that is not JSON as JSON-RPC does (-32700), batches it refuses -32600.
    const jsonRpcCode = path === "mcp" ? reply.json?.error?.code : undefined;
    if (reply.status >= 400 && reply.status !== 431 && jsonRpcCode !== -32700 && jsonRpcCode !== -32600) {
      const code = reply.json?.reason ?? reply.json?.error;
      assert.ok(typeof code === "string" && isErrorCode(code), `${path}: ${reply.text.slice(0, 300)}`);
    }
    const mcpError =
      path === "mcp" && (reply.json?.result?.isError === true || reply.json?.error !== undefined);
    const wasAllowed =
      reply.status < 300 &&
      !mcpError &&
      (path === "proxy" || path === "invoke" || path === "mcp" || reply.json?.status === "allowed");
    if (wasAllowed && path !== "admin" && path !== "verify") allowed.push({ path, requestId });
  };

  const stillServing = async (): Promise<void> => {
    const health = await system.call("GET", `${system.url}/healthz`);
    assert.equal(health.status, 200, "the authority still serves");
    assert.equal(
      (await system.check({ token: agent, path: "/items/1" })).allowed,
      true,
      "the sidecar still serves",
    );
  };

  test("hostile JSON on every HTTP path: a documented answer, the processes keep serving", async () => {
    await fc.assert(
      fc.asyncProperty(hostileJson, fc.constantFrom(...Object.keys(paths)), async (json, path) => {
        const requestId = nextId(path);
        const send = paths[path];
        assert.ok(send);
        expectDocumented({ path, reply: await send(json, requestId), requestId });
      }),
      { numRuns: RUNS * Object.keys(paths).length },
    );
    // Past the limits it is always input_too_complex, whichever path.
    for (const [path, send] of Object.entries(paths)) {
      const reply = await send(nest(100_000, "[", "]", ""), nextId(path));
      assert.equal(reply.status, 400, `${path}: ${reply.text.slice(0, 200)}`);
      assert.equal(reply.json?.reason ?? reply.json?.error, "input_too_complex", path);
    }
    await stillServing();
  });

  test("hostile JSON in ext_authz Check bodies", async () => {
    await fc.assert(
      fc.asyncProperty(hostileJson, async (json) => {
        const requestId = nextId("grpc");
        const answer = await system.check({
          token: agent,
          method: "POST",
          path: "/items",
          headers: { "content-type": "application/json", "x-request-id": requestId },
          body: json.length > 200_000 ? json.slice(0, 200_000) : json,
        });
        assert.equal(answer.grpcError, undefined);
        assert.ok(answer.status < 500, `grpc: ${answer.status}`);
        if (answer.allowed) allowed.push({ path: "grpc", requestId: allowRequestId(answer) ?? requestId });
        else assert.ok(isErrorCode(answer.response.status.message), answer.response.status.message);
      }),
      { numRuns: RUNS * 2 },
    );
    await stillServing();
  });

  test("hostile headers and paths on the sidecar's two transports and the authority", async () => {
    await fc.assert(
      fc.asyncProperty(hostileHeader, hostilePath, async (value, path) => {
        const requestId = nextId("headers");
        const headers = {
          "x-trace-blob": value,
          "x-authority-capability": value.slice(0, 512),
          "x-request-id": requestId,
        };
        const proxied = await system.call("GET", `http://127.0.0.1:${system.sidecar?.proxyPort}${path}`, {
          headers: { ...headers, host: SIDECAR_HOST, "proxy-authorization": `Bearer ${agent}` },
          timeoutMs: 20_000,
        });
        expectDocumented({ path: "proxy", reply: proxied, requestId });
        const checkId = nextId("headers-grpc");
        const checked = await system.check({
          token: agent,
          path,
          headers: { "x-trace-blob": value, "x-request-id": checkId },
        });
        assert.ok(checked.status < 500 && checked.grpcError === undefined, `grpc ${path}: ${checked.status}`);
        if (checked.allowed) allowed.push({ path: "grpc", requestId: allowRequestId(checked) ?? checkId });
        const authorized = await system.call("POST", `${system.url}/v1/authorize-invocation`, {
          token: agent,
          headers: { "x-trace-blob": value, "content-type": "application/json" },
          json: { subject: { subject_id: AGENT }, capability_id: CAPABILITY, method: "GET", path },
          timeoutMs: 20_000,
        });
        assert.ok(
          authorized.status < 500,
          `authorize ${path}: ${authorized.status} ${authorized.text.slice(0, 200)}`,
        );
      }),
      { numRuns: RUNS },
    );
    await stillServing();
  });

  test("a signed token whose claims nest deeply is an invalid token on every transport", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 17, max: 1_000 }),
        fc.constantFrom("[", "{"),
        async (depth, open) => {
          let claim: unknown = 1;
          for (let i = 0; i < depth; i++) claim = open === "[" ? [claim] : { a: claim };
          const token = (await system.idp.server().issueToken({ subject: AGENT, claims: { deep: claim } }))
            .accessToken;
          const authorized = await system.authorize(
            { subject: { subject_id: AGENT }, capability_id: CAPABILITY, method: "GET", path: "/items/1" },
            token,
          );
          assert.equal(authorized.status, 401, authorized.text.slice(0, 200));
          const checked = await system.check({ token, path: "/items/1" });
          assert.equal(checked.allowed, false);
          assert.equal(checked.status, 401);
          const proxied = await system.proxy("/items/1", token);
          assert.equal(proxied.status, 401);
        },
      ),
      { numRuns: 10 },
    );
    await stillServing();
  });

  test("every allowed call has its decision record at the authority", async () => {
    assert.ok(allowed.length > 0, "some calls were allowed");
    assert.equal(await system.sidecar?.sidecar.flushAudit(10_000), true);
    const recorded = new Set<string>();
    for (const log of ["/admin/audit?kind=decision", "/admin/mcp-audit"]) {
      let cursor: string | undefined;
      do {
        const page = await system.call(
          "GET",
          `${system.url}${log}&limit=500${cursor === undefined ? "" : `&cursor=${cursor}`}`.replace(
            "mcp-audit&",
            "mcp-audit?",
          ),
          { token: admin },
        );
        assert.equal(page.status, 200, page.text.slice(0, 200));
        for (const item of page.json.items as Array<{ requestId?: string; decision?: string }>) {
          if (typeof item.requestId === "string") recorded.add(item.requestId);
        }
        cursor = page.json.next;
      } while (cursor !== undefined);
    }
    const missing = allowed.filter(({ requestId }) => !recorded.has(requestId));
    assert.deepEqual(missing, [], `${allowed.length} allowed calls`);
    system.scanLogs();
    assert.deepEqual(system.leaks.findings(), []);
  });
});
