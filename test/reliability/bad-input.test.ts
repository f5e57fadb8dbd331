/**
 * Bad input against every public endpoint, property-based (fast-check) with modest run
 * counts: malformed JSON, wrong types, odd Unicode (lone surrogates, bidi overrides, NUL),
 * percent-encoding tricks in paths, huge and deeply nested bodies, CR/LF and NUL in header
 * values over raw sockets, oversized tokens. No input yields a crash, a hang, a 5xx that
 * the endpoint's documentation does not list, or a leak: answers never carry a stack
 * trace, an internal path, a planted canary (inputs carry them) or a token.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { ServiceError } from "@grpc/grpc-js";
import fc from "fast-check";
import { loadProtos } from "../../src/servers/sidecar/grpc/proto.ts";
import { canary } from "../helpers/canary.ts";
import { type HttpReply, rawHeaders, rawRequest } from "../helpers/http-client.ts";
import { assertNoLeaks, newCounts, report } from "../helpers/suite-report.ts";
import {
  AGENT,
  BINDING,
  CAPABILITY,
  type CallOptions,
  MANAGED_USERNAME,
  PARTNER,
  SECOND_AGENT,
  type System,
  startSystem,
} from "../helpers/system.ts";

const counts = newCounts();
/** Request ids of answers that are a documented 5xx (their error log line is expected). */
const documented5xx = new Set<string>();
/** Runs per property: enough variety for a regression suite, cheap enough for `make test`. */
const RUNS = 25;
const MiB = 1024 * 1024;

const planted = canary("input-");
const loneSurrogate = fc.integer({ min: 0xd800, max: 0xdfff }).map((code) => String.fromCharCode(code));
const oddString = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ unit: "binary", maxLength: 40 }),
  fc.string({ unit: loneSurrogate, maxLength: 4 }),
  fc.constantFrom(
    "",
    " ",
    "\u0000",
    "\r\n",
    "../../etc/passwd",
    "%2e%2e%2f%2e%2e",
    "' OR '1'='1",
    "<script>alert(1)</script>",
    `$${"{"}jndi:ldap://127.0.0.1/x}`,
    "\u202eevil\u202c",
    "𝕏𝕐ℤ",
    "\uffff\ufffe",
    "a".repeat(9000),
  ),
);
/** Where a secret belongs (passwords, keys, plaintexts): planted canaries, besides odd strings. */
const secretish = fc.oneof(oddString, fc.constant(planted));
const SECRET_FIELDS: ReadonlySet<string> = new Set([
  "secret",
  "client_secret",
  "password",
  "data",
  "api_key",
  "access_key",
  "secret_key",
]);
const anyValue: fc.Arbitrary<unknown> = fc.oneof(
  oddString,
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
  fc.array(oddString, { maxLength: 3 }),
  fc.dictionary(oddString, oddString, { maxKeys: 3 }),
);
/** An object with the endpoint's own field names (so validation is reached) holding anything. */
const shaped = (fields: readonly string[]) =>
  fc.oneof(
    fc.record(
      Object.fromEntries(fields.map((name) => [name, SECRET_FIELDS.has(name) ? secretish : anyValue])),
      {
        requiredKeys: [],
      },
    ),
    fc.jsonValue({ maxDepth: 3 }),
  );
const rawJsonBody = fc.oneof(
  fc.string({ maxLength: 60 }),
  fc.constantFrom(
    "",
    "{",
    "[1,",
    '{"a":}',
    "nul",
    "\u0000",
    '{"a":1}garbage',
    "'single'",
    "NaN",
    '{"__proto__":{"polluted":1}}',
    '{"constructor":{"prototype":{"polluted":1}}}',
    "\ufeff{}",
    `{"data":"${planted}"`,
  ),
);
const printable = fc.string({
  unit: fc.integer({ min: 0x21, max: 0x7e }).map((c) => String.fromCharCode(c)),
  maxLength: 300,
});

/** Percent-encoding, Unicode and traversal tricks for one path segment. */
const oddSegment = fc.oneof(
  fc.constantFrom(
    "%2e%2e",
    "..%2f..%2f",
    "%00",
    "%",
    "%zz",
    "%E0%A4%A",
    "%ED%A0%80",
    "%F0%9F%98%80",
    "%C0%AF",
    "%252e%252e",
    "a%2Fb",
    "..;",
    ".",
    "%20",
    "%u002e",
    "\u00e9",
    "a".repeat(300),
  ),
  printable.map((s) => encodeURIComponent(s)),
  fc
    .string({ unit: "binary", maxLength: 8 })
    .map((s) => encodeURIComponent(s.replace(/[\ud800-\udfff]/g, ""))),
);

