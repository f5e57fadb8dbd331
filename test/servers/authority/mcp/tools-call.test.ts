import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { revokePolicy } from "../../../../src/admin/policies.ts";
import type { McpAuditRecord } from "../../../../src/audit/mcp-records.ts";
import type { DecisionAuditRecord } from "../../../../src/audit/records.ts";
import { executionErrorTable } from "../../../../src/execute/errors.ts";
import { logs } from "../../../../src/store/model.ts";
import { type Harness, PARTNER, permission, startHarness, UPSTREAM_SECRET } from "./harness.ts";

let h: Harness;
before(async () => {
  h = await startHarness();
});
after(() => h.close());

const ALL = [
  permission("get", "/orders"),
  permission("post", "/orders"),
  permission("get", "/orders/{orderId}"),
  permission("get", "/customers/{customerId}"),
  permission("get", "/fail"),
  permission("get", "/slow"),
];

interface Session {
  readonly client: Client;
  readonly token: string;
  /** Tool name by operation id. */
  readonly tools: Map<string, string>;
}

async function session(subject: string, permissions = ALL, options?: Parameters<Harness["grant"]>[2]) {
  await h.grant(subject, permissions, options);
  const token = await h.token(subject);
  const client = await h.connect(token);
  const { tools } = await client.listTools();
  const byOperation = new Map(tools.map((tool) => [tool.name.replace(/_[0-9a-f]{8}$/, ""), tool.name]));
  return { client, token, tools: byOperation } satisfies Session;
}

function toolName(s: Session, operationId: string): string {
  const name = s.tools.get(operationId);
  assert.ok(name !== undefined, `no tool for ${operationId}`);
  return name;
}

async function call(s: Session, operationId: string, args: Record<string, unknown>): Promise<CallToolResult> {
  return (await s.client.callTool({ name: toolName(s, operationId), arguments: args })) as CallToolResult;
}

function errorBody(result: CallToolResult): {
  error: string;
  message: string;
  details?: Record<string, unknown>;
} {
  assert.equal(result.isError, true);
  assert.equal(result.structuredContent, undefined);
  const first = result.content[0];
  assert.ok(first !== undefined && first.type === "text");
  return JSON.parse(first.text);
}

async function mcpRows(): Promise<McpAuditRecord[]> {
  await h.context.decisions.recorder.flush(5000);
  return (await h.store.readLog<McpAuditRecord>(logs.mcpAudit, { limit: 1000 })).map((entry) => entry.value);
}

async function decisions(): Promise<DecisionAuditRecord[]> {
  await h.context.decisions.recorder.flush(5000);
  return (await h.store.readLog<DecisionAuditRecord>(logs.audit, { limit: 1000 }))
    .map((entry) => entry.value)
    .filter((record) => record.kind === "decision");
}

test("an allowed call reaches the upstream with the injected auth profile, never the caller's token", async () => {
  const s = await session("caller-1");
  const before = h.upstream.requests.length;
  const result = await call(s, "getOrder", { path: { orderId: "o-42" } });
  assert.equal(result.isError, undefined);
  assert.deepEqual(result.structuredContent?.status, 200);
  assert.deepEqual(result.structuredContent?.body, { id: "o-42" });
  const first = result.content[0];
  assert.ok(first !== undefined && first.type === "text");
  assert.deepEqual(JSON.parse(first.text), result.structuredContent);

  assert.equal(h.upstream.requests.length, before + 1);
  const seen = h.upstream.requests.at(-1);
  assert.equal(seen?.method, "GET");
  assert.equal(seen?.url, "/v1/orders/o-42");
  assert.equal(seen?.headers["x-api-key"], UPSTREAM_SECRET);
  assert.equal(seen?.headers.authorization, undefined);
  assert.ok(!JSON.stringify(seen?.headers).includes(s.token));
  assert.match(String(seen?.headers["x-request-id"]), /^req_/);

  const created = await call(s, "createOrder", { body: { item: "widget", quantity: 2 } });
  assert.equal(created.structuredContent?.status, 201);
  assert.deepEqual(h.upstream.requests.at(-1)?.body, JSON.stringify({ item: "widget", quantity: 2 }));
});

