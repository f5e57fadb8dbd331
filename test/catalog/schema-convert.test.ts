import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { createSnapshotAjv, SUPPORTED_FORMATS } from "../../src/catalog/schema-ajv.ts";
import {
  type ConvertContext,
  NodeBudget,
  SchemaBudgetError,
  SchemaBuilder,
  SchemaDepthError,
} from "../../src/catalog/schema-convert.ts";

function convert(schema: unknown, options: Partial<ConvertContext> = {}) {
  const warnings: string[] = [];
  const refused: { pointer: string; message: string }[] = [];
  const builder = new SchemaBuilder({
    version: "3.1",
    document: {},
    budget: new NodeBudget(10_000),
    warn: (m) => warnings.push(m),
    refuse: (pointer, message) => refused.push({ pointer, message }),
    ...options,
  });
  const out = builder.finish(builder.convertRoot(schema, "/schema"));
  createSnapshotAjv().compile(out);
  return { out, warnings, refused };
}

describe("schema conversion to JSON Schema 2020-12", () => {
  it("turns booleans at the root into object schemas and keeps nested booleans", () => {
    assert.deepEqual(convert(true).out, {});
    assert.deepEqual(convert(false).out, { not: {} });
    assert.deepEqual(convert({ type: "object", additionalProperties: false }).out, {
      type: "object",
      additionalProperties: false,
    });
  });

  it("drops OpenAPI-only annotations and extensions silently", () => {
    const { out, warnings } = convert({
      type: "object",
      example: { a: 1 },
      xml: { name: "x" },
      externalDocs: { url: "https://example.com" },
      discriminator: { propertyName: "kind" },
      $schema: "https://json-schema.org/draft/2020-12/schema",
      $id: "https://example.com/x",
      "x-internal": true,
      properties: { "x-header-like": { type: "string" } },
    });
    assert.deepEqual(out, { type: "object", properties: { "x-header-like": { type: "string" } } });
    assert.deepEqual(warnings, []);
  });

  it("drops unknown keywords and unknown formats with a warning", () => {
    const { out, warnings, refused } = convert({
      type: "string",
      format: "phone",
      collectionFormat: "csv",
      patternProperties: { "^a": { type: "string" } },
    });
    assert.deepEqual(out, { type: "string", patternProperties: { "^a": { type: "string" } } });
    assert.deepEqual(warnings, [
      'format "phone" is not supported and was dropped',
      'schema keyword "collectionFormat" is not supported and was dropped',
    ]);
    assert.deepEqual(refused, []);
  });

  it("refuses, at their locations, the patterns linear-time matching cannot run", () => {
    const { refused } = convert({
      type: "object",
      properties: {
        name: { type: "string", pattern: "^(\\w)\\1$" },
        tags: { type: "array", items: { type: "string", pattern: "^(?!admin)" } },
        code: {
          anyOf: [
            { type: "string", pattern: "(?i)abc" },
            { type: "string", pattern: 7 },
          ],
        },
      },
      patternProperties: { "[": {}, "^(?<=x)": {}, "^ok_": { type: "string", pattern: "^(a+)+$" } },
    });
    const messages = refused.map((r) => `${r.pointer} ${r.message}`);
    assert.deepEqual(messages, [
      '/schema/properties/name/pattern pattern "^(\\\\w)\\\\1$" is refused: backreferences (\\1) are not supported: they cannot be matched in linear time',
      '/schema/properties/tags/items/pattern pattern "^(?!admin)" is refused: lookahead ((?= or (?!) is not supported: it cannot be matched in linear time',
      '/schema/properties/code/anyOf/0/pattern pattern "(?i)abc" is refused: it is not a valid ECMAScript regular expression',
      "/schema/properties/code/anyOf/1/pattern a pattern must be a string",
      '/schema/patternProperties/[ pattern "[" is refused: it is not a valid ECMAScript regular expression',
      '/schema/patternProperties/^(?<=x) pattern "^(?<=x)" is refused: lookbehind ((?<= or (?<!) is not supported: it cannot be matched in linear time',
    ]);
  });

  it("names a pattern inside a referenced schema by the reference's target", () => {
    const document = {
      components: {
        schemas: {
          Node: {
            type: "object",
            properties: { id: { pattern: "(a)\\1" }, next: { $ref: "#/components/schemas/Node" } },
          },
        },
      },
    };
    const { refused } = convert({ $ref: "#/components/schemas/Node" }, { document });
    assert.deepEqual(
      refused.map((r) => r.pointer),
      ["/components/schemas/Node/properties/id/pattern"],
    );
  });

  it("rewrites draft-7 leftovers: tuple items, dependencies, definitions", () => {
    const { out } = convert({
      type: "array",
      items: [{ type: "string" }, { type: "integer" }],
      additionalItems: false,
      dependencies: { a: ["b"], c: { required: ["d"] } },
      definitions: { x: { type: "string" } },
    });
    assert.deepEqual(out, {
      type: "array",
      prefixItems: [{ type: "string" }, { type: "integer" }],
      items: false,
      dependentRequired: { a: ["b"] },
      dependentSchemas: { c: { required: ["d"] } },
      $defs: { x: { type: "string" } },
    });
  });

  it("removes keywords strict ajv would call ignored", () => {
    // Built from JSON: an object literal with a `then` key would be a thenable.
    assert.deepEqual(convert(JSON.parse('{"then": {"type": "string"}, "else": {"type": "number"}}')).out, {});
    assert.deepEqual(convert({ if: { type: "string" } }).out, {});
    assert.deepEqual(convert({ minContains: 1, maxContains: 2 }).out, {});
    assert.deepEqual(convert({ contains: { type: "string" }, minContains: 0 }).out, {});
    assert.deepEqual(convert({ type: "array", additionalItems: false, items: { type: "string" } }).out, {
      type: "array",
      items: { type: "string" },
    });
  });

  it("applies 3.0 nullable to types, enums and composed schemas", () => {
    const v30 = { version: "3.0" } as const;
    assert.deepEqual(convert({ type: "integer", nullable: true }, v30).out, { type: ["integer", "null"] });
    assert.deepEqual(convert({ type: "string", enum: ["a"], nullable: true }, v30).out, {
      type: ["string", "null"],
      enum: ["a", null],
    });
    assert.deepEqual(convert({ oneOf: [{ type: "string" }], nullable: true }, v30).out, {
      anyOf: [{ oneOf: [{ type: "string" }] }, { type: "null" }],
    });
    assert.deepEqual(convert({ description: "no type", nullable: true }, v30).out, {
      description: "no type",
    });
    assert.deepEqual(convert({ type: "string", nullable: false }, v30).out, { type: "string" });
    assert.deepEqual(convert({ type: ["string", "null"], nullable: true }).out, { type: ["string", "null"] });
  });

  it("turns boolean exclusive bounds into numeric ones", () => {
    assert.deepEqual(
      convert({ type: "number", minimum: 1, exclusiveMinimum: true, maximum: 9, exclusiveMaximum: false })
        .out,
      {
        type: "number",
        minimum: 1,
        exclusiveMinimum: 1,
        maximum: 9,
      },
    );
    assert.deepEqual(convert({ type: "number", exclusiveMaximum: 5 }).out, {
      type: "number",
      exclusiveMaximum: 5,
    });
  });

  it("turns references left by the parser into local $defs, siblings per version", () => {
    const document = {
      components: {
        schemas: {
          "Node Type": { type: "object", properties: { next: { $ref: "#/components/schemas/Node%20Type" } } },
        },
      },
    };
    const ref = { $ref: "#/components/schemas/Node%20Type", description: "head" };
    assert.deepEqual(convert(ref, { document }).out, {
      description: "head",
      $ref: "#/$defs/Node_20Type",
      $defs: { Node_20Type: { type: "object", properties: { next: { $ref: "#/$defs/Node_20Type" } } } },
    });
    assert.deepEqual(convert(ref, { document, version: "3.0" }).out, {
      $ref: "#/$defs/Node_20Type",
      $defs: { Node_20Type: { type: "object", properties: { next: { $ref: "#/$defs/Node_20Type" } } } },
    });
  });

  it("applies readOnly and writeOnly to required by direction", () => {
    const schema = {
      type: "object",
      required: ["id", "password", "name"],
      properties: {
        id: { type: "string", readOnly: true },
        password: { type: "string", writeOnly: true },
        name: { type: "string" },
      },
    };
    const build = (direction: "request" | "response" | "any") => {
      const builder = new SchemaBuilder(
        { version: "3.1", document: {}, budget: new NodeBudget(1000), warn: () => {}, refuse: () => {} },
        direction,
      );
      return builder.convertRoot(schema, "").required;
    };
    assert.deepEqual(build("request"), ["password", "name"]);
    assert.deepEqual(build("response"), ["id", "name"]);
    assert.deepEqual(build("any"), ["id", "password", "name"]);
  });

  it("copies data keywords instead of sharing them", () => {
    const source = { type: "object", default: { a: [1] }, enum: [{ a: [1] }] };
    const { out } = convert(source);
    assert.deepEqual(out, source);
    assert.notEqual(out.default, source.default);
  });

  it("stops at its node budget and its depth limit", () => {
    const wide = {
      type: "object",
      properties: Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`p${i}`, {}])),
    };
    assert.throws(() => convert(wide, { budget: new NodeBudget(10) }), SchemaBudgetError);
    const total = new NodeBudget(30);
    assert.throws(() => {
      convert(wide, { budget: new NodeBudget(100, total) });
    }, SchemaBudgetError);
    let deep: Record<string, unknown> = { type: "string" };
    for (let i = 0; i < 300; i++) deep = { items: deep };
    assert.throws(() => convert(deep, { budget: new NodeBudget(100_000) }), SchemaDepthError);
  });

  it("every supported format compiles under the snapshot ajv", () => {
    const ajv = createSnapshotAjv();
    for (const format of SUPPORTED_FORMATS) {
      assert.doesNotThrow(() => ajv.compile({ type: "string", format }), format);
    }
    assert.throws(() => ajv.compile({ type: "string", format: "phone" }), /unknown format/);
    assert.throws(() => ajv.compile({ example: 1 }), /unknown keyword/);
  });
});
