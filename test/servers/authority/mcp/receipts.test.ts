/**
 * Receipts on MCP `tools/call` (decision 2771): a governed call's result carries its decision
 * record's receipt in `_meta["x-authority-receipt"]`, allowed or refused, and the receipt finds
 * that record through GET /admin/audit/receipts/{receipt}, in the partner's scope only.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { type Harness, PARTNER, permission, startHarness } from "./harness.ts";

let h: Harness;
let client: Client;
let tools: Map<string, string>;
before(async () => {
  h = await startHarness();
  await h.grant("receipt-caller", [permission("get", "/orders/{orderId}"), permission("post", "/orders")]);
  client = await h.connect(await h.token("receipt-caller"));
  const listed = await client.listTools();
  tools = new Map(listed.tools.map((tool) => [tool.name.replace(/_[0-9a-f]{8}$/, ""), tool.name]));
});
after(() => h.close());

async function call(operationId: string, args: Record<string, unknown>): Promise<CallToolResult> {
  const name = tools.get(operationId);
  assert.ok(name !== undefined, `no tool for ${operationId}`);
  return (await client.callTool({ name, arguments: args })) as CallToolResult;
}

async function recordOf(result: CallToolResult, token: string) {
  const receipt = result._meta?.["x-authority-receipt"];
  assert.equal(typeof receipt, "string", "the result carries a receipt");
  assert.match(String(receipt), /^r2\.a\.\d+\.[A-Za-z0-9_-]{22}$/);
  assert.equal(await h.context.decisions.recorder.flush(5000), true);
  const response = await fetch(`${h.url}/admin/audit/receipts/${encodeURIComponent(String(receipt))}`, {
    headers: { authorization: `Bearer ${token}` },
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

test("an allowed and a refused tools/call each find their decision record, in the partner's scope", async () => {
  const partnerAdmin = await h.token("pa", ["partner_admin"], PARTNER);
  const allowed = await call("getOrder", { path: { orderId: "o-7" } });
  assert.notEqual(allowed.isError, true);
  const found = await recordOf(allowed, partnerAdmin);
  assert.equal(found.status, 200, JSON.stringify(found.body));
  assert.deepEqual(
    [found.body.decision, found.body.transport, found.body.subject_id],
    ["allowed", "mcp", "receipt-caller"],
  );

  // Refused after the decision (its input): the deny's record.
  const refused = await call("createOrder", { body: "not an object" });
  assert.equal(refused.isError, true);
  const deny = await recordOf(refused, partnerAdmin);
  assert.equal(deny.status, 200);
  assert.equal(deny.body.decision, "denied");
  assert.equal(deny.body.reason, "invalid_input");

  const stranger = await h.token("pa-other", ["partner_admin"], "someone-else");
  assert.equal((await recordOf(allowed, stranger)).status, 404);
});
