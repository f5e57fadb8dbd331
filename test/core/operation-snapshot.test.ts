import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Ajv2020 } from "ajv/dist/2020.js";
import ajvFormats from "ajv-formats";
import {
  OperationSnapshotError,
  operationSnapshotJsonSchema,
  validateOperationSnapshot,
} from "../../src/core/operation-snapshot.ts";
import { snapshot } from "./fixtures.ts";

const messagesOf = (value: unknown): readonly string[] => {
  try {
    validateOperationSnapshot(value);
  } catch (error) {
    assert.ok(error instanceof OperationSnapshotError);
    assert.equal(error.code, "operation_snapshot_invalid");
    return error.messages;
  }
  assert.fail("expected the snapshot to be refused");
};

describe("operation snapshots", () => {
  it("accepts a complete snapshot, with optional summary and description", () => {
    const value = snapshot("GET", "/users/{id}", {
      summary: "Get a user",
      description: "Returns one user.",
      response_rules: [{ path: "/email", mode: "mask", keep_last: 4 }],
      parameter_constraints: [{ in: "path", name: "id", pattern: "[0-9]+" }],
    });
    assert.equal(validateOperationSnapshot(value), value);
  });

  it("refuses missing, extra and mistyped fields with safe messages", () => {
    const { upstream_url_template: _drop, ...missing } = snapshot("GET", "/a");
    assert.ok(messagesOf(missing).some((m) => m.includes("upstream_url_template")));
    assert.ok(
      messagesOf({ ...snapshot("GET", "/a"), extra: "secret-value" }).some((m) => m.includes('"extra"')),
    );
    assert.ok(
      !messagesOf({ ...snapshot("GET", "/a"), extra: "secret-value" })
        .join()
        .includes("secret-value"),
    );
    messagesOf({ ...snapshot("GET", "/a"), method: "get" });
    messagesOf({ ...snapshot("GET", "/a"), path: "a" });
    messagesOf({ ...snapshot("GET", "/a"), upstream_url_template: "ftp://x/a" });
    messagesOf({ ...snapshot("GET", "/a"), upstream_url_template: "https://" });
    messagesOf({ ...snapshot("GET", "/a"), response_rules: [{ path: "/x", mode: "hash" }] });
    messagesOf({ ...snapshot("GET", "/a"), response_rules: [{ path: "x", mode: "remove" }] });
    const input = snapshot("GET", "/a").input_schema;
    messagesOf({ ...snapshot("GET", "/a"), input_schema: { ...input, query: { type: "array" } } });
    messagesOf({ ...snapshot("GET", "/a"), input_schema: { ...input, body: "none" } });
    assert.deepEqual(messagesOf(snapshot("GET", "/a/{b")), ["/path is not a valid OpenAPI path template"]);
  });

  it("publishes a standalone JSON Schema 2020-12 document", () => {
    const ajv = new Ajv2020({ strict: true, allowUnionTypes: true });
    ajvFormats.default(ajv);
    const validate = ajv.compile(operationSnapshotJsonSchema);
    assert.equal(validate(snapshot("POST", "/invoices")), true);
    assert.equal(validate({}), false);
  });
});
