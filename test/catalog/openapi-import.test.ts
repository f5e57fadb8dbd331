import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { stringify } from "yaml";
import {
  ImportOptionsError,
  importOperations,
  OpenApiImportError,
  parseOpenApiDocument,
} from "../../src/catalog/openapi-import.ts";
import { createSnapshotAjv } from "../../src/catalog/schema-ajv.ts";
import { validateCapability } from "../../src/core/capability.ts";
import { validateOperationSnapshot } from "../../src/core/operation-snapshot.ts";
import { toAuthorityError } from "../../src/errors.ts";
import { buildLargeOpenApi, expectedLargeOperations } from "../fixtures/openapi/large-api.ts";
import { assertAllSchemasCompile, readExample, readFixture } from "./helpers.ts";

const options = { capabilityId: "customers", authProfileRef: "customers-static" } as const;

async function importText(
  text: string | object,
  extra: Partial<Parameters<typeof importOperations>[1]> = {},
) {
  return importOperations(await parseOpenApiDocument(text), { ...options, ...extra });
}

const customerIdSchema = {
  type: "string",
  pattern: "^cus_[A-Za-z0-9]{8,32}$",
  description: "Customer identifier.",
};
const emptyObject = { type: "object", properties: {}, additionalProperties: false };
const requestIdHeaders = {
  type: "object",
  properties: {
    "x-request-id": {
      type: "string",
      format: "uuid",
      description: "Caller-chosen id echoed in the upstream logs.",
    },
  },
  additionalProperties: false,
};
const address = {
  type: "object",
  required: ["line1", "city", "country"],
  properties: {
    line1: { type: "string", maxLength: 200 },
    line2: { type: ["string", "null"], maxLength: 200 },
    city: { type: "string", maxLength: 100 },
    postal_code: { type: "string", maxLength: 20 },
    country: { type: "string", pattern: "^[A-Z]{2}$", examples: ["DE"] },
  },
};
const customerFields = {
  type: "object",
  properties: {
    name: { type: "string", minLength: 1, maxLength: 200 },
    email: { type: "string", format: "email" },
    phone: { type: "string", maxLength: 32 },
    tax_id: { type: "string", maxLength: 32, description: "Government tax number." },
    address,
  },
};
const customer = {
  allOf: [
    customerFields,
    {
      type: "object",
      required: ["id", "name", "email", "created_at"],
      properties: {
        id: { type: "string", readOnly: true },
        created_at: { type: "string", format: "date-time", readOnly: true },
        status: { type: "string", enum: ["active", "suspended"] },
      },
    },
  ],
};

