import assert from "node:assert/strict";
import { test } from "node:test";
import { importMcpTools, McpImportError } from "../../src/catalog/mcp-import.ts";
import { buildPermissionId } from "../../src/core/permission-id.ts";

const options = {
  capabilityId: "helpdesk",
  authProfileRef: "key",
  downstreamUrl: "https://mcp.example.com/mcp",
};
const tool = (name: string, extra: Record<string, unknown> = {}) => ({
  name,
  description: "Does it.",
  inputSchema: { type: "object", properties: { q: { type: "string" } } },
  ...extra,
});

function problemsOf(run: () => unknown): { pointer: string; message: string }[] {
  try {
    run();
  } catch (error) {
    assert.ok(error instanceof McpImportError);
    return [...error.problems];
  }
  assert.fail("expected McpImportError");
}

test("a tool becomes a POST /tools/<name> snapshot with its schemas, the endpoint and the admin's rules", () => {
  const { operations } = importMcpTools(
    [
      tool("search", {
        title: "Search",
        outputSchema: { type: "object" },
        annotations: { readOnlyHint: true, evil: "x" },
      }),
    ],
    {
      ...options,
      toolRules: { search: { "x-authority-constraints": [{ in: "body", name: "/q", max_length: 5 }] } },
    },
  );
  const [op] = operations;
  assert.equal(op?.method, "POST");
  assert.equal(op?.path, "/tools/search");
  assert.equal(buildPermissionId("helpdesk", op.method, op.path), "helpdesk:post:/tools/search");
  assert.equal(op?.upstream_url_template, options.downstreamUrl);
  assert.deepEqual(op?.mcp_tool, { name: "search", annotations: { readOnlyHint: true } });
  assert.equal(op?.summary, "Search");
  assert.deepEqual(op?.response_schema, { type: "object" });
  assert.equal(op?.parameter_constraints.length, 1);
  assert.ok(Object.isFrozen(op));
});

test("what cannot be governed is refused, every problem at its pointer", () => {
  const problems = problemsOf(() =>
    importMcpTools(
      [
        tool("../etc"),
        tool(".."),
        tool("ok"),
        tool("ok"),
        tool("bad_schema", { inputSchema: { type: "string" } }),
        tool("draft7", {
          inputSchema: { $schema: "http://json-schema.org/draft-07/schema#", type: "object" },
        }),
        tool("backtracking", {
          inputSchema: { type: "object", properties: { a: { type: "string", pattern: "^(a)\\1$" } } },
        }),
      ],
      { ...options, toolRules: { ghost: {} } },
    ),
  );
  const pointers = problems.map((p) => p.pointer);
  assert.ok(pointers.includes("/tools/0/name"));
  assert.ok(pointers.includes("/tools/1/name"));
  assert.ok(pointers.includes("/tools/3/name"), "a repeated name");
  assert.ok(pointers.includes("/tools/4/inputSchema"));
  assert.ok(pointers.includes("/tools/5/inputSchema/$schema"));
  assert.ok(
    pointers.some((p) => p.startsWith("/tools/6/inputSchema")),
    JSON.stringify(problems),
  );
  assert.ok(pointers.includes("/tool_rules/ghost"));
});

test("a root $schema of 2020-12 and local $defs are kept", () => {
  const schema = {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    type: "object",
    $defs: { address: { type: "object", properties: { city: { type: "string" } } } },
    properties: { address: { $ref: "#/$defs/address" } },
    additionalProperties: false,
  };
  const [op] = importMcpTools([tool("t", { inputSchema: schema })], options).operations;
  const body = op?.input_schema.body as Record<string, unknown>;
  assert.equal(body.$schema, schema.$schema);
  assert.ok(typeof body.$defs === "object" && body.$defs !== null && "address" in body.$defs);
  assert.equal(body.additionalProperties, false);
});