describe("bad input", () => {
  let system: System;
  let agent: string;
  let admin: string;
  let invokeToken: string;
  let brokerToken: string;
  let cryptoToken: string;
  let toolNames: string[];

  before(async () => {
    system = await startSystem({ protection: "upstream", managed: true, sidecar: {} });
    agent = await system.agentToken();
    admin = await system.adminToken();
    const binding = system.binding;
    assert.ok(binding);
    invokeToken = await system.workloadToken(binding.agent, "authority/bindings.invoke");
    brokerToken = await system.workloadToken(binding.upstreamClient, "authority/authority.broker.execute");
    cryptoToken = (await system.idp.server().issueToken({ subject: MANAGED_USERNAME, scopes: ["crypto"] }))
      .accessToken;
    const listed = await system.mcp("tools/list", {}, agent);
    toolNames = listed.json.result.tools.map((tool: { name: string }) => tool.name);
  });
  after(() => system?.close());

  /** The answer is one the endpoint documents, and its body is the documented JSON. */
  function expectDocumented(
    reply: HttpReply,
    allowed: readonly number[],
    what: string,
    input: unknown,
  ): void {
    counts.badInputsTried++;
    const shown = JSON.stringify(input)?.slice(0, 300);
    assert.ok(
      allowed.includes(reply.status),
      `${what}: unlisted status ${reply.status} for ${shown}: ${reply.text.slice(0, 300)}`,
    );
    if (reply.status !== 204 && reply.status !== 202) {
      assert.ok(
        reply.json !== undefined,
        `${what}: the answer is JSON (${reply.status}): ${reply.text.slice(0, 200)}`,
      );
    }
  }

  const send = (method: string, url: string, options: CallOptions) =>
    system.call(method, url, { timeoutMs: 20_000, ...options });

  test("authorize-invocation: wrong shapes, types, odd strings and malformed JSON", async () => {
    await fc.assert(
      fc.asyncProperty(shaped(["subject", "capability_id", "method", "path"]), async (body) => {
        const reply = await send("POST", `${system.url}/v1/authorize-invocation`, {
          token: agent,
          json: body,
        });
        expectDocumented(reply, [200, 400, 401, 403], "authorize", body);
      }),
      { numRuns: RUNS },
    );
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          capability_id: fc.oneof(fc.constant(CAPABILITY), oddString),
          method: oddString,
          path: oddString,
        }),
        async (body) => {
          const reply = await send("POST", `${system.url}/v1/authorize-invocation`, {
            token: agent,
            json: body,
          });
          expectDocumented(reply, [200, 400, 403], "authorize (shape ok)", body);
          if (reply.status === 200) assert.equal(reply.json.status, "allowed");
        },
      ),
      { numRuns: RUNS },
    );
    await fc.assert(
      fc.asyncProperty(
        rawJsonBody,
        fc.constantFrom(
          "application/json",
          "text/plain",
          "application/x-www-form-urlencoded",
          "application/json; charset=latin1",
        ),
        async (body, type) => {
          const reply = await send("POST", `${system.url}/v1/authorize-invocation`, {
            token: agent,
            body,
            headers: { "content-type": type },
          });
          expectDocumented(reply, [400, 415], "authorize (raw)", { body, type });
        },
      ),
      { numRuns: RUNS },
    );
  });

  test("admin routes: bodies, query strings and path parameters", async () => {
    const cases: Array<[string, string, readonly string[], readonly number[]]> = [
      ["POST", "/partners", ["partner_id", "name"], [201, 400, 409]],
      [
        "POST",
        `/partners/${PARTNER}/users`,
        ["subject_id", "subject_type", "display_name", "boundary_id", "crypto_version"],
        [201, 400, 404, 409],
      ],
      [
        "PUT",
        `/partners/${PARTNER}/caab/subjects/${SECOND_AGENT}/policies/${CAPABILITY}`,
        ["allowed_permission_ids", "response_redactions", "expires_at", "ttl_seconds", "auth_profile_ref"],
        [200, 400, 404, 409],
      ],
      [
        "PUT",
        `/partners/${PARTNER}/caab/auth-profiles/fuzz-profile`,
        ["type", "kind", "in", "name", "secret", "token_url", "client_id", "client_secret", "scopes"],
        [200, 201, 400],
      ],
      [
        "POST",
        `/partners/${PARTNER}/api-specs/import-openapi`,
        ["capability_id", "name", "document", "format", "upstream_base_url", "auth_profile_ref"],
        [200, 201, 400, 409],
      ],
      [
        "POST",
        "/admin/apis/preview-openapi",
        ["document", "format", "capability_id", "upstream_base_url"],
        [200, 400],
      ],
      [
        "POST",
        `/partners/${PARTNER}/permission-boundaries`,
        [
          "boundary_id",
          "name",
          "allowed_capabilities",
          "allowed_permission_patterns",
          "max_policy_ttl_seconds",
        ],
        [201, 400, 409],
      ],
      [
        "POST",
        `/partners/${PARTNER}/bindings`,
        [
          "binding_id",
          "issuer",
          "jwks_url",
          "jwks",
          "audience",
          "tenant_claim",
          "tenant_value",
          "algorithms",
        ],
        [201, 400, 409],
      ],
    ];
    for (const [method, path, fields, allowed] of cases) {
      await fc.assert(
        fc.asyncProperty(shaped(fields), async (body) => {
          const reply = await send(method, `${system.url}${path}`, { token: admin, json: body });
          expectDocumented(reply, allowed, `${method} ${path}`, body);
        }),
        { numRuns: RUNS },
      );
    }
    await fc.assert(
      fc.asyncProperty(
        fc.dictionary(
          fc.constantFrom(
            "kind",
            "subject",
            "since",
            "until",
            "limit",
            "cursor",
            "partner",
            "decision",
            "period",
            "group_by",
          ),
          oddString,
          { maxKeys: 4 },
        ),
        fc.constantFrom("/admin/audit", "/admin/mcp-audit", "/admin/usage", "/partners"),
        async (query, path) => {
          const search = new URLSearchParams(
            Object.entries(query).map(([k, v]): [string, string] => [k, v.replace(/[\ud800-\udfff]/g, "")]),
          );
          const reply = await send("GET", `${system.url}${path}?${search}`, { token: admin });
          // 431: a request line over the HTTP server's 16 KiB header limit.
          expectDocumented(reply, [200, 400, 431], `GET ${path}`, query);
        },
      ),
      { numRuns: RUNS },
    );
    await fc.assert(
      fc.asyncProperty(
        oddSegment,
        oddSegment,
        fc.constantFrom(
          "/partners/{a}",
          "/partners/{a}/users/{b}",
          "/partners/{a}/caab/subjects/{b}/policy",
          "/v1/bindings/{a}",
          "/v1/bindings/{a}/subjects/{b}",
          "/partners/{a}/capabilities/{b}",
        ),
        async (a, b, template) => {
          const path = template.replace("{a}", a).replace("{b}", b);
          const reply = await send("GET", `${system.url}${path}`, { token: admin });
          // 414: a parameter longer than the router's limit (fastify maxParamLength).
          expectDocumented(reply, [200, 400, 404, 414, 431], `GET ${template}`, path);
        },
      ),
      { numRuns: RUNS * 2 },
    );
  });

  test("binding invoke, broker execute, verify and the workload token endpoint", async () => {
    const fields = [
      "capability_id",
      "method",
      "path",
      "permission_id",
      "arguments",
      "subject_id",
      "binding_id",
      "operation_id",
    ];
    let key = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          shaped(fields),
          fc.record({
            capability_id: fc.constant(CAPABILITY),
            method: fc.constantFrom("GET", "POST", "get", "TRACE"),
            path: oddString,
            arguments: anyValue,
          }),
        ),
        printable,
        async (body, idempotencyKey) => {
          const reply = await send("POST", `${system.url}/v1/bindings/${BINDING}/invoke`, {
            token: invokeToken,
            json: body,
            headers: {
              "x-authority-user-assertion": await system.userAssertion(),
              "idempotency-key": idempotencyKey.length === 0 ? `k-${++key}` : `${idempotencyKey}-${++key}`,
            },
          });
          expectDocumented(reply, [200, 400, 401, 403, 409, 422], "invoke", body);
        },
      ),
      { numRuns: RUNS },
    );
    await fc.assert(
      fc.asyncProperty(shaped(fields), async (body) => {
        const reply = await send("POST", `${system.url}/v1/broker/execute`, {
          token: brokerToken,
          json: body,
          headers: { "x-authority-user-assertion": await system.userAssertion() },
        });
        expectDocumented(reply, [200, 400, 401, 403, 409, 422], "broker", body);
      }),
      { numRuns: RUNS },
    );
    await fc.assert(
      fc.asyncProperty(
        shaped(["profile", "bindingId", "operationId", "arguments", "protectedEnvelope"]),
        async (body) => {
          const reply = await send("POST", `${system.url}/v1/authority/verify`, {
            token: brokerToken,
            json: body,
          });
          expectDocumented(reply, [400, 403], "verify", body);
        },
      ),
      { numRuns: RUNS },
    );
    await fc.assert(
      fc.asyncProperty(
        shaped(["grant_type", "client_id", "client_secret", "scope"]),
        fc.boolean(),
        async (body, form) => {
          const reply = await send(
            "POST",
            `${system.url}/v1/bindings/${BINDING}/token`,
            form
              ? {
                  body: new URLSearchParams(
                    Object.entries(typeof body === "object" && body !== null ? body : { x: body }).map(
                      ([k, v]): [string, string] => [
                        k,
                        (typeof v === "string" ? v : (JSON.stringify(v) ?? "")).replace(
                          /[\ud800-\udfff]/g,
                          "",
                        ),
                      ],
                    ),
                  ).toString(),
                  headers: { "content-type": "application/x-www-form-urlencoded" },
                }
              : { json: body },
          );
          expectDocumented(reply, [400, 401, 415], "workload token", body);
        },
      ),
      { numRuns: RUNS },
    );
  });

  test("hosted MCP: random JSON-RPC methods, params, tool names and arguments", async () => {
    const methods = fc.oneof(
      fc.constantFrom(
        "initialize",
        "tools/list",
        "tools/call",
        "ping",
        "resources/list",
        "prompts/get",
        "notifications/initialized",
        "completion/complete",
      ),
      oddString,
    );
    await fc.assert(
      fc.asyncProperty(
        methods,
        anyValue,
        fc.oneof(fc.integer(), oddString, fc.constant(null)),
        async (method, params, id) => {
          const body = { jsonrpc: "2.0", id, method, params };
          const reply = await send("POST", `${system.url}/mcp`, {
            token: agent,
            json: body,
            headers: { accept: "application/json, text/event-stream" },
          });
          expectDocumented(reply, [200, 202, 400, 406], "mcp", body);
        },
      ),
      { numRuns: RUNS },
    );
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(fc.constantFrom(...toolNames, "list_partners", "revoke_policy"), oddString),
        anyValue,
        async (name, args) => {
          const body = { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name, arguments: args } };
          const reply = await send("POST", `${system.url}/mcp`, {
            token: agent,
            json: body,
            headers: { accept: "application/json, text/event-stream" },
          });
          // Arguments past the JSON limits (a 4,097-character key) are refused before JSON-RPC.
          expectDocumented(reply, [200, 400], "mcp tools/call", body);
          if (reply.status === 400)
            assert.equal((reply.json as { error?: unknown }).error, "input_too_complex");
        },
      ),
      { numRuns: RUNS },
    );
    // Secrets in tool arguments reach the upstream (the caller's data) but never the MCP audit.
    const createItem = toolNames.find((name) => name.startsWith("createItem"));
    assert.ok(createItem);
    const secretArgs = { body: { name: "x", password: planted, api_token: planted, client_secret: planted } };
    const called = await system.mcp("tools/call", { name: createItem, arguments: secretArgs }, agent);
    expectDocumented(called, [200], "mcp tools/call with secrets in the arguments", "secret arguments");
    assert.notEqual(called.json.result.isError, true, called.text);
    const audit = await send("GET", `${system.url}/admin/mcp-audit?limit=500`, { token: admin });
    assert.equal(audit.status, 200);
    assert.ok(audit.json.items.length > 0);
    await fc.assert(
      fc.asyncProperty(rawJsonBody, async (body) => {
        const reply = await send("POST", `${system.url}/mcp`, {
          token: agent,
          body,
          headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
        });
        expectDocumented(reply, [200, 202, 400], "mcp (raw)", body);
      }),
      { numRuns: RUNS },
    );
  });

  test("managed crypto API: bodies and the five credential headers", async () => {
    const managed = system.managed;
    assert.ok(managed);
    const operations = fc.constantFrom("encrypt", "decrypt", "sign-encrypt", "decrypt-verify");
    await fc.assert(
      fc.asyncProperty(operations, shaped(["data", "encrypted_data"]), async (operation, body) => {
        const reply = await system.managedCall(operation, body, { timeoutMs: 20_000 });
        expectDocumented(reply, [200, 400], `managed ${operation}`, body);
      }),
      { numRuns: RUNS },
    );
    const header = fc.oneof(printable, fc.constantFrom("", "a".repeat(3000)));
    const credential = fc
      .constantFrom("username", "password", "api_key", "access_key", "secret_key")
      .chain((name) =>
        fc.tuple(fc.constant(name), name === "username" ? header : fc.oneof(header, fc.constant(planted))),
      );
    await fc.assert(
      fc.asyncProperty(operations, credential, async (operation, [name, value]) => {
        const reply = await system.managedCall(
          operation,
          { data: planted, encrypted_data: "QUJD" },
          { headers: { [name]: value } },
        );
        expectDocumented(reply, [200, 400, 403, 429, 500], `managed header ${name}`, { name, value });
        if (reply.status === 500) {
          // The spec answers wrong identity-provider credentials with 500 (docs/managed-crypto.md).
          assert.equal(reply.json.details.reason, "invalid_idp_credentials", reply.text);
          documented5xx.add(reply.json.requestId);
        }
      }),
      { numRuns: RUNS },
    );
    await fc.assert(
      fc.asyncProperty(
        operations,
        rawJsonBody,
        fc.constantFrom("application/json", "text/plain"),
        async (operation, body, type) => {
          const reply = await send("POST", `${managed.url}/v1/${operation}`, {
            body,
            ca: managed.certificate.cert,
            headers: {
              "content-type": type,
              username: MANAGED_USERNAME,
              password: system.secrets.managedPassword,
            },
          });
          expectDocumented(reply, [400, 415], `managed ${operation} (raw)`, body);
        },
      ),
      { numRuns: RUNS },
    );
  });

  test("crypto service actions and the identity provider's token endpoint", async () => {
    const crypto = system.crypto;
    const keys = system.secrets.partnerKeys;
    assert.ok(crypto && keys);
    await fc.assert(
      fc.asyncProperty(
        shaped(["actions", "data", "encrypted_data", "purpose", "recipient"]),
        fc.boolean(),
        async (body, goodKeys) => {
          const reply = await send("POST", `${crypto.url}/v1/actions`, {
            token: cryptoToken,
            json: body,
            headers: goodKeys
              ? { api_key: keys.apiKey, access_key: keys.accessKey, secret_key: keys.secretKey }
              : { api_key: planted, access_key: "ak_nobody_nobody_nobody_0", secret_key: planted },
          });
          expectDocumented(reply, [200, 400, 403, 404], "crypto actions", body);
        },
      ),
      { numRuns: RUNS },
    );
    await fc.assert(
      fc.asyncProperty(
        fc.record(
          {
            grant_type: fc.oneof(
              fc.constantFrom("password", "client_credentials", "authorization_code"),
              oddString,
            ),
            username: oddString,
            password: secretish,
            client_id: oddString,
            client_secret: secretish,
            scope: oddString,
            audience: oddString,
          },
          { requiredKeys: [] },
        ),
        fc.boolean(),
        async (params, form) => {
          const clean = Object.fromEntries(
            Object.entries(params).map(([k, v]) => [k, String(v).replace(/[\ud800-\udfff]/g, "")]),
          );
          const reply = await send(
            "POST",
            system.idp.tokenEndpoint,
            form
              ? {
                  body: new URLSearchParams(clean).toString(),
                  headers: { "content-type": "application/x-www-form-urlencoded" },
                }
              : { json: params },
          );
          expectDocumented(reply, [400, 401, 413, 415, 429], "idp token", params);
        },
      ),
      { numRuns: RUNS },
    );
  });

  test("ext_authz Check: random attributes and undecodable messages never crash or allow", async () => {
    const check = loadProtos().authorization.Check;
    assert.ok(check, "the ext_authz proto has a Check method");
    const headerMap = fc.dictionary(
      fc.oneof(
        fc.constantFrom("authorization", "x-request-id", ":path", "host", "cookie"),
        printable.map((s) => s.toLowerCase()),
      ),
      oddString,
      { maxKeys: 4 },
    );
    await fc.assert(
      fc.asyncProperty(
        oddString,
        oddString,
        oddString,
        headerMap,
        fc.boolean(),
        async (method, path, host, headers, withToken) => {
          const answer = await system.check({ method, path, host, headers, token: withToken ? agent : null });
          counts.badInputsTried++;
          assert.equal(answer.grpcError, undefined, `${answer.grpcError?.message}`);
          assert.ok(
            [200, 400, 401, 403].includes(answer.status),
            `status ${answer.status} for ${JSON.stringify({ method, path, host })}`,
          );
        },
      ),
      { numRuns: RUNS },
    );
    const sidecar = system.sidecar;
    assert.ok(sidecar);
    const { Client, credentials } = await import("@grpc/grpc-js");
    const client = new Client(`127.0.0.1:${sidecar.grpcPort}`, credentials.createInsecure());
    try {
      await fc.assert(
        fc.asyncProperty(fc.uint8Array({ maxLength: 400 }), async (bytes) => {
          counts.badInputsTried++;
          const outcome = await new Promise<{ error: ServiceError | null; response?: Buffer }>((resolve) => {
            client.makeUnaryRequest(
              check.path,
              (value: Buffer) => value,
              (value: Buffer) => value,
              Buffer.from(bytes),
              { deadline: Date.now() + 10_000 },
              (error: ServiceError | null, response?: Buffer) =>
                resolve({ error, ...(response === undefined ? {} : { response }) }),
            );
          });
          // Either refused as undecodable, or decoded and answered (a deny: no token).
          if (outcome.error !== null) assert.notEqual(outcome.error.code, 4, "no deadline exceeded");
          else {
            const decoded = check.responseDeserialize(outcome.response ?? Buffer.alloc(0)) as {
              http_response?: string;
            };
            assert.notEqual(decoded.http_response, "ok_response", "undecodable bytes are never an allow");
          }
        }),
        { numRuns: RUNS },
      );
    } finally {
      client.close();
    }
    assert.equal((await system.check({ token: agent })).allowed, true, "the sidecar still serves");
  });

  test("huge and deeply nested bodies", async () => {
    const managed = system.managed;
    const crypto = system.crypto;
    assert.ok(managed && crypto);
    const huge = JSON.stringify({
      data: "x".repeat(1.5 * MiB),
      capability_id: CAPABILITY,
      method: "GET",
      path: "/items/1",
    });
    const targets: Array<[string, string, CallOptions, readonly number[]]> = [
      ["authorize", `${system.url}/v1/authorize-invocation`, { token: agent }, [413]],
      ["admin import", `${system.url}/partners/${PARTNER}/api-specs/import-openapi`, { token: admin }, [413]],
      [
        "mcp",
        `${system.url}/mcp`,
        { token: agent, headers: { accept: "application/json, text/event-stream" } },
        [413],
      ],
      ["verify", `${system.url}/v1/authority/verify`, { token: brokerToken }, [413]],
      ["managed", `${managed.url}/v1/encrypt`, { ca: managed.certificate.cert }, [413]],
      ["idp token", system.idp.tokenEndpoint, {}, [413]],
    ];
    for (const [name, url, options, allowed] of targets) {
      const reply = await send("POST", url, {
        ...options,
        body: huge,
        headers: { ...options.headers, "content-type": "application/json" },
        fresh: true,
      });
      expectDocumented(reply, allowed, `${name} (1.5 MiB)`, "huge");
    }
    const hugeCrypto = await send("POST", `${crypto.url}/v1/actions`, {
      token: cryptoToken,
      body: JSON.stringify({ actions: ["e"], data: "x".repeat(3 * MiB) }),
      headers: { "content-type": "application/json" },
      fresh: true,
    });
    expectDocumented(hugeCrypto, [413], "crypto actions (3 MiB)", "huge");
    const invokeHuge = await send("POST", `${system.url}/v1/bindings/${BINDING}/invoke`, {
      token: invokeToken,
      body: huge,
      headers: {
        "content-type": "application/json",
        "x-authority-user-assertion": await system.userAssertion(),
        "idempotency-key": "huge-1",
      },
      fresh: true,
    });
    expectDocumented(invokeHuge, [413], "invoke (1.5 MiB)", "huge");

    for (const depth of [1_000, 100_000]) {
      const array = `${"[".repeat(depth)}${"]".repeat(depth)}`;
      const object = `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}`;
      const bodies: Array<[string, string, CallOptions, string, readonly number[]]> = [
        ["authorize", `${system.url}/v1/authorize-invocation`, { token: agent }, object, [400]],
        [
          "invoke arguments",
          `${system.url}/v1/bindings/${BINDING}/invoke`,
          {
            token: invokeToken,
            headers: {
              "x-authority-user-assertion": await system.userAssertion(),
              "idempotency-key": `deep-${depth}`,
            },
          },
          `{"capability_id":"${CAPABILITY}","method":"POST","path":"/items","arguments":{"body":${array}}}`,
          [400, 413],
        ],
        [
          "mcp arguments",
          `${system.url}/mcp`,
          { token: agent, headers: { accept: "application/json, text/event-stream" } },
          `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"${toolNames[0]}","arguments":{"body":${array}}}}`,
          [200, 400, 413],
        ],
        [
          "admin",
          `${system.url}/partners`,
          { token: admin },
          `{"partner_id":"deep","name":${array}}`,
          [400, 413],
        ],
        ["managed", `${managed.url}/v1/encrypt`, { ca: managed.certificate.cert }, array, [400, 413]],
        ["crypto", `${crypto.url}/v1/actions`, { token: cryptoToken }, object, [400, 413]],
        ["idp", system.idp.tokenEndpoint, {}, object, [400, 413]],
      ];
      for (const [name, url, options, body, allowed] of bodies) {
        const reply = await send("POST", url, {
          ...options,
          body,
          headers: { ...options.headers, "content-type": "application/json" },
          fresh: true,
        });
        expectDocumented(reply, allowed, `${name} nested ${depth} deep`, "deep");
        if (name === "mcp arguments" && reply.status === 200)
          assert.equal(reply.json.result?.isError ?? true, true);
      }
    }
  });

  test("odd paths on every server: percent-encoding, traversal, invalid UTF-8", async () => {
    const managed = system.managed;
    const crypto = system.crypto;
    assert.ok(managed && crypto);
    const bases: Array<[string, CallOptions]> = [
      [system.url, { token: admin }],
      [managed.url, { ca: managed.certificate.cert }],
      [crypto.url, { token: cryptoToken }],
      [system.idp.issuer, {}],
    ];
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...bases.keys()),
        fc.array(oddSegment, { minLength: 1, maxLength: 4 }),
        fc.constantFrom("GET", "POST", "DELETE", "PUT"),
        async (index, segments, method) => {
          const [base, options] = bases[index] ?? bases[0] ?? [system.url, {}];
          const path = `/${segments.join("/")}`;
          const reply = await send(method, `${base}${path}`, {
            ...options,
            ...(method === "GET" || method === "DELETE" ? {} : { json: {} }),
          });
          expectDocumented(reply, [400, 401, 403, 404, 405, 414, 415, 431], `${method} ${path}`, path);
        },
      ),
      { numRuns: RUNS * 2 },
    );
  });

  test("CR/LF, NUL and framing tricks over raw sockets never inject a header or pass", async () => {
    const managed = system.managed;
    const crypto = system.crypto;
    const sidecar = system.sidecar;
    assert.ok(managed && crypto && sidecar);
    const hostPort = (url: string) => {
      const parsed = new URL(url);
      return { host: parsed.hostname, port: Number(parsed.port) };
    };
    const targets = [
      { name: "authority", ...hostPort(system.url), path: "/partners" },
      { name: "idp", ...hostPort(system.idp.issuer), path: "/.well-known/jwks.json" },
      { name: "crypto", ...hostPort(crypto.url), path: "/healthz" },
      { name: "sidecar proxy", host: "127.0.0.1", port: sidecar.proxyPort, path: "/items/7" },
      {
        name: "managed",
        ...hostPort(managed.url),
        path: "/v1/encrypt",
        tls: { ca: managed.certificate.cert },
      },
    ];
    const requests = (path: string) => [
      `GET ${path} HTTP/1.1\r\nHost: x\r\nX-Request-Id: abcdefgh\rSet-Cookie: injected=1\r\n\r\n`,
      `GET ${path} HTTP/1.1\r\nHost: x\r\nX-Request-Id: abcdefgh\nSet-Cookie: injected=1\r\n\r\n`,
      `GET ${path} HTTP/1.1\r\nHost: x\r\nX-A: a\u0000b\r\n\r\n`,
      `GET ${path} HTTP/1.1\r\nHost: x\r\nX-A: a\r\n Set-Cookie: injected=1\r\n\r\n`,
      `GET ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\n\tb\r\n\r\n`,
      `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!`,
      `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /partners HTTP/1.1\r\n\r\n`,
      `GET ${path}\rSet-Cookie: injected=1 HTTP/1.1\r\nHost: x\r\n\r\n`,
      `GET ${path} HTTP/1.1\nHost: x\nSet-Cookie: injected=1\n\n`,
    ];
    for (const target of targets) {
      for (const raw of requests(target.path)) {
        const reply = await rawRequest(target.host, target.port, raw, {
          timeoutMs: 5000,
          ...("tls" in target && target.tls !== undefined ? { tls: target.tls } : {}),
        });
        counts.badInputsTried++;
        assert.equal(
          reply.status,
          400,
          `${target.name}: ${JSON.stringify(raw.slice(0, 60))} → ${reply.text.slice(0, 120)}`,
        );
        for (const [name, value] of rawHeaders(reply.text)) {
          assert.ok(
            !(name === "set-cookie" && value.includes("injected")),
            `${target.name}: header injected`,
          );
        }
        system.leaks.checkResponse(`raw ${target.name}`, reply.text);
      }
      // A percent-encoded CR/LF in X-Request-Id is never decoded into the answer's headers.
      const encoded = await rawRequest(
        target.host,
        target.port,
        `GET ${target.path} HTTP/1.1\r\nHost: x\r\nX-Request-Id: abcdefgh%0d%0aSet-Cookie:%20injected=1\r\nConnection: close\r\n\r\n`,
        "tls" in target && target.tls !== undefined ? { tls: target.tls } : {},
      );
      counts.badInputsTried++;
      assert.ok(
        encoded.status >= 200 && encoded.status < 500,
        `${target.name}: ${encoded.text.slice(0, 120)}`,
      );
      assert.ok(
        !rawHeaders(encoded.text).some(([name]) => name === "set-cookie"),
        `${target.name}: no Set-Cookie`,
      );
    }
  });

  test("oversized tokens and assertions", async () => {
    const big = `${"a".repeat(4000)}.${"b".repeat(4000)}.${"c".repeat(2000)}`;
    const authorize = await send("POST", `${system.url}/v1/authorize-invocation`, {
      token: big,
      json: { capability_id: CAPABILITY, method: "GET", path: "/items/1" },
    });
    expectDocumented(authorize, [401], "authorize, 10 KB token", "big");
    assert.equal(authorize.json.reason, "invalid_token");
    const adminReply = await send("GET", `${system.url}/partners`, { token: big });
    expectDocumented(adminReply, [401], "admin, 10 KB token", "big");
    const mcp = await send("POST", `${system.url}/mcp`, {
      token: big,
      json: { jsonrpc: "2.0", id: 1, method: "tools/list" },
      headers: { accept: "application/json, text/event-stream" },
    });
    expectDocumented(mcp, [401], "mcp, 10 KB token", "big");
    const invoke = await system.invoke(
      { capability_id: CAPABILITY, method: "GET", path: "/items/1" },
      { assertion: big },
    );
    expectDocumented(invoke, [401], "invoke, 10 KB assertion", "big");
    assert.equal(invoke.json.error, "invalid_user_assertion");
    const proxied = await system.proxy("/items/1", big);
    expectDocumented(proxied, [401], "sidecar proxy, 10 KB token", "big");
    const check = await system.check({ token: big });
    assert.equal(check.status, 401);
    // Beyond the HTTP servers' header limit (16 KiB): 431 from the server, nothing parsed.
    const huge = "a".repeat(20_000);
    for (const url of [
      `${system.url}/v1/authorize-invocation`,
      `${system.url}/partners`,
      system.idp.tokenEndpoint,
    ]) {
      const reply = await send("POST", url, { token: huge, json: {}, fresh: true });
      expectDocumented(reply, [431], `${url}, 20 KB token`, "huge");
    }
  });

  test("nothing crashed, nothing polluted, no error logged; no leak; summary", async (t) => {
    assert.equal((Object.prototype as Record<string, unknown>).polluted, undefined, "no prototype pollution");
    assert.equal(
      (
        await system.authorize(
          { capability_id: CAPABILITY, method: "GET", path: "/items/1" },
          await system.agentToken(AGENT),
        )
      ).status,
      200,
    );
    assert.equal((await system.managedCall("encrypt", { data: "still up" })).status, 200);
    const errors = system.logs.errors().filter((line) => {
      const reqId = (JSON.parse(line) as { reqId?: unknown }).reqId;
      return !(typeof reqId === "string" && documented5xx.has(reqId));
    });
    assert.deepEqual(
      errors.map((line) => line.slice(0, 300)),
      [],
      "no server logged an error for bad input",
    );
    // Everything the operations views show about the requests above is scanned too.
    for (const path of [
      "/admin/audit?limit=500",
      "/admin/mcp-audit?limit=500",
      `/v1/bindings/${BINDING}/invocations?limit=500`,
    ]) {
      assert.equal((await send("GET", `${system.url}${path}`, { token: admin })).status, 200, path);
    }
    const scanned = assertNoLeaks(system);
    report(
      t,
      "bad-input",
      counts,
      `responses scanned: ${scanned.responses}, log lines scanned: ${scanned.logLines}`,
    );
  });
});
