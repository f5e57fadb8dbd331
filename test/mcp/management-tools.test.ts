import assert from "node:assert/strict";
import { test } from "node:test";
import type { Principal } from "../../src/identity/principal.ts";
import { createManagementToolSet } from "../../src/mcp/management-tools.ts";

const principal = (roles: string[], partnerId?: string): Principal => ({
  subject: "someone",
  roles,
  scopes: [],
  partnerId,
  vouchable: true,
  clientId: undefined,
});

const names = (roles: string[]) =>
  createManagementToolSet()
    .toolsFor(principal(roles, "acme"))
    .map((tool) => tool.tool.name);

test("management tools by role: admins and partner admins manage, auditors read, others get none", () => {
  const all = names(["admin"]);
  assert.ok(all.includes("revoke_policy"));
  assert.ok(
    all.includes("list_partners") && all.includes("get_policy_record") && all.includes("list_capabilities"),
  );
  assert.deepEqual(names(["partner_admin"]), all);
  const auditor = names(["auditor"]);
  assert.deepEqual(
    auditor,
    all.filter((name) => name !== "revoke_policy"),
  );
  assert.deepEqual(names(["agent"]), []);
  assert.deepEqual(names([]), []);
});

test("every management tool is annotated and has an object input schema", () => {
  for (const { tool } of createManagementToolSet().toolsFor(principal(["admin"]))) {
    assert.equal(tool.inputSchema.type, "object");
    assert.equal(tool.annotations?.openWorldHint, false);
    assert.equal(tool.annotations?.readOnlyHint, tool.name !== "revoke_policy");
  }
});

test("a tool the role does not allow is not found at all", () => {
  const set = createManagementToolSet();
  assert.equal(set.find(principal(["auditor"]), "revoke_policy"), undefined);
  assert.equal(set.find(principal(["agent"]), "list_partners"), undefined);
  assert.equal(set.find(principal(["admin"]), "no_such_tool"), undefined);
  assert.equal(set.find(principal(["admin"]), "revoke_policy")?.tool.name, "revoke_policy");
});
