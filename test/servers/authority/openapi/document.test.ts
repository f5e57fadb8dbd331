import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { validate } from "@readme/openapi-parser";
import {
  documentedOperations,
  openApiPath,
  operationsWithoutSuccessSchema,
  registeredRoutes,
} from "../../../helpers/openapi-conformance.ts";
import { type Harness, startHarness } from "../admin/harness.ts";

let h: Harness;
let document: Record<string, unknown>;
before(async () => {
  h = await startHarness();
  const response = await fetch(`${h.url}/openapi.json`);
  assert.equal(response.status, 200);
  document = (await response.json()) as Record<string, unknown>;
});
after(() => h.close());

test("GET /openapi.json needs no token and is a valid OpenAPI 3.1 document", async () => {
  assert.equal(document.openapi, "3.1.0");
  const result = await validate(structuredClone(document) as never);
  assert.equal(result.valid, true, JSON.stringify(result.valid ? [] : result.errors).slice(0, 2000));
});

test("every route fastify registered is in the document, and nothing else is", () => {
  const registered = registeredRoutes(h.app).map((route) => {
    const [method = "", url = ""] = route.split(" ");
    return `${method} ${openApiPath(url)}`;
  });
  assert.ok(registered.length > 50, `only ${registered.length} routes found`);
  assert.deepEqual(documentedOperations(document), registered);
});

test("every operation declares its own responses, not only the shared error bodies", () => {
  assert.deepEqual(operationsWithoutSuccessSchema(document), []);
});

test("every operation answers the shared error body for 4XX and 5XX", () => {
  const components = (document.components as { schemas: Record<string, unknown> }).schemas;
  assert.ok(components.ErrorBody !== undefined);
  const paths = document.paths as Record<string, Record<string, { responses: Record<string, unknown> }>>;
  for (const [path, item] of Object.entries(paths)) {
    for (const [method, operation] of Object.entries(item)) {
      const statuses = Object.keys(operation.responses);
      assert.ok(
        statuses.some((s) => s.startsWith("4")),
        `${method} ${path}: no 4xx`,
      );
      assert.ok(
        statuses.some((s) => s.startsWith("5")),
        `${method} ${path}: no 5xx`,
      );
    }
  }
});

test("the document holds no secret or configuration of the running service", () => {
  const text = JSON.stringify(document);
  for (const value of [h.context.config.issuer, h.context.config.serviceIdentity, "127.0.0.1"]) {
    assert.ok(!text.includes(value), `document mentions ${value}`);
  }
});