describe("OpenAPI import: the customers example", () => {
  it("imports the eight operations in document order with their permission IDs", async () => {
    const result = await importText(readExample("customers.yaml"));
    assert.deepEqual(
      result.operations.map((op) => `${op.method} ${op.path} ${op.operation_id}`),
      [
        "GET /customers listCustomers",
        "POST /customers createCustomer",
        "GET /customers/me getCurrentCustomer",
        "GET /customers/{customerId} getCustomer",
        "DELETE /customers/{customerId} deleteCustomer",
        "PATCH /customers/{customerId} updateCustomer",
        "GET /customers/{customerId}/payment-methods listPaymentMethods",
        "POST /admin/customers/export exportCustomers",
      ],
    );
    assert.deepEqual(
      result.operation_info.map((info) => info.permission_id),
      [
        "customers:get:/customers",
        "customers:post:/customers",
        "customers:get:/customers/me",
        "customers:get:/customers/{customerId}",
        "customers:delete:/customers/{customerId}",
        "customers:patch:/customers/{customerId}",
        "customers:get:/customers/{customerId}/payment-methods",
        "customers:post:/admin/customers/export",
      ],
    );
    assert.deepEqual(
      result.operation_info.map((info) => info.body_required),
      [false, true, false, false, false, true, false, true],
    );
    assert.equal(result.operation_info[3]?.pointer, "/paths/~1customers~1{customerId}/get");
    assert.deepEqual(result.warnings, []);
  });

  it("builds the payment-methods snapshot field by field", async () => {
    const result = await importText(readExample("customers.yaml"));
    const op = result.operations.find((o) => o.operation_id === "listPaymentMethods");
    assert.deepEqual(op, {
      operation_id: "listPaymentMethods",
      method: "GET",
      path: "/customers/{customerId}/payment-methods",
      summary: "A customer's stored payment methods",
      description: "Card numbers come back masked to their last four digits.",
      input_schema: {
        path: {
          type: "object",
          properties: { customerId: customerIdSchema },
          required: ["customerId"],
          additionalProperties: false,
        },
        query: {
          type: "object",
          properties: { type: { type: "string", enum: ["card", "sepa_debit"] } },
          additionalProperties: false,
        },
        headers: emptyObject,
        body: null,
      },
      response_schema: {
        type: "object",
        required: ["items"],
        properties: {
          items: {
            type: "array",
            items: {
              type: "object",
              required: ["id", "type"],
              properties: {
                id: { type: "string" },
                type: { type: "string", enum: ["card", "sepa_debit"] },
                brand: { type: "string" },
                card_number: { type: "string", description: "Full primary account number." },
                cvc: { type: "string" },
                expiry: { type: "string", pattern: "^(0[1-9]|1[0-2])/[0-9]{2}$" },
                cardholder_name: { type: "string" },
              },
            },
          },
        },
      },
      upstream_url_template: "http://127.0.0.1:18080/customers/{customerId}/payment-methods",
      auth_profile_ref: "customers-static",
      response_rules: [
        { path: "/items/*/card_number", mode: "mask", keep_last: 4 },
        { path: "/items/*/cvc", mode: "remove" },
      ],
      parameter_constraints: [],
    });
  });

  it("merges path-level parameters, lower-cases headers and takes a +json body", async () => {
    const result = await importText(readExample("customers.yaml"));
    const update = result.operations.find((o) => o.operation_id === "updateCustomer");
    assert.deepEqual(update?.input_schema, {
      path: {
        type: "object",
        properties: { customerId: customerIdSchema },
        required: ["customerId"],
        additionalProperties: false,
      },
      query: emptyObject,
      headers: {
        type: "object",
        properties: {
          ...requestIdHeaders.properties,
          "if-match": { type: "string", description: "ETag of the version being changed." },
        },
        additionalProperties: false,
      },
      body: customerFields,
    });
    assert.deepEqual(update?.response_schema, customer);
    assert.equal(update?.upstream_url_template, "http://127.0.0.1:18080/customers/{customerId}");
  });

  it("reads query parameters, constraints and redactions of the list operation", async () => {
    const result = await importText(readExample("customers.yaml"));
    const list = result.operations[0];
    assert.deepEqual(list?.input_schema.query, {
      type: "object",
      properties: {
        limit: { type: "integer", minimum: 1, maximum: 100, default: 20, description: "Page size." },
        cursor: { type: "string", maxLength: 256, description: "Opaque cursor from the previous page." },
        email: {
          type: "string",
          format: "email",
          description: "Only the customer with this e-mail address.",
        },
      },
      additionalProperties: false,
    });
    assert.deepEqual(list?.input_schema.headers, requestIdHeaders);
    assert.deepEqual(list?.parameter_constraints, [{ in: "query", name: "limit", maximum: 50 }]);
    assert.deepEqual(list?.response_rules, [
      { path: "/items/*/tax_id", mode: "remove" },
      { path: "/items/*/phone", mode: "mask", keep_last: 2 },
    ]);
    assert.deepEqual(list?.response_schema, {
      type: "object",
      required: ["items"],
      properties: { items: { type: "array", items: customer }, next_cursor: { type: ["string", "null"] } },
    });
  });

  it("applies per-operation auth profiles and body constraints", async () => {
    const result = await importText(readExample("customers.yaml"));
    const byId = new Map(result.operations.map((o) => [o.operation_id, o]));
    assert.equal(byId.get("getCurrentCustomer")?.auth_profile_ref, "customers-user-oauth");
    const exportOp = byId.get("exportCustomers");
    assert.equal(exportOp?.auth_profile_ref, "customers-admin");
    assert.deepEqual(exportOp?.parameter_constraints, [
      { in: "body", name: "/format", allowed_values: ["jsonl"] },
    ]);
    assert.deepEqual(exportOp?.input_schema.body, {
      type: "object",
      additionalProperties: false,
      required: ["format"],
      properties: {
        format: { type: "string", enum: ["jsonl", "csv"] },
        since: { type: "string", format: "date-time" },
      },
    });
    const remove = byId.get("deleteCustomer");
    assert.equal(remove?.response_schema, null);
    assert.equal(remove?.input_schema.body, null);
    assert.deepEqual(byId.get("createCustomer")?.input_schema.body, {
      allOf: [customerFields, { required: ["name", "email"] }],
    });
  });

  it("returns deep-frozen snapshots that core accepts as a capability", async () => {
    const result = await importText(readExample("customers.yaml"));
    assert.ok(Object.isFrozen(result.operations));
    assert.ok(Object.isFrozen(result.operations[0]?.input_schema.query));
    assert.ok(Object.isFrozen(result.operations[0]?.response_rules[0]));
    assert.throws(() => {
      (result.operations as unknown as unknown[]).push({});
    }, TypeError);
    for (const op of result.operations) validateOperationSnapshot(op);
    validateCapability({
      capability_id: "customers",
      partner_id: "partner-1",
      name: "Customer records",
      catalog_version: "1",
      operations: result.operations,
    });
    // Three location schemas per operation, three bodies, seven JSON responses.
    assert.equal(assertAllSchemasCompile(result.operations), 8 * 3 + 3 + 7);
  });

  it("lets upstreamBaseUrl replace the servers and merges default response rules", async () => {
    const result = await importText(readExample("customers.yaml"), {
      upstreamBaseUrl: "https://gateway.internal.example/customers-api/",
      defaultResponseRules: [
        { path: "/tax_id", mode: "remove" },
        { path: "/internal_notes", mode: "remove" },
      ],
    });
    const get = result.operations.find((o) => o.operation_id === "getCustomer");
    assert.equal(
      get?.upstream_url_template,
      "https://gateway.internal.example/customers-api/customers/{customerId}",
    );
    assert.deepEqual(get?.response_rules, [
      { path: "/internal_notes", mode: "remove" },
      { path: "/tax_id", mode: "mask", keep_last: 4 },
    ]);
    const remove = result.operations.find((o) => o.operation_id === "deleteCustomer");
    assert.deepEqual(remove?.response_rules, [
      { path: "/tax_id", mode: "remove" },
      { path: "/internal_notes", mode: "remove" },
    ]);
  });

  it("gives the same snapshots from YAML text, JSON text and an object, without touching the object", async () => {
    const fromYaml = await importText(readExample("customers.yaml"));
    const parsed = (await import("yaml")).parse(readExample("customers.yaml")) as Record<string, unknown>;
    const before = structuredClone(parsed);
    const fromObject = await importText(parsed);
    assert.deepEqual(parsed, before);
    const fromJson = await importText(JSON.stringify(parsed, null, 2));
    const fromJsonAsYaml = await importOperations(
      await parseOpenApiDocument(JSON.stringify(parsed), { format: "yaml" }),
      options,
    );
    assert.deepEqual(fromObject, fromYaml);
    assert.deepEqual(fromJson, fromYaml);
    assert.deepEqual(fromJsonAsYaml, fromYaml);
  });
});

