import assert from "node:assert/strict";
import { once } from "node:events";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { importLimits } from "../../src/catalog/limits.ts";
import {
  importOperations,
  OpenApiImportError,
  parseOpenApiDocument,
} from "../../src/catalog/openapi-import.ts";
import { buildLargeOpenApi } from "../fixtures/openapi/large-api.ts";

const options = { capabilityId: "cap", authProfileRef: "profile" } as const;

async function problemsOf(input: string | object) {
  try {
    importOperations(await parseOpenApiDocument(input), options);
  } catch (error) {
    assert.ok(error instanceof OpenApiImportError, String(error));
    return error.problems;
  }
  assert.fail("the import should have failed");
}

const okResponses = { "200": { description: "ok" } };

function docWith(
  paths: Record<string, unknown>,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    openapi: "3.1.0",
    info: { title: "t", version: "1" },
    servers: [{ url: "https://api.example.com" }],
    paths,
    ...extra,
  };
}

describe("OpenAPI import never reads files or fetches URLs", () => {
  let server: ReturnType<typeof createServer>;
  let requests = 0;
  let dir: string;

  before(async () => {
    server = createServer((_req, res) => {
      requests++;
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ type: "object", properties: { leaked: { type: "string" } } }));
    });
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    dir = mkdtempSync(join(tmpdir(), "openapi-import-"));
    writeFileSync(join(dir, "schema.json"), JSON.stringify({ type: "object" }));
  });

  after(async () => {
    server.close();
    await once(server, "close");
    rmSync(dir, { recursive: true, force: true });
  });

  it("refuses an http $ref to a live server without calling it", async () => {
    const { port } = server.address() as AddressInfo;
    const url = `http://127.0.0.1:${port}/schema.json`;
    const schemaRef = { $ref: url };
    const doc = docWith({
      "/a": {
        get: {
          responses: { "200": { description: "ok", content: { "application/json": { schema: schemaRef } } } },
        },
      },
    });
    assert.deepEqual(await problemsOf(doc), [
      {
        pointer: "/paths/~1a/get/responses/200/content/application~1json/schema/$ref",
        message: `external $ref ${JSON.stringify(url)} is not allowed: references must stay inside the document (#/...)`,
      },
    ]);
    assert.equal(requests, 0);
  });

  it("refuses a file $ref to a file that exists, and never names the file system in a message", async () => {
    const fileRef = join(dir, "schema.json");
    const doc = docWith({
      "/a": {
        get: {
          responses: {
            "200": { description: "ok", content: { "application/json": { schema: { $ref: fileRef } } } },
          },
        },
      },
    });
    const problems = await problemsOf(doc);
    assert.equal(problems.length, 1);
    assert.match(problems[0]?.message ?? "", /^external \$ref .* is not allowed/);
  });

  it("does not resolve references against a schema's $id", async () => {
    const { port } = server.address() as AddressInfo;
    const schema = {
      $id: `http://127.0.0.1:${port}/schemas/thing.json`,
      type: "object",
      properties: { self: { $ref: "#/components/schemas/Thing" } },
    };
    const doc = docWith(
      {
        "/a": {
          get: {
            responses: {
              "200": {
                description: "ok",
                content: { "application/json": { schema: { $ref: "#/components/schemas/Thing" } } },
              },
            },
          },
        },
      },
      { components: { schemas: { Thing: schema } } },
    );
    const result = importOperations(await parseOpenApiDocument(doc), options);
    assert.equal(requests, 0);
    const response = result.operations[0]?.response_schema as Record<string, unknown>;
    assert.equal(response.$id, undefined);
    assert.deepEqual(Object.keys(response.$defs as object), ["Thing"]);
  });

  it("treats a string input as document text, never as a path or URL", async () => {
    const { port } = server.address() as AddressInfo;
    for (const text of [join(dir, "schema.json"), `http://127.0.0.1:${port}/openapi.json`]) {
      const problems = await problemsOf(text);
      assert.deepEqual(problems, [
        { pointer: "", message: "the document must be an object at the top level" },
      ]);
    }
    assert.equal(requests, 0);
  });
});

