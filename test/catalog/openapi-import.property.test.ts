import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { stringify } from "yaml";
import { importOperations, parseOpenApiDocument } from "../../src/catalog/openapi-import.ts";
import { assertAllSchemasCompile } from "./helpers.ts";

const METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"] as const;
const LITERALS = ["users", "orders", "items", "v1", "a-b", "x.y", "me", "search"];

/** A path template: literal segments and positional parameters ({p0}, {p1}, ...). */
const pathArb = fc
  .array(fc.oneof(fc.constantFrom(...LITERALS), fc.constant(null)), { minLength: 1, maxLength: 4 })
  .map((segments) => `/${segments.map((s, i) => s ?? `{p${i}}`).join("/")}`);

const operationArb = fc.record({
  query: fc.uniqueArray(fc.constantFrom("q", "limit", "sort", "page"), { maxLength: 3 }),
  header: fc.option(fc.constantFrom("X-Trace", "X-Tenant"), { nil: undefined }),
  body: fc.option(fc.constantFrom("object", "array"), { nil: undefined }),
  bodyRequired: fc.boolean(),
  response: fc.boolean(),
  named: fc.boolean(),
});

const pathItemArb = fc.record({
  methods: fc.uniqueArray(fc.constantFrom(...METHODS), { minLength: 1, maxLength: 4 }),
  operations: fc.array(operationArb, { minLength: 4, maxLength: 4 }),
  paramsAtPathLevel: fc.boolean(),
});

const specArb = fc.record({
  paths: fc.uniqueArray(fc.tuple(pathArb, pathItemArb), { minLength: 1, maxLength: 6, selector: ([p]) => p }),
  version: fc.constantFrom("3.0.3", "3.1.0"),
  encoding: fc.constantFrom("object", "json", "yaml"),
});

type Spec = typeof specArb extends fc.Arbitrary<infer T> ? T : never;

function templateParams(path: string): string[] {
  return [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1] ?? "");
}

function buildDocument(spec: Spec): Record<string, unknown> {
  const paths: Record<string, unknown> = {};
  let counter = 0;
  for (const [path, item] of spec.paths) {
    const pathParams = templateParams(path).map((name) => ({
      name,
      in: "path",
      required: true,
      schema: { type: "string" },
    }));
    const entry: Record<string, unknown> = item.paramsAtPathLevel ? { parameters: pathParams } : {};
    item.methods.forEach((method, index) => {
      const op = item.operations[index] ?? {
        query: [],
        header: undefined,
        body: undefined,
        bodyRequired: false,
        response: false,
        named: false,
      };
      const parameters: unknown[] = item.paramsAtPathLevel ? [] : [...pathParams];
      for (const name of op.query) parameters.push({ name, in: "query", schema: { type: "string" } });
      if (op.header !== undefined)
        parameters.push({ name: op.header, in: "header", schema: { type: "string" } });
      const nullable =
        spec.version === "3.0.3" ? { type: "string", nullable: true } : { type: ["string", "null"] };
      const schema =
        op.body === "array"
          ? { type: "array", items: nullable }
          : { type: "object", properties: { v: nullable } };
      entry[method] = {
        ...(op.named ? { operationId: `op${counter++}` } : {}),
        parameters,
        ...(op.body === undefined
          ? {}
          : { requestBody: { required: op.bodyRequired, content: { "application/json": { schema } } } }),
        responses: {
          [op.response ? "200" : "204"]: {
            description: "ok",
            ...(op.response ? { content: { "application/json": { schema } } } : {}),
          },
        },
      };
    });
    paths[path] = entry;
  }
  return {
    openapi: spec.version,
    info: { title: "generated", version: "1" },
    servers: [{ url: "https://api.example.com" }],
    paths,
  };
}

function encode(doc: Record<string, unknown>, encoding: Spec["encoding"]): string | object {
  if (encoding === "json") return JSON.stringify(doc);
  if (encoding === "yaml") return stringify(doc);
  return doc;
}

describe("OpenAPI import properties", () => {
  it("any small valid document imports to exactly its (method, path) pairs", async () => {
    await fc.assert(
      fc.asyncProperty(specArb, async (spec) => {
        const doc = buildDocument(spec);
        const parsed = await parseOpenApiDocument(encode(doc, spec.encoding));
        const result = importOperations(parsed, { capabilityId: "gen", authProfileRef: "profile" });

        const expected = spec.paths.flatMap(([path, item]) =>
          item.methods.map((m) => `${m.toUpperCase()} ${path}`),
        );
        const actual = result.operations.map((o) => `${o.method} ${o.path}`);
        assert.deepEqual(new Set(actual), new Set(expected));
        assert.equal(actual.length, expected.length);
        assert.deepEqual(
          result.operation_info.map((i) => i.permission_id),
          result.operations.map((o) => `gen:${o.method.toLowerCase()}:${o.path}`),
        );
        assert.equal(new Set(result.operations.map((o) => o.operation_id)).size, result.operations.length);

        for (const [path, item] of spec.paths) {
          item.methods.forEach((method, index) => {
            const op = result.operations.find((o) => o.path === path && o.method === method.toUpperCase());
            const generated = item.operations[index];
            assert.ok(op !== undefined && generated !== undefined);
            assert.deepEqual(op.input_schema.path.required ?? [], templateParams(path));
            assert.deepEqual(Object.keys(op.input_schema.query.properties as object), generated.query);
            assert.deepEqual(
              Object.keys(op.input_schema.headers.properties as object),
              generated.header === undefined ? [] : [generated.header.toLowerCase()],
            );
            assert.equal(op.input_schema.body === null, generated.body === undefined);
            assert.equal(op.response_schema === null, !generated.response);
            const info = result.operation_info[result.operations.indexOf(op)];
            assert.equal(info?.body_required, generated.body !== undefined && generated.bodyRequired);
            assert.equal(op.upstream_url_template, `https://api.example.com${path}`);
          });
        }
        assertAllSchemasCompile(result.operations);
      }),
      { numRuns: 30 },
    );
  });
});
