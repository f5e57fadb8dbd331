import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { validate } from "@readme/openapi-parser";
import type { FastifyInstance } from "fastify";
import { CREDENTIAL_HEADERS } from "../../../src/servers/managed/request.ts";
import {
  documentedOperations,
  openApiPath,
  operationsWithoutSuccessSchema,
  registeredRoutes,
} from "../../helpers/openapi-conformance.ts";
import { type Environment, startEnvironment } from "./harness.ts";

let env: Environment;
let app: FastifyInstance;
let document: Record<string, unknown>;
before(async () => {
  env = await startEnvironment();
  app = (await env.startManaged()).server.app;
  const response = await app.inject({ method: "GET", url: "/openapi.json" });
  assert.equal(response.statusCode, 200);
  document = response.json() as Record<string, unknown>;
});
after(() => env.close());

test("the managed API serves a valid OpenAPI 3.1 document without credentials", async () => {
  assert.equal(document.openapi, "3.1.0");
  const result = await validate(structuredClone(document) as never);
  assert.equal(result.valid, true, JSON.stringify(result.valid ? [] : result.errors).slice(0, 2000));
});

test("every managed route is in the document with its success body", async () => {
  const registered = registeredRoutes(app).map((route) => {
    const [method = "", url = ""] = route.split(" ");
    return `${method} ${openApiPath(url)}`;
  });
  assert.deepEqual(documentedOperations(document), registered);
  assert.deepEqual(operationsWithoutSuccessSchema(document), []);
});

test("the five credential headers are the security requirement of every operation", () => {
  const schemes = (document.components as { securitySchemes: Record<string, { in: string; name: string }> })
    .securitySchemes;
  for (const name of CREDENTIAL_HEADERS)
    assert.deepEqual(schemes[name], { type: "apiKey", in: "header", name });
  assert.deepEqual(document.security, [Object.fromEntries(CREDENTIAL_HEADERS.map((n) => [n, []]))]);
  const paths = document.paths as Record<string, Record<string, { requestBody?: unknown }>>;
  for (const path of ["/v1/encrypt", "/v1/decrypt", "/v1/sign-encrypt", "/v1/decrypt-verify"]) {
    assert.ok(paths[path]?.post?.requestBody !== undefined, `${path} has no request body`);
  }
});