describe("OpenAPI import limits", () => {
  it("refuses a document larger than the size limit before parsing it", async () => {
    const text = `openapi: 3.1.0\nx-pad: "${"a".repeat(importLimits.maxDocumentChars)}"\n`;
    assert.deepEqual(await problemsOf(text), [
      { pointer: "", message: `the document is larger than ${importLimits.maxDocumentChars} characters` },
    ]);
  });

  it("refuses nesting deeper than the depth limit, as text and as an object", async () => {
    let deep: unknown = {};
    for (let i = 0; i < importLimits.maxDepth + 5; i++) deep = { a: deep };
    const doc = docWith({ "/a": { get: { responses: okResponses } } }, { "x-deep": deep });
    const expected = [
      { pointer: "", message: `the document is nested more than ${importLimits.maxDepth} levels deep` },
    ];
    assert.deepEqual(await problemsOf(doc), expected);
    assert.deepEqual(await problemsOf(JSON.stringify(doc)), expected);
  });

  it("refuses objects that are not plain JSON data and roots that are not objects", async () => {
    const cyclic: Record<string, unknown> = { openapi: "3.1.0" };
    cyclic.self = cyclic;
    assert.deepEqual(await problemsOf(cyclic), [
      { pointer: "", message: "the document is not plain JSON data" },
    ]);
    assert.deepEqual(await problemsOf("[1, 2]"), [
      { pointer: "", message: "the document must be an object at the top level" },
    ]);
    assert.deepEqual(await problemsOf(42 as unknown as object), [
      { pointer: "", message: "the document must be a JSON or YAML text or an object" },
    ]);
    const problems = await problemsOf('{"openapi": "3.1.0",');
    assert.equal(problems.length, 1);
    assert.match(problems[0]?.message ?? "", /^the document is not valid JSON: /);
  });

  it("refuses more operations than the operation limit", async () => {
    const resources = Math.ceil(importLimits.maxOperations / 5) + 1;
    assert.deepEqual(await problemsOf(buildLargeOpenApi({ resources })), [
      { pointer: "/paths", message: `more than ${importLimits.maxOperations} operations in one document` },
    ]);
  });

  it("refuses schemas that explode when their $refs are inlined", async () => {
    // Ten properties per level, each the next level: 10^6 nodes once inlined.
    const schemas: Record<string, unknown> = { L6: { type: "string" } };
    for (let level = 5; level >= 0; level--) {
      const properties: Record<string, unknown> = {};
      for (let p = 0; p < 10; p++) properties[`p${p}`] = { $ref: `#/components/schemas/L${level + 1}` };
      schemas[`L${level}`] = { type: "object", properties };
    }
    const doc = docWith(
      {
        "/small": { get: { responses: okResponses } },
        "/big": {
          get: {
            responses: {
              "200": {
                description: "ok",
                content: { "application/json": { schema: { $ref: "#/components/schemas/L0" } } },
              },
            },
          },
        },
      },
      { components: { schemas } },
    );
    assert.deepEqual(await problemsOf(doc), [
      {
        pointer: "/paths/~1big/get",
        message: `the operation grows past ${importLimits.maxExpandedNodesPerOperation} nodes once its $refs are inlined`,
      },
    ]);
  });

  it("refuses a document whose components expand past the document limit", async () => {
    // Each operation stays small, but the unused component tree is 10^7 nodes.
    const schemas: Record<string, unknown> = { L7: { type: "string" } };
    for (let level = 6; level >= 0; level--) {
      const properties: Record<string, unknown> = {};
      for (let p = 0; p < 10; p++) properties[`p${p}`] = { $ref: `#/components/schemas/L${level + 1}` };
      schemas[`L${level}`] = { type: "object", properties };
    }
    const doc = docWith({ "/small": { get: { responses: okResponses } } }, { components: { schemas } });
    assert.deepEqual(await problemsOf(doc), [
      {
        pointer: "",
        message: `the document grows past ${importLimits.maxExpandedNodes} nodes once its $refs are inlined`,
      },
    ]);
  });

  it("refuses an operation whose converted schemas exceed the schema budget", async () => {
    // 3^9 leaves, ~30k schema nodes: under the expansion limit, over the per-operation schema budget.
    const schemas: Record<string, unknown> = { L9: { type: "string" } };
    for (let level = 8; level >= 0; level--) {
      const properties: Record<string, unknown> = {};
      for (let p = 0; p < 3; p++) properties[`p${p}`] = { $ref: `#/components/schemas/L${level + 1}` };
      schemas[`L${level}`] = { type: "object", properties };
    }
    const json = { "application/json": { schema: { $ref: "#/components/schemas/L0" } } };
    const doc = docWith(
      { "/big": { post: { responses: { "200": { description: "ok", content: json } } } } },
      { components: { schemas } },
    );
    assert.deepEqual(await problemsOf(doc), [
      {
        pointer: "/paths/~1big/post",
        message: "the schemas of this operation are too large once their $refs are inlined",
      },
    ]);
  });

  it("lists at most the problem limit and counts the rest", async () => {
    const paths: Record<string, unknown> = {};
    for (let i = 0; i < importLimits.maxProblems + 20; i++) {
      paths[`/p${i}/{id}`] = { get: { responses: okResponses } };
    }
    const problems = await problemsOf(docWith(paths));
    assert.equal(problems.length, importLimits.maxProblems + 1);
    assert.deepEqual(problems.at(-1), { pointer: "", message: "... and 20 more problem(s)" });
  });

  it("keeps a key named __proto__ as data, without touching prototypes", async () => {
    const text = JSON.stringify(
      docWith({
        "/a": {
          get: {
            parameters: [{ name: "__proto__", in: "query", schema: { type: "string" } }],
            responses: {
              "200": {
                description: "ok",
                content: {
                  "application/json": {
                    schema: {
                      type: "object",
                      properties: { ["__proto__"]: { type: "integer" }, constructor: { type: "string" } },
                    },
                  },
                },
              },
            },
          },
        },
      }),
    );
    const result = importOperations(await parseOpenApiDocument(text), options);
    const query = result.operations[0]?.input_schema.query as { properties: Record<string, unknown> };
    assert.ok(Object.hasOwn(query.properties, "__proto__"));
    assert.deepEqual(Object.getPrototypeOf(query.properties), Object.prototype);
    const response = result.operations[0]?.response_schema as { properties: Record<string, unknown> };
    assert.deepEqual(Object.keys(response.properties), ["__proto__", "constructor"]);
    assert.equal(({} as Record<string, unknown>).type, undefined);
  });
});