describe("OpenAPI import: the large 3.1 fixture", () => {
  it("imports 130 operations with every schema compiling under ajv 2020-12", async () => {
    const doc = buildLargeOpenApi();
    const result = await importText(doc, { capabilityId: "commerce" });
    assert.equal(result.operations.length, 130);
    assert.deepEqual(
      result.operations.map((o) => ({ method: o.method, path: o.path })),
      expectedLargeOperations(),
    );
    // Per resource: bodies of create and replace, JSON responses of list, create, get, replace.
    assert.equal(assertAllSchemasCompile(result.operations), 130 * 3 + 26 * 2 + 26 * 4);
    assert.equal(new Set(result.operation_info.map((i) => i.permission_id)).size, 130);
  });

  it("keeps path + query + header parameters, bodies, servers and extensions", async () => {
    const result = await importText(buildLargeOpenApi(), { capabilityId: "commerce" });
    const get = result.operations.find((o) => o.operation_id === "getAccount");
    assert.deepEqual(get?.input_schema.path, {
      type: "object",
      properties: { accountId: { type: "string", pattern: "^[a-z0-9_]{4,40}$" } },
      required: ["accountId"],
      additionalProperties: false,
    });
    assert.deepEqual(get?.input_schema.query, {
      type: "object",
      properties: { expand: { type: "array", items: { type: "string" } } },
      additionalProperties: false,
    });
    assert.deepEqual(get?.input_schema.headers, {
      type: "object",
      properties: { "x-tenant-id": { type: "string", format: "uuid" } },
      required: ["x-tenant-id"],
      additionalProperties: false,
    });
    assert.equal(get?.upstream_url_template, "https://eu.api.example.com/v1/accounts/{accountId}");
    assert.deepEqual(get?.response_rules, [{ path: "/owner_email", mode: "mask", keep_last: 4 }]);
    const create = result.operations.find((o) => o.operation_id === "createAccount");
    assert.deepEqual(Object.keys((create?.input_schema.headers.properties ?? {}) as object), [
      "x-tenant-id",
      "idempotency-key",
    ]);
    assert.equal(create?.input_schema.body?.additionalProperties, false);
    const put = result.operations.find((o) => o.operation_id === "replaceAccount");
    assert.deepEqual(put?.parameter_constraints, [
      { in: "body", name: "/status", allowed_values: ["active", "archived"] },
    ]);
    assert.equal(
      result.operation_info.find((i) => i.operation_id === "replaceAccount")?.body_required,
      false,
    );
    assert.equal(
      result.operations.find((o) => o.operation_id === "deleteAccount")?.auth_profile_ref,
      "admin-profile",
    );
  });

  it("derives stable ids for operations without operationId and says so", async () => {
    const first = await importText(buildLargeOpenApi(), { capabilityId: "commerce" });
    const second = await importText(buildLargeOpenApi(), { capabilityId: "commerce" });
    const products = first.operations.filter((o) => o.path.startsWith("/products"));
    assert.deepEqual(
      products.map((o) => o.operation_id),
      [
        "get_products",
        "post_products",
        "get_products_by_productid",
        "put_products_by_productid",
        "delete_products_by_productid",
      ],
    );
    assert.deepEqual(
      second.operations.map((o) => o.operation_id),
      first.operations.map((o) => o.operation_id),
    );
    assert.ok(first.warnings.includes('GET /products: no operationId; using "get_products"'));
  });

  it("keeps a recursive schema recursive through $defs, and it validates nested data", async () => {
    const result = await importText(buildLargeOpenApi(), { capabilityId: "commerce" });
    const get = result.operations.find((o) => o.operation_id === "getAccount");
    const schema = get?.response_schema as Record<string, Record<string, unknown>>;
    assert.equal(schema.$ref, "#/$defs/Account");
    assert.deepEqual(schema.$defs?.TreeNode, {
      type: "object",
      required: ["id"],
      properties: {
        id: { type: "string" },
        children: { type: "array", items: { $ref: "#/$defs/TreeNode" } },
      },
    });
    const validate = createSnapshotAjv().compile(schema);
    const tree = { id: "r", children: [{ id: "a", children: [{ id: "b", children: [] }] }] };
    assert.equal(validate({ id: "acc1", name: "A", tree }), true);
    assert.equal(validate({ id: "acc1", name: "A", tree: { id: "r", children: [{ children: [] }] } }), false);
  });

  it("reads the same document from JSON and YAML text", async () => {
    const doc = buildLargeOpenApi({ resources: 5 });
    const fromJson = await importText(JSON.stringify(doc), { capabilityId: "commerce" });
    const fromYaml = await importText(stringify(doc), { capabilityId: "commerce" });
    assert.deepEqual(fromYaml, fromJson);
  });
});

