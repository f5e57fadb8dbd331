import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { assignCapability } from "../../../../src/admin/policies.ts";
import { createSubject } from "../../../../src/admin/subjects.ts";
import type { DecisionAuditRecord } from "../../../../src/audit/records.ts";
import { USAGE_COUNTERS } from "../../../../src/audit/usage.ts";
import { logs } from "../../../../src/store/model.ts";
import { type Harness, PARTNER, permission, startHarness } from "./harness.ts";

/**
 * MCP tool calls: a refusal after the decision is recorded as a deny with its reason (admin
 * audit and usage), an answered call as one allow; and a subject named after a principal
 * outside its partner gives that principal no tools.
 */
let h: Harness;
before(async () => {
  h = await startHarness();
});
after(() => h.close());

async function decisionsOf(subjectId: string): Promise<DecisionAuditRecord[]> {
  await h.context.decisions.recorder.flush(5000);
  return (await h.store.readLog<DecisionAuditRecord>(logs.audit, { limit: 1000 }))
    .map((entry) => entry.value)
    .filter((record) => record.kind === "decision" && record.subject_id === subjectId);
}

async function usage(subjectId: string, state: "allowed" | "denied"): Promise<number> {
  await h.context.decisions.recorder.flush(5000);
  const counters = await h.store.readCounters(USAGE_COUNTERS, "d|");
  return Object.entries(counters)
    .filter(([key]) => key.split("|")[3] === subjectId && key.endsWith(`|${state}`))
    .reduce((sum, [, n]) => sum + n, 0);
}

async function toolsOf(token: string) {
  const client = await h.connect(token);
  const { tools } = await client.listTools();
  return { client, names: new Map(tools.map((t) => [t.name.replace(/_[0-9a-f]{8}$/, ""), t.name])) };
}

test("refusals after the decision are recorded as denied with their reason; an answered call as allowed", async () => {
  await h.grant("records-caller", [
    permission("get", "/orders/{orderId}"),
    permission("get", "/slow"),
    permission("get", "/reports"),
    permission("get", "/orders"),
  ]);
  const { client, names } = await toolsOf(await h.token("records-caller"));
  const call = async (operationId: string, args: Record<string, unknown>) =>
    (await client.callTool({ name: names.get(operationId) ?? "?", arguments: args })) as CallToolResult;

  const invalid = await call("listOrders", { query: { limit: 1000 } });
  assert.equal(invalid.isError, true);
  // A refusal another check adds (a path value outside its pattern) is recorded the same way.
  const ambiguous = await call("getOrder", { path: { orderId: "not-an-order" } });
  assert.equal(ambiguous.isError, true);
  const slow = await call("neverAnswersInTime", {});
  assert.equal(slow.isError, true);
  const constrained = await call("getReport", { query: { region: "apac" } });
  assert.equal(constrained.isError, true);
  const answered = await call("getOrder", { path: { orderId: "o-1" } });
  assert.notEqual(answered.isError, true);

  const records = await decisionsOf("records-caller");
  assert.deepEqual(
    records.map((r) => [r.decision, r.reason, r.permission_id, r.transport]),
    [
      ["denied", "invalid_input", permission("get", "/orders"), "mcp"],
      ["denied", "ambiguous_path", permission("get", "/orders/{orderId}"), "mcp"],
      ["denied", "upstream_timeout", permission("get", "/slow"), "mcp"],
      ["denied", "constraint_violation", permission("get", "/reports"), "mcp"],
      ["allowed", null, permission("get", "/orders/{orderId}"), "mcp"],
    ],
  );
  assert.equal(await usage("records-caller", "denied"), 4);
  assert.equal(await usage("records-caller", "allowed"), 1);
});

test("a partner's subject named after the platform admin gives the platform admin no tools", async () => {
  await createSubject(h.context, PARTNER, {
    subject_id: "root-admin",
    subject_type: "agent",
    display_name: "named after the platform admin",
    identity: "partner_token",
  });
  await assignCapability(h.context, h.actor, PARTNER, "root-admin", "orders", {
    allowed_permission_ids: [permission("get", "/orders")],
    ttl_seconds: 3600,
  });
  const admin = await toolsOf(await h.token("root-admin", ["admin"]));
  assert.equal(admin.names.has("listOrders"), false, "no API tool for the platform admin");
  const refused = await admin.client.callTool({ name: "listOrders_00000000", arguments: {} }).then(
    () => "answered",
    () => "refused",
  );
  assert.equal(refused, "refused");
  // The partner's own principal of that name (its claim names the partner) does get the tool.
  const own = await toolsOf(await h.token("root-admin", ["agent"], PARTNER));
  assert.equal(own.names.has("listOrders"), true);
});
