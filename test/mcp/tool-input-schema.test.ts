import assert from "node:assert/strict";
import { test } from "node:test";
import { Ajv2020 } from "ajv/dist/2020.js";
import type { OperationInputSchema } from "../../src/core/operation-snapshot.ts";
import { toolInputSchema } from "../../src/mcp/tool-input-schema.ts";

const none = { type: "object", properties: {}, additionalProperties: false };

function compile(schema: object) {
  return new Ajv2020({ strict: false }).compile(schema);
}

test("parts become properties; a part is required when its schema requires something", () => {
  const input: OperationInputSchema = {
    path: {
      type: "object",
      properties: { id: { type: "string" } },
      required: ["id"],
      additionalProperties: false,
    },
    query: { type: "object", properties: { limit: { type: "integer" } }, additionalProperties: false },
    headers: none,
    body: { type: "object", properties: { name: { type: "string" } } },
  };
  const schema = toolInputSchema(input);
  assert.equal(schema.type, "object");
  assert.equal(schema.additionalProperties, false);
  assert.deepEqual(Object.keys(schema.properties), ["path", "query", "body"]);
  assert.deepEqual(schema.required, ["path"]);
  assert.equal(schema.$defs, undefined);
  const validate = compile(schema);
  assert.equal(validate({ path: { id: "a" }, query: { limit: 2 }, body: { name: "x" } }), true);
  assert.equal(validate({ query: { limit: 2 } }), false, "path is required");
  assert.equal(validate({ path: { id: "a" }, headers: {} }), false, "a part the operation does not take");
});

test("an operation without inputs takes an empty object; a null body is left out", () => {
  const schema = toolInputSchema({ path: none, query: none, headers: none, body: null });
  assert.deepEqual(schema, { type: "object", properties: {}, additionalProperties: false });
  assert.equal(compile(schema)({}), true);
});

test("each part's $defs move to the root under '<part>.<name>' and their references follow", () => {
  const node = {
    type: "object",
    properties: { child: { $ref: "#/$defs/Node" }, tag: { enum: [{ $ref: "#/$defs/Node" }] } },
    additionalProperties: false,
  };
  const input: OperationInputSchema = {
    path: none,
    query: none,
    headers: none,
    body: { $ref: "#/$defs/Node", $defs: { Node: node } },
  };
  const before = JSON.stringify(input);
  const schema = toolInputSchema(input);
  assert.equal(JSON.stringify(input), before, "the snapshot is not mutated");
  const body = schema.properties.body as Record<string, unknown>;
  assert.equal(body.$ref, "#/$defs/body.Node");
  assert.equal(body.$defs, undefined);
  const moved = schema.$defs?.["body.Node"] as { properties: { child: unknown; tag: { enum: unknown[] } } };
  assert.deepEqual(moved.properties.child, { $ref: "#/$defs/body.Node" });
  assert.deepEqual(moved.properties.tag.enum, [{ $ref: "#/$defs/Node" }], "data keywords are not rewritten");
  const validate = compile(schema);
  assert.equal(validate({ body: { child: { child: {} } } }), true);
  assert.equal(validate({ body: { child: { other: 1 } } }), false, "the recursive definition still applies");
});

test("refs to the part's own root are re-rooted under the part", () => {
  const schema = toolInputSchema({
    path: none,
    query: none,
    headers: none,
    body: {
      type: "object",
      properties: { self: { $ref: "#" }, name: { $ref: "#/properties/label" }, label: { type: "string" } },
    },
  });
  const body = schema.properties.body as { properties: Record<string, { $ref?: string }> };
  assert.equal(body.properties.self?.$ref, "#/properties/body");
  assert.equal(body.properties.name?.$ref, "#/properties/body/properties/label");
  const validate = compile(schema);
  assert.equal(validate({ body: { self: { name: "x" } } }), true);
  assert.equal(validate({ body: { name: 5 } }), false);
});
