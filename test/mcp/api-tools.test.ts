import assert from "node:assert/strict";
import { test } from "node:test";
import type { HttpMethod } from "../../src/core/http-method.ts";
import { buildPermissionId } from "../../src/core/permission-id.ts";
import { MAX_TOOL_NAME_LENGTH, toolNameFor } from "../../src/core/tool-name.ts";
import { apiToolOutputSchema, buildApiToolIndex, toolDescription } from "../../src/mcp/api-tools.ts";
import { CAPABILITY_ID, entry, pid, policyV1, snapshot } from "../core/fixtures.ts";

test("one tool per allowed operation; snapshots outside the allowlist are not listed", () => {
  const allowed = [snapshot("GET", "/users/{id}"), snapshot("DELETE", "/users/{id}")];
  const extra = snapshot("POST", "/invoices");
  const doc = policyV1([
    {
      ...entry([
        ["GET", "/users/{id}"],
        ["DELETE", "/users/{id}"],
      ]),
      operations: [...allowed, extra],
    },
  ]);
  const index = buildApiToolIndex(doc);
  assert.equal(index.tools.length, 2);
  const targets = [...index.byName.values()];
  assert.deepEqual(
    targets.map((t) => t.permissionId),
    [pid("GET", "/users/{id}"), pid("DELETE", "/users/{id}")],
  );
  for (const target of targets) {
    assert.equal(target.capabilityId, CAPABILITY_ID);
    assert.equal(target.name, toolNameFor(target.permissionId, `${target.method.toLowerCase()}_users__id_`));
  }
  assert.deepEqual(index.collisions, []);
});

test("annotations follow the method", () => {
  const methods: HttpMethod[] = ["GET", "HEAD", "OPTIONS", "PUT", "DELETE", "POST", "PATCH"];
  const doc = policyV1([entry(methods.map((m) => [m, "/things/{id}"] as [HttpMethod, string]))]);
  const byMethod = new Map(
    buildApiToolIndex(doc).tools.map((tool) => [
      tool.description?.split("\n").at(-1)?.split(" ")[0],
      tool.annotations,
    ]),
  );
  assert.deepEqual(byMethod.get("GET"), { readOnlyHint: true, idempotentHint: true, openWorldHint: true });
  assert.deepEqual(byMethod.get("HEAD"), { readOnlyHint: true, idempotentHint: true, openWorldHint: true });
  assert.deepEqual(byMethod.get("OPTIONS"), {
    readOnlyHint: true,
    idempotentHint: true,
    openWorldHint: true,
  });
  assert.deepEqual(byMethod.get("PUT"), {
    readOnlyHint: false,
    destructiveHint: false,
    idempotentHint: true,
    openWorldHint: true,
  });
  assert.deepEqual(byMethod.get("DELETE"), {
    readOnlyHint: false,
    destructiveHint: true,
    idempotentHint: true,
    openWorldHint: true,
  });
  assert.deepEqual(byMethod.get("POST"), {
    readOnlyHint: false,
    destructiveHint: false,
    idempotentHint: false,
    openWorldHint: true,
  });
  assert.deepEqual(byMethod.get("PATCH"), byMethod.get("POST"));
});

test("description: summary, description, then method and path; title from the summary", () => {
  const op = snapshot("GET", "/users/{id}", { summary: "Get a user", description: "Returns one user." });
  const tool = buildApiToolIndex(policyV1([{ ...entry([["GET", "/users/{id}"]]), operations: [op] }]))
    .tools[0];
  assert.equal(tool?.description, "Get a user\n\nReturns one user.\n\nGET /users/{id}");
  assert.equal(tool?.title, "Get a user");
  assert.equal(tool?.annotations?.title, "Get a user");
  assert.equal(toolDescription(snapshot("POST", "/x")), "POST /x");
  const long = toolDescription(snapshot("POST", "/x", { description: "d".repeat(5000) }));
  assert.ok(long.length < 1100 && long.endsWith("POST /x"));
  assert.deepEqual(tool?.outputSchema, apiToolOutputSchema);
});

test("names stay within 64 characters and unique across 1,000 long, similar paths", () => {
  const paths = Array.from(
    { length: 1000 },
    (_, i) =>
      `/tenants/{tenantId}/organisations/{orgId}/very-long-resource-collection-name/items-${i}/details`,
  );
  const operations = paths.map((path, i) =>
    // Operation ids that differ only at the end, so cut bases are identical.
    snapshot("GET", path, { operation_id: `getTenantOrganisationVeryLongResourceCollectionItemDetails${i}` }),
  );
  const doc = policyV1([
    {
      capability_id: CAPABILITY_ID,
      allowed_permission_ids: paths.map((p) => buildPermissionId(CAPABILITY_ID, "GET", p)),
      auth_profile_ref: "p",
      operations,
      response_redactions: {},
    },
  ]);
  const index = buildApiToolIndex(doc);
  assert.equal(index.tools.length, 1000);
  const names = index.tools.map((tool) => tool.name);
  assert.equal(new Set(names).size, 1000);
  for (const name of names) {
    assert.ok(name.length <= MAX_TOOL_NAME_LENGTH, name);
    assert.match(name, /^[A-Za-z0-9_-]+_[0-9a-f]{8}$/);
  }
  assert.equal(index.byName.size, 1000);
});

test("the same operation in two capabilities gets two names", () => {
  const doc = policyV1([
    entry([["GET", "/users/{id}"]], { capabilityId: "api-a" }),
    entry([["GET", "/users/{id}"]], { capabilityId: "api-b" }),
  ]);
  const index = buildApiToolIndex(doc);
  assert.equal(index.tools.length, 2);
  assert.deepEqual(
    [...index.byName.values()].map((t) => t.capabilityId),
    ["api-a", "api-b"],
  );
});

test("the tools without signed constraints are kept with the index, in list order", () => {
  const constrained = {
    ...snapshot("GET", "/users/{id}"),
    parameter_constraints: [{ in: "path" as const, name: "id", max_length: 4 }],
  };
  const doc = policyV1([
    {
      ...entry([
        ["GET", "/users/{id}"],
        ["DELETE", "/users/{id}"],
        ["POST", "/invoices"],
      ]),
      operations: [snapshot("DELETE", "/users/{id}"), constrained, snapshot("POST", "/invoices")],
    },
  ]);
  const index = buildApiToolIndex(doc);
  assert.equal(index.tools.length, 3);
  assert.deepEqual(
    index.unconstrainedTools.map((tool) => tool.name),
    index.tools.filter((tool) => index.byName.get(tool.name)?.constrained !== true).map((tool) => tool.name),
  );
  assert.equal(index.unconstrainedTools.length, 2);
  assert.ok(index.unconstrainedTools.every((tool) => index.tools.includes(tool)));
});