describe("OpenAPI import: 3.0 conversion", () => {
  it("turns nullable, boolean exclusive bounds and examples into 2020-12", async () => {
    const result = await importText(readFixture("legacy-3.0.yaml"));
    assert.deepEqual(
      result.operations.map((o) => `${o.method} ${o.path} ${o.operation_id}`),
      [
        "GET /pets listPets",
        "POST /pets createPet",
        "GET /pets/{petId} getPet",
        "DELETE /pets/{petId} delete_pets_by_petid",
      ],
    );
    const list = result.operations[0];
    assert.deepEqual(list?.input_schema.query, {
      type: "object",
      properties: {
        limit: { type: "integer", format: "int32", minimum: 0, exclusiveMinimum: 0, maximum: 100 },
        tag: { type: ["string", "null"] },
      },
      additionalProperties: false,
    });
    assert.deepEqual(list?.input_schema.headers, emptyObject);
    const newPet = {
      type: "object",
      required: ["name"],
      properties: {
        name: { type: "string" },
        tag: { type: ["string", "null"] },
        kind: { type: ["string", "null"], enum: ["cat", "dog", null] },
        microchip: { type: "string" },
        weight: { type: "number", format: "float", maximum: 200, exclusiveMaximum: 200 },
      },
    };
    assert.deepEqual(result.operations[1]?.input_schema.body, newPet);
    assert.equal(result.operation_info[1]?.body_required, false);
    const pet = {
      allOf: [
        newPet,
        {
          type: "object",
          required: ["id"],
          properties: {
            id: { type: "integer", format: "int64", readOnly: true },
            owner: {
              anyOf: [
                { allOf: [{ type: "object", properties: { name: { type: "string" } } }] },
                { type: "null" },
              ],
            },
          },
        },
      ],
    };
    assert.deepEqual(result.operations[1]?.response_schema, pet);
    assert.deepEqual(result.operations[2]?.response_schema, pet);
    assert.deepEqual(list?.response_schema, { type: "array", items: pet });
    assert.equal(result.operations[0]?.upstream_url_template, "https://pets.example.com/api/pets");
    assert.deepEqual(result.warnings, [
      'GET /pets: cookie parameter "session" is not supported and was not imported',
      'GET /pets: header parameter "Accept" is ignored (OpenAPI reserves it)',
      'GET /pets: format "microchip-v2" is not supported and was dropped',
      'POST /pets: format "microchip-v2" is not supported and was dropped',
      'GET /pets/{petId}: format "microchip-v2" is not supported and was dropped',
      'DELETE /pets/{petId}: no operationId; using "delete_pets_by_petid"',
    ]);
    assertAllSchemasCompile(result.operations);
  });

  it("validates data the way the 3.0 document meant", async () => {
    const result = await importText(readFixture("legacy-3.0.yaml"));
    const ajv = createSnapshotAjv();
    const query = ajv.compile(result.operations[0]?.input_schema.query ?? {});
    assert.equal(query({ limit: 1, tag: null }), true);
    assert.equal(query({ limit: 0 }), false, "exclusiveMinimum: true keeps 0 out");
    assert.equal(query({ other: "x" }), false, "undeclared query parameters are refused");
    const body = ajv.compile(result.operations[1]?.input_schema.body ?? {});
    assert.equal(body({ name: "Rex", kind: null, tag: null }), true);
    assert.equal(body({ name: "Rex", kind: "fish" }), false);
    assert.equal(body({ name: "Rex", weight: 200 }), false);
  });
});

