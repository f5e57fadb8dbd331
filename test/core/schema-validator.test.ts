import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Ajv2020 } from "ajv/dist/2020.js";
import ajvFormats from "ajv-formats";
import "../../src/admin/auth-profile-input.ts";
import "../../src/catalog/extensions.ts";
import { POLICY_SCHEMA_V1, POLICY_SCHEMA_V2, validatePolicyDocument } from "../../src/core/index.ts";
import { compileSchema, declaredSchemas } from "../../src/core/schema-validator.ts";
import "../../src/mcp/management-tools.ts";

/**
 * compileSchema does not check its schemas against the 2020-12 meta-schema at run time
 * (compiling that meta-schema was a third of a fresh sidecar's schema work before its first
 * decision): every schema it is given is this code base's own constant, and this test holds
 * each one to the meta-schema instead.
 */
describe("the schemas of compileSchema", () => {
  it("are each valid against the JSON Schema 2020-12 meta-schema", () => {
    const meta = new Ajv2020({ strict: true, allowUnionTypes: true });
    ajvFormats.default(meta);
    const schemas = declaredSchemas();
    // the policy documents, capability, operation snapshot, constraints, redaction rules,
    // auth profiles and every management tool's input
    assert.ok(schemas.length >= 15, `only ${schemas.length} schemas declared`);
    for (const schema of schemas) {
      assert.equal(
        meta.validateSchema(schema),
        true,
        `${String(schema.$id ?? schema.title ?? JSON.stringify(schema).slice(0, 80))}: ${meta.errorsText(meta.errors)}`,
      );
    }
  });

  it("still refuses a schema its strict compiler cannot read, at first use", () => {
    const check = compileSchema({ type: "object", properties: { a: { type: "strin" } } });
    assert.throws(() => check({}), /type must be JSONType/);
  });

  it("compiles the policy document schemas into working validators", () => {
    for (const schema_version of [POLICY_SCHEMA_V1, POLICY_SCHEMA_V2]) {
      assert.throws(() => validatePolicyDocument({ schema_version }));
    }
  });
});