test("every call is recorded: decision (transport mcp, with usage) and an MCP audit row", async () => {
  const s = await session("caller-audit");
  await call(s, "listOrders", { query: { limit: 5 } });
  const decision = (await decisions()).filter((d) => d.subject_id === "caller-audit").at(-1);
  assert.equal(decision?.transport, "mcp");
  assert.equal(decision?.decision, "allowed");
  assert.equal(decision?.permission_id, permission("get", "/orders"));
  assert.equal(decision?.partner_id, PARTNER);
  assert.equal(decision?.method, "GET");
  assert.equal(decision?.path, "/orders");

  const row = (await mcpRows()).filter((r) => r.subject_id === "caller-audit").at(-1);
  assert.equal(row?.tool, toolName(s, "listOrders"));
  assert.equal(row?.permission_id, permission("get", "/orders"));
  assert.equal(row?.method, "GET");
  assert.equal(row?.status, 200);
  assert.match(row?.url_hash ?? "", /^sha256:[0-9a-f]{64}$/);
  assert.equal(row?.error_code, null);
  assert.equal(row?.request.truncated, false);
  assert.deepEqual(JSON.parse(row?.request.json ?? "null"), { query: { limit: 5 } });
  assert.equal(row?.response.truncated, false);
  assert.equal(JSON.parse(row?.response.json ?? "null").status, 200);
  assert.ok((row?.duration_ms ?? -1) >= 0);

  const usage = await h.store.readCounters("usage");
  const keys = Object.keys(usage).filter((key) => key.includes("caller-audit") && key.endsWith("|allowed"));
  assert.equal(keys.length, 2, "one day and one hour counter");
});

/** The Deny fields of a refused tool call's error result. */
function denialOf(result: unknown): { reason: string; rule: string; remedy?: unknown } {
  const refused = result as { isError?: boolean; content: Array<{ text: string }> };
  assert.equal(refused.isError, true);
  const { reason, rule, remedy } = JSON.parse(refused.content[0]?.text ?? "{}");
  return remedy === undefined ? { reason, rule } : { reason, rule, remedy };
}

test("a revoked policy denies the call even though the client still holds the old list", async () => {
  const s = await session("caller-revoked");
  assert.equal((await call(s, "listOrders", {})).structuredContent?.status, 200);
  await revokePolicy(h.context, h.actor, PARTNER, "caller-revoked");
  const before = h.upstream.requests.length;
  // A tool of the caller's own policy: the refusal says why and what to do (its own policy's
  // state, nothing of the catalog); a name outside the policy stays an unknown tool.
  assert.deepEqual(denialOf(await call(s, "listOrders", {})), {
    reason: "policy_revoked",
    rule: "policy/revoked",
    remedy: { action: "contact_partner" },
  });
  await s.client.callTool({ name: "listOrders_00000000", arguments: {} }).then(
    () => assert.fail("an unknown tool must not run"),
    (error: { code: number }) => assert.equal(error.code, -32602),
  );
  assert.equal(h.upstream.requests.length, before);
  const denials = (await decisions()).filter(
    (d) => d.subject_id === "caller-revoked" && d.decision === "denied",
  );
  assert.deepEqual(
    denials.map((d) => [d.permission_id, d.reason]),
    [
      [permission("get", "/orders"), "policy_revoked"],
      [null, "policy_revoked"],
    ],
  );
});

test("a tool outside the policy answers like an unknown tool", async () => {
  const narrow = await session("caller-narrow", [permission("get", "/orders")]);
  const wide = await session("caller-wide");
  const error = await narrow.client
    .callTool({ name: toolName(wide, "getOrder"), arguments: { path: { orderId: "o-1" } } })
    .then(
      () => assert.fail("not allowed"),
      (e: { code: number; message: string }) => e,
    );
  assert.equal(error.code, -32602);
  assert.equal(
    error.message,
    `MCP error -32602: Tool not available to this caller: ${toolName(wide, "getOrder")}`,
  );
});

test("an expired policy denies the call", async () => {
  const s = await session("caller-expiring", ALL, { ttlSeconds: 60 });
  h.clock.offsetMs = 120_000;
  try {
    assert.deepEqual(denialOf(await call(s, "listOrders", {})), {
      reason: "policy_expired",
      rule: "policy/expired",
      remedy: { action: "contact_partner" },
    });
  } finally {
    h.clock.offsetMs = 0;
  }
  const decision = (await decisions()).filter((d) => d.subject_id === "caller-expiring").at(-1);
  assert.equal(decision?.reason, "policy_expired");
});

