import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { revokePolicy } from "../../../../src/admin/policies.ts";
import { MAX_TOOL_NAME_LENGTH } from "../../../../src/core/tool-name.ts";
import { encodeToolCursor, TOOLS_PAGE_SIZE } from "../../../../src/mcp/tool-pages.ts";
import { CAPABILITY, type Harness, PARTNER, permission, startHarness } from "./harness.ts";

const EXTRA = 1000;
let h: Harness;
before(async () => {
  h = await startHarness({ extraOperations: EXTRA });
});
after(() => h.close());

const MANAGEMENT = [
  "list_partners",
  "get_partner",
  "list_subjects",
  "list_capabilities",
  "get_capability",
  "list_auth_profiles",
  "list_policies",
  "get_policy_record",
  "revoke_policy",
];

/** Every page of tools/list, following nextCursor as a client does. */
async function toolNames(token: string): Promise<string[]> {
  const client = await h.connect(token);
  const names: string[] = [];
  let cursor: string | undefined;
  do {
    const page = await client.listTools(cursor === undefined ? {} : { cursor });
    assert.ok(page.tools.length <= TOOLS_PAGE_SIZE);
    names.push(...page.tools.map((tool) => tool.name));
    cursor = page.nextCursor;
  } while (cursor !== undefined);
  return names;
}

test("management tools by role; none for a caller without an admin role", async () => {
  assert.deepEqual(await toolNames(await h.token("root", ["admin"])), MANAGEMENT);
  assert.deepEqual(await toolNames(await h.token("acme-admin", ["partner_admin"], PARTNER)), MANAGEMENT);
  assert.deepEqual(
    await toolNames(await h.token("auditor", ["auditor"])),
    MANAGEMENT.filter((name) => name !== "revoke_policy"),
  );
  assert.deepEqual(await toolNames(await h.token("nobody", ["agent"])), []);
});

test("API tools only for the operations the caller's policy allows", async () => {
  await h.grant("lister", [permission("get", "/orders"), permission("delete", "/orders/{orderId}")]);
  const client = await h.connect(await h.token("lister"));
  const { tools } = await client.listTools();
  assert.equal(tools.length, 2);
  const list = tools.find((tool) => tool.name.startsWith("listOrders_"));
  const del = tools.find((tool) => tool.name.startsWith("deleteOrder_"));
  assert.ok(list !== undefined && del !== undefined);
  assert.equal(list.description, "List orders\n\nGET /orders");
  assert.deepEqual(list.annotations, {
    title: "List orders",
    readOnlyHint: true,
    idempotentHint: true,
    openWorldHint: true,
  });
  assert.deepEqual(list.inputSchema, {
    type: "object",
    properties: {
      query: {
        type: "object",
        properties: { limit: { type: "integer", minimum: 1, maximum: 100 } },
        additionalProperties: false,
      },
    },
    additionalProperties: false,
  });
  assert.deepEqual(del.annotations, {
    title: "Delete an order",
    readOnlyHint: false,
    destructiveHint: true,
    idempotentHint: true,
    openWorldHint: true,
  });
  assert.deepEqual(del.inputSchema.required, ["path"]);
  assert.equal(typeof del.outputSchema, "object");
});

test("an admin with a policy of its own gets both kinds of tools", async () => {
  await h.grant("admin-with-policy", [permission("get", "/orders")]);
  const names = await toolNames(await h.token("admin-with-policy", ["admin"]));
  assert.deepEqual(names.slice(0, MANAGEMENT.length), MANAGEMENT);
  assert.equal(names.length, MANAGEMENT.length + 1);
  assert.match(names.at(-1) ?? "", /^listOrders_[0-9a-f]{8}$/);
});

test("an expired policy lists no API tools", async () => {
  await h.grant("short-lived", [permission("get", "/orders")], { ttlSeconds: 60 });
  const token = await h.token("short-lived");
  assert.equal((await toolNames(token)).length, 1);
  h.clock.offsetMs = 61_000;
  try {
    assert.deepEqual(await toolNames(token), []);
  } finally {
    h.clock.offsetMs = 0;
  }
});

test("a revoked policy lists no API tools; a subject without a policy neither", async () => {
  await h.grant("to-revoke", [permission("get", "/orders")]);
  const token = await h.token("to-revoke");
  assert.equal((await toolNames(token)).length, 1);
  await revokePolicy(h.context, h.actor, PARTNER, "to-revoke");
  assert.deepEqual(await toolNames(token), []);
  assert.deepEqual(await toolNames(await h.token("never-granted")), []);
});

test(`tool names stay within ${MAX_TOOL_NAME_LENGTH} characters and unique across ${EXTRA} long, similar paths`, async () => {
  const permissions = Array.from(
    { length: EXTRA },
    (_, i) =>
      `${CAPABILITY}:get:/tenants/{tenantId}/very-long-resource-collection-name/subresources/items-${i}`,
  );
  await h.grant("many-tools", permissions);
  const names = await toolNames(await h.token("many-tools"));
  assert.equal(names.length, EXTRA);
  assert.equal(new Set(names).size, EXTRA);
  for (const name of names) {
    assert.ok(name.length <= MAX_TOOL_NAME_LENGTH, name);
    assert.match(name, /^[A-Za-z0-9_-]+_[0-9a-f]{8}$/);
  }
});

test("tools/list pages are bounded; a forged or stale cursor is -32602 and names no one else's tool", async () => {
  await h.grant("pager", [permission("get", "/orders")]);
  const own = await h.connect(await h.token("pager"));
  const first = await own.listTools();
  assert.equal(first.nextCursor, undefined, "one page needs no cursor");
  const mine = first.tools[0]?.name ?? "";
  // A cursor after the caller's own last tool is an empty page, not an error.
  assert.deepEqual((await own.listTools({ cursor: encodeToolCursor(mine) })).tools, []);
  // Another subject's tool, a name no one has, and garbage: one and the same answer.
  const many = await toolNames(await h.token("many-tools"));
  for (const cursor of [
    encodeToolCursor(many[500] ?? ""),
    encodeToolCursor("no_such_tool"),
    "%%%",
    "x".repeat(600),
  ]) {
    await assert.rejects(own.listTools({ cursor }), (error: Error & { code?: number }) => {
      assert.equal(error.code, -32602);
      assert.match(error.message, /Invalid cursor/);
      return true;
    });
  }
});