async function problemsOf(
  input: string | object,
  extra: Partial<Parameters<typeof importOperations>[1]> = {},
) {
  try {
    await importText(input, extra);
  } catch (error) {
    assert.ok(error instanceof OpenApiImportError, String(error));
    assert.equal(error.code, "invalid_openapi");
    assert.equal(error.status, 400);
    for (const problem of error.problems) {
      assert.doesNotMatch(problem.message, /\n|\s+at\s+\S+\s+\(|node_modules|\/work\//);
    }
    return error.problems;
  }
  assert.fail("the import should have failed");
}

describe("OpenAPI import: broken documents", () => {
  it("missing paths", async () => {
    assert.deepEqual(await problemsOf(readFixture("broken/missing-paths.yaml")), [
      { pointer: "/paths", message: "the document has no paths: a capability needs at least one operation" },
    ]);
  });

  it("references that do not resolve", async () => {
    assert.deepEqual(await problemsOf(readFixture("broken/bad-ref.yaml")), [
      {
        pointer: "/paths/~1things/get/parameters/0/$ref",
        message: '$ref "#/components/parameters/Missing" does not resolve to anything in the document',
      },
      {
        pointer: "/paths/~1things/get/responses/200/content/application~1json/schema/$ref",
        message: '$ref "#/components/schemas/Thingg" does not resolve to anything in the document',
      },
    ]);
  });

  it("a path template parameter nobody declared", async () => {
    assert.deepEqual(await problemsOf(readFixture("broken/undeclared-path-param.yaml")), [
      {
        pointer: "/paths/~1users~1{userId}~1orders~1{orderId}/get",
        message: "path template parameter {orderId} is not declared as a path parameter",
      },
    ]);
  });

  it("two operations for the same method and path shape, and a repeated operationId", async () => {
    assert.deepEqual(await problemsOf(readFixture("broken/duplicate-operation.yaml")), [
      {
        pointer: "/paths/~1users~1{userId}/get",
        message: "duplicate operation: GET /users/{userId} matches the same requests as GET /users/{id}",
      },
      {
        pointer: "/paths/~1users~1{userId}/delete/operationId",
        message: 'operationId "getUser" is already used by GET /users/{id}',
      },
    ]);
  });

  it("a path written twice, in JSON and in YAML", async () => {
    assert.deepEqual(await problemsOf(readFixture("broken/duplicate-key.json")), [
      { pointer: "/paths/~1users", message: 'duplicate key "/users"' },
    ]);
    assert.deepEqual(await problemsOf(readFixture("broken/duplicate-key.yaml")), [
      { pointer: "", message: "the document is not valid YAML (line 11, column 3): Map keys must be unique" },
    ]);
  });

  it("external references, refused without being read or fetched", async () => {
    assert.deepEqual(await problemsOf(readFixture("broken/external-ref.yaml")), [
      {
        pointer: "/paths/~1things/get/responses/200/content/application~1json/schema/$ref",
        message:
          'external $ref "./schemas/thing.yaml#/Thing" is not allowed: references must stay inside the document (#/...)',
      },
      {
        pointer: "/paths/~1others/get/responses/200/content/application~1json/schema/$ref",
        message:
          'external $ref "https://schemas.example.com/other.json" is not allowed: references must stay inside the document (#/...)',
      },
      {
        pointer: "/paths/~1local/$ref",
        message:
          'external $ref "file:///etc/passwd" is not allowed: references must stay inside the document (#/...)',
      },
    ]);
  });

  it("wrong and unsupported versions", async () => {
    assert.deepEqual(await problemsOf(readFixture("broken/wrong-version.yaml")), [
      {
        pointer: "/swagger",
        message: "Swagger 2.0 documents are not supported: convert to OpenAPI 3.0 or 3.1",
      },
    ]);
    assert.deepEqual(await problemsOf(readFixture("broken/unsupported-version.json")), [
      { pointer: "/openapi", message: 'OpenAPI version "3.2.0" is not supported (3.0.x or 3.1.x)' },
    ]);
    assert.deepEqual(await problemsOf({ info: { title: "t", version: "1" }, paths: {} }), [
      {
        pointer: "/openapi",
        message: "the document must declare its OpenAPI version (openapi: 3.0.x or 3.1.x)",
      },
    ]);
  });

  it("a YAML alias expansion attack", async () => {
    assert.deepEqual(await problemsOf(readFixture("broken/alias-bomb.yaml")), [
      { pointer: "", message: "the YAML document uses too many aliases (possible expansion attack)" },
    ]);
  });

  it("malformed x-authority extensions, each with its own pointer", async () => {
    const base = "/paths/~1things~1{thingId}/get";
    assert.deepEqual(await problemsOf(readFixture("broken/bad-extensions.yaml")), [
      {
        pointer: `${base}/x-authority-redactions/0`,
        message: "path must be a JSON pointer such as /items/*/card_number",
      },
      {
        pointer: `${base}/x-authority-redactions/1`,
        message: "/mode must be equal to one of the allowed values",
      },
      { pointer: `${base}/x-authority-redactions/2`, message: "keep_last applies to mode mask only" },
      { pointer: `${base}/x-authority-constraints/0`, message: 'query parameter "missing" is not declared' },
      {
        pointer: `${base}/x-authority-constraints/1`,
        message:
          'path parameter "thingId": pattern cannot be used: backreferences (\\1) are not supported: they cannot be matched in linear time',
      },
      {
        pointer: `${base}/x-authority-constraints/2`,
        message: "the operation has no JSON request body to constrain",
      },
      {
        pointer: `${base}/x-authority-auth-profile`,
        message: "x-authority-auth-profile must be 1-256 printable characters without spaces",
      },
    ]);
  });

  it("server URLs with credentials, without variable defaults, or missing", async () => {
    assert.deepEqual(await problemsOf(readFixture("broken/bad-servers.yaml")), [
      { pointer: "/paths/~1a/get/servers/0/url", message: "server URL must not contain credentials" },
      {
        pointer: "/paths/~1b/get/servers/0/variables/region",
        message: "server variable {region} has no default value",
      },
      {
        pointer: "/servers",
        message: "no server URL: add servers[0].url to the document or pass upstreamBaseUrl",
      },
    ]);
  });

  it("shape problems found before the parser runs, with pointers", async () => {
    const doc = {
      openapi: "3.0.3",
      info: { title: "t" },
      servers: [{ url: "https://api.example.com" }],
      paths: {
        things: {},
        "/a": { get: { parameters: [{ name: "q", schema: { type: "string" } }] } },
        "/b": { post: "nope" },
        "/c": { get: { parameters: [{ name: "q", in: "query" }], responses: {} } },
        "/d/{id}": { get: { parameters: [{ name: "id", in: "path", schema: {} }], responses: {} } },
      },
    };
    assert.deepEqual(await problemsOf(doc), [
      { pointer: "/info/version", message: "info.version must be a string" },
      { pointer: "/paths/things", message: "a path must start with '/'" },
      { pointer: "/paths/~1a/get/responses", message: "an operation needs a responses object" },
      {
        pointer: "/paths/~1a/get/parameters/0",
        message: "parameter 'in' must be path, query, header or cookie",
      },
      { pointer: "/paths/~1b/post", message: "an operation must be an object" },
      { pointer: "/paths/~1c/get/parameters/0", message: "a parameter needs a schema or a content map" },
      {
        pointer: "/paths/~1d~1{id}/get/parameters/0/required",
        message: "a path parameter must have required: true",
      },
    ]);
  });

  it("patterns linear-time matching cannot run are refused where they are written (400)", async () => {
    const ok = { "200": { description: "ok" } };
    const doc = {
      openapi: "3.1.0",
      info: { title: "t", version: "1" },
      servers: [{ url: "https://api.example.com" }],
      paths: {
        "/things/{id}": {
          get: {
            parameters: [
              { name: "id", in: "path", required: true, schema: { type: "string", pattern: "^(\\w+)-\\1$" } },
            ],
            responses: {
              "200": {
                description: "ok",
                content: { "application/json": { schema: { $ref: "#/components/schemas/Thing" } } },
              },
            },
          },
        },
        "/things": {
          post: {
            requestBody: {
              content: {
                "application/json": { schema: { type: "object", patternProperties: { "^(?=x)": {} } } },
              },
            },
            responses: ok,
          },
        },
      },
      components: {
        schemas: { Thing: { type: "object", properties: { code: { type: "string", pattern: "(?<!a)b" } } } },
      },
    };
    const linear = "cannot be matched in linear time";
    assert.deepEqual(await problemsOf(doc), [
      {
        pointer: "/paths/~1things~1{id}/get/parameters/0/schema/pattern",
        message: `pattern "^(\\\\w+)-\\\\1$" is refused: backreferences (\\1) are not supported: they ${linear}`,
      },
      {
        pointer:
          "/paths/~1things~1{id}/get/responses/200/content/application~1json/schema/properties/code/pattern",
        message: `pattern "(?<!a)b" is refused: lookbehind ((?<= or (?<!) is not supported: it ${linear}`,
      },
      {
        pointer: "/paths/~1things/post/requestBody/content/application~1json/schema/patternProperties/^(?=x)",
        message: `pattern "^(?=x)" is refused: lookahead ((?= or (?!) is not supported: it ${linear}`,
      },
    ]);
  });

  it("parser findings without a pointer keep only their first line", async () => {
    const doc = {
      openapi: "3.1.0",
      info: { title: "t", version: "1" },
      servers: [{ url: "https://api.example.com" }],
      paths: { "/a": { get: { responses: { "200": { description: "ok" } } }, bogus: 1 } },
    };
    const problems = await problemsOf(doc);
    assert.equal(problems.length, 1);
    assert.equal(problems[0]?.pointer, "");
    assert.match(problems[0]?.message ?? "", /^[A-Z ]+ must NOT have (?:additional|unevaluated) properties$/);
  });

  it("invalid path templates, path parameters and duplicate parameters", async () => {
    const ok = { "200": { description: "ok" } };
    const doc = {
      openapi: "3.1.0",
      info: { title: "t", version: "1" },
      servers: [{ url: "https://api.example.com" }],
      paths: {
        "/a/{x}{y}": {
          get: {
            parameters: [
              { name: "x", in: "path", required: true, schema: { type: "string" } },
              { name: "y", in: "path", required: true, schema: { type: "string" } },
            ],
            responses: ok,
          },
        },
        "/b/{id}": {
          get: {
            parameters: [
              { name: "id", in: "path", required: true, schema: { type: "string" } },
              { name: "extra", in: "path", required: true, schema: { type: "string" } },
              { name: "q", in: "query", schema: { type: "string" } },
              { name: "q", in: "query", schema: { type: "integer" } },
            ],
            responses: ok,
          },
        },
      },
    };
    assert.deepEqual(await problemsOf(doc), [
      { pointer: "/paths/~1a~1{x}{y}", message: "invalid path template: adjacent parameters" },
      { pointer: "/paths/~1b~1{id}/get/parameters/3", message: 'duplicate query parameter "q"' },
      {
        pointer: "/paths/~1b~1{id}/get/parameters/1",
        message: 'path parameter "extra" does not appear in the path template',
      },
    ]);
  });

  it("a schema that is not JSON Schema 2020-12", async () => {
    const doc = {
      openapi: "3.1.0",
      info: { title: "t", version: "1" },
      servers: [{ url: "https://api.example.com" }],
      paths: {
        "/a": {
          get: {
            responses: {
              "200": { description: "d", content: { "application/json": { schema: { type: "strnig" } } } },
            },
          },
        },
      },
    };
    const problems = await problemsOf(doc);
    assert.equal(problems.length, 1);
    assert.equal(problems[0]?.pointer, "/paths/~1a/get/responses/200/content/application~1json/schema");
    assert.match(
      problems[0]?.message ?? "",
      /^not a valid JSON Schema 2020-12: schema\/type must be equal to one of/,
    );
  });

  it("serializes as a safe 400 body and maps onto the shared error table", async () => {
    let caught: unknown;
    try {
      await importText(readFixture("broken/missing-paths.yaml"));
    } catch (error) {
      caught = error;
    }
    assert.ok(caught instanceof OpenApiImportError);
    const body = JSON.parse(JSON.stringify(caught)) as Record<string, unknown>;
    assert.deepEqual(body, {
      error: "invalid_openapi",
      message: "The OpenAPI document is invalid.",
      details: {
        problems: [
          {
            pointer: "/paths",
            message: "the document has no paths: a capability needs at least one operation",
          },
        ],
      },
    });
    const shared = toAuthorityError(caught);
    assert.equal(shared.code, "invalid_request");
    assert.equal(shared.status, 400);
    assert.deepEqual(shared.toJSON().details, { reason: "invalid_openapi", problems: caught.problems });
  });
});

describe("OpenAPI import: options", () => {
  it("refuses bad options with ImportOptionsError", async () => {
    const parsed = await parseOpenApiDocument(readExample("customers.yaml"));
    const bad: Array<Parameters<typeof importOperations>[1]> = [
      { capabilityId: "has:colon", authProfileRef: "p" },
      { capabilityId: "c", authProfileRef: "" },
      { capabilityId: "c", authProfileRef: "p", upstreamBaseUrl: "https://user:pw@example.com" },
      { capabilityId: "c", authProfileRef: "p", upstreamBaseUrl: "ftp://example.com" },
      { capabilityId: "c", authProfileRef: "p", upstreamBaseUrl: "https://example.com/?q=1" },
      {
        capabilityId: "c",
        authProfileRef: "p",
        defaultResponseRules: [{ path: "/a", mode: "shred" as "mask" }],
      },
    ];
    for (const options of bad) {
      assert.throws(() => importOperations(parsed, options), ImportOptionsError, JSON.stringify(options));
    }
  });

  it("a relative server URL works only with upstreamBaseUrl", async () => {
    const doc = {
      openapi: "3.1.0",
      info: { title: "t", version: "1" },
      servers: [{ url: "/api/v2" }],
      paths: { "/a": { get: { responses: { "200": { description: "ok" } } } } },
    };
    assert.deepEqual(await problemsOf(doc), [
      {
        pointer: "/servers/0/url",
        message: "server URL is not an absolute URL (relative server URLs need upstreamBaseUrl)",
      },
    ]);
    const result = await importText(doc, { upstreamBaseUrl: "http://127.0.0.1:9000/api/v2" });
    assert.equal(result.operations[0]?.upstream_url_template, "http://127.0.0.1:9000/api/v2/a");
  });

  it("operation-level servers win over path-level and document servers", async () => {
    const ok = { responses: { "200": { description: "ok" } } };
    const doc = {
      openapi: "3.1.0",
      info: { title: "t", version: "1" },
      servers: [{ url: "https://doc.example.com" }],
      paths: {
        "/a": {
          servers: [{ url: "https://path.example.com/base/" }],
          get: ok,
          post: { ...ok, servers: [{ url: "https://op.example.com" }] },
        },
        "/b": { get: ok },
      },
    };
    const result = await importText(doc);
    assert.deepEqual(
      result.operations.map((o) => o.upstream_url_template),
      ["https://path.example.com/base/a", "https://op.example.com/a", "https://doc.example.com/b"],
    );
  });
});