test("invalid input is refused before any upstream request", async () => {
  const s = await session("caller-invalid");
  const before = h.upstream.requests.length;
  const cases: Array<[string, Record<string, unknown>, string]> = [
    ["getOrder", { path: { orderId: { id: "o-1" } } }, "path"],
    ["getOrder", {}, "path"],
    ["createOrder", { body: { quantity: 1 } }, "body"],
    ["listOrders", { query: { limit: 1000 } }, "query"],
    ["listOrders", { query: { unknown: "x" } }, "query"],
    ["listOrders", { extra: true }, "arguments"],
  ];
  for (const [operation, args, location] of cases) {
    const body = errorBody(await call(s, operation, args));
    assert.equal(body.error, executionErrorTable.invalid_input.code, JSON.stringify(args));
    assert.equal(body.details?.reason, "invalid_input");
    const issues = body.details?.issues as Array<{ location: string }>;
    assert.equal(issues[0]?.location, location);
  }
  assert.equal(h.upstream.requests.length, before);
  const row = (await mcpRows()).filter((r) => r.subject_id === "caller-invalid").at(-1);
  assert.equal(row?.error_code, "invalid_input");
  assert.equal(row?.status, null);
  assert.equal(row?.url_hash, null);
  // A path value outside the declared pattern does not address this operation: the path
  // rule's reason, as on ext_authz for the same path (docs/decisions/0301).
  const outside = errorBody(await call(s, "getOrder", { path: { orderId: "not-an-order" } }));
  assert.equal(outside.error, "ambiguous_path");
  assert.equal(h.upstream.requests.length, before);
  const refused = (await mcpRows()).filter((r) => r.subject_id === "caller-invalid").at(-1);
  assert.equal(refused?.error_code, "ambiguous_path");
  assert.equal(refused?.status, null);
});

test("signed parameter constraints are enforced before anything is sent", async () => {
  const s = await session("caller-constrained", [...ALL, permission("get", "/reports")]);
  const before = h.upstream.requests.length;
  for (const args of [{ query: { region: "apac" } }, {}]) {
    const body = errorBody(await call(s, "getReport", args));
    assert.equal(body.error, executionErrorTable.constraint_violation.code);
    assert.equal(body.details?.reason, "constraint_violation");
  }
  assert.equal(h.upstream.requests.length, before);
  const allowed = await call(s, "getReport", { query: { region: "eu" } });
  assert.deepEqual(allowed.structuredContent?.body, { region: "eu" });
  assert.equal(h.upstream.requests.length, before + 1);
});

test("an upstream HTTP error is an isError result with the structured, redacted answer", async () => {
  const s = await session("caller-fail");
  const result = await call(s, "alwaysFails", {});
  assert.equal(result.isError, true);
  assert.equal(result.structuredContent?.status, 500);
  assert.deepEqual(result.structuredContent?.body, { error: "boom", client_secret: "******" });
  const row = (await mcpRows()).filter((r) => r.subject_id === "caller-fail").at(-1);
  assert.equal(row?.status, 500);
  assert.equal(row?.error_code, "upstream_http_error");
});

test("an upstream that does not answer in time is an isError upstream_timeout result", async () => {
  const s = await session("caller-slow");
  const body = errorBody(await call(s, "neverAnswersInTime", {}));
  assert.equal(body.error, "upstream_timeout");
  assert.equal(body.details?.reason, "upstream_timeout");
  const row = (await mcpRows()).filter((r) => r.subject_id === "caller-slow").at(-1);
  assert.equal(row?.error_code, "upstream_timeout");
  assert.match(row?.url_hash ?? "", /^sha256:/);
});

test("responses are redacted: sensitive headers, the policy's rules, then default masking", async () => {
  const rules = {
    [permission("get", "/customers/{customerId}")]: [
      { path: "/email", mode: "mask" as const, keep_last: 11 },
    ],
  };
  const s = await session("caller-redact", ALL, { redactions: rules });
  const result = await call(s, "getCustomer", { path: { customerId: "c-7" } });
  const content = result.structuredContent as {
    headers: Record<string, unknown>;
    body: Record<string, unknown>;
    redaction_events: Array<{ path: string; mode: string; source: string }>;
  };
  assert.equal(content.headers["set-cookie"], undefined);
  assert.equal(content.headers["x-powered-by"], undefined);
  assert.equal(content.headers["x-trace"], "t-1");
  assert.deepEqual(content.body, {
    id: "c-7",
    email: "*********example.com",
    api_token: "***************",
    profile: { card_number: "****************", nickname: "JD" },
  });
  assert.deepEqual(content.redaction_events, [
    { path: "set-cookie", mode: "remove", source: "header" },
    { path: "x-powered-by", mode: "remove", source: "header" },
    { path: "/email", mode: "mask", source: "operation" },
    { path: "/api_token", mode: "mask", source: "default" },
    { path: "/profile/card_number", mode: "mask", source: "default" },
  ]);
  const row = (await mcpRows()).filter((r) => r.subject_id === "caller-redact").at(-1);
  assert.ok(!(row?.response.json ?? "").includes("tok_live"));
  assert.ok(!(row?.response.json ?? "").includes("jane.doe"));
});

test("management tools over MCP: scoped by partner, revocation takes effect at once", async () => {
  const victim = await session("caller-managed");
  const other = await h.connect(await h.token("globex-admin", ["partner_admin"], "globex"));
  const refused = (await other.callTool({
    name: "get_policy_record",
    arguments: { partner_id: PARTNER, subject_id: "caller-managed" },
  })) as CallToolResult;
  assert.equal(errorBody(refused).error, "insufficient_role");

  const auditor = await h.connect(await h.token("auditor-2", ["auditor"]));
  const record = (await auditor.callTool({
    name: "get_policy_record",
    arguments: { partner_id: PARTNER, subject_id: "caller-managed" },
  })) as CallToolResult;
  const policy = (record.structuredContent as { policy: Record<string, unknown> }).policy;
  assert.equal(policy.state, "active");
  assert.equal(policy.encrypted_present, true);
  assert.equal(policy.artifact, undefined);
  await assert.rejects(
    auditor.callTool({
      name: "revoke_policy",
      arguments: { partner_id: PARTNER, subject_id: "caller-managed" },
    }),
    (e: { code: number }) => e.code === -32602,
  );
  const bad = (await auditor.callTool({
    name: "get_policy_record",
    arguments: { partner_id: PARTNER },
  })) as CallToolResult;
  assert.equal(errorBody(bad).error, "invalid_request");

  const admin = await h.connect(await h.token("acme-admin", ["partner_admin"], PARTNER));
  const revoked = (await admin.callTool({
    name: "revoke_policy",
    arguments: { partner_id: PARTNER, subject_id: "caller-managed" },
  })) as CallToolResult;
  assert.equal((revoked.structuredContent as { changed: boolean }).changed, true);
  assert.equal(denialOf(await call(victim, "listOrders", {})).reason, "policy_revoked");
  const row = (await mcpRows()).filter((r) => r.tool === "revoke_policy").at(-1);
  assert.equal(row?.actor, "acme-admin");
  assert.equal(row?.error_code, null);
});

test("a client that disconnects mid-call aborts the upstream request", async () => {
  const s = await session("caller-gone");
  const controller = new AbortController();
  const body = JSON.stringify({
    jsonrpc: "2.0",
    id: 1,
    method: "tools/call",
    params: { name: toolName(s, "neverAnswersInTime"), arguments: {} },
  });
  const before = h.upstream.requests.length;
  const pending = fetch(`${h.url}/mcp`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${s.token}`,
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
    },
    body,
    signal: controller.signal,
  });
  const waitFor = async <T>(probe: () => Promise<T | undefined> | T | undefined): Promise<T> => {
    for (let i = 0; i < 500; i++) {
      const value = await probe();
      if (value !== undefined) return value;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    return assert.fail("condition not reached");
  };
  // Wait until the upstream has the request, then go away.
  await waitFor(() => (h.upstream.requests.length > before ? true : undefined));
  controller.abort();
  await assert.rejects(pending);
  const row = await waitFor(async () => (await mcpRows()).find((r) => r.subject_id === "caller-gone"));
  assert.equal(row.error_code, "cancelled");
});

test("an API tool's call is answered as JSON to a client that accepts a stream, its policy read once", async () => {
  const s = await session("one-read");
  const store = h.store as { get: typeof h.store.get };
  const original = store.get;
  let policyReads = 0;
  store.get = function (this: unknown, collection: string, id: string) {
    if (collection === "policies") policyReads++;
    return original.call(h.store, collection, id);
  } as typeof h.store.get;
  let response: Response;
  try {
    response = await fetch(`${h.url}/mcp`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${s.token}`,
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        "mcp-protocol-version": "2025-06-18",
      },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 7,
        method: "tools/call",
        params: { name: toolName(s, "getOrder"), arguments: { path: { orderId: "o-9" } } },
      }),
    });
  } finally {
    store.get = original;
  }
  assert.equal(response.status, 200);
  assert.match(response.headers.get("content-type") ?? "", /^application\/json/);
  const answer = (await response.json()) as { id?: number; result?: CallToolResult };
  assert.equal(answer.id, 7);
  assert.equal(answer.result?.isError, undefined);
  // The check that chose the JSON answer and the call itself share one read of the policy.
  assert.equal(policyReads, 1);
});
