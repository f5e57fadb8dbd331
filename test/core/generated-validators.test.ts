import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, it } from "node:test";
import { GENERATED_DIR, generatedValidatorFiles } from "../../scripts/gen-schema-validators.ts";
import { createSchemaCompiler, declaredSchemas, schemaKey } from "../../src/core/schema-validator.ts";

/**
 * compileSchema loads the validators generated at build time (src/core/generated-validators/,
 * `make validators`) instead of compiling its schemas at start (issue 30). They must be exactly
 * what ajv generates now from the schemas as they are now.
 */
describe("the generated schema validators", () => {
  it("are what the generator writes from the schemas of src/ now (run `make validators`)", async () => {
    const expected = await generatedValidatorFiles();
    const present = (await readdir(GENERATED_DIR)).filter((name) => name.endsWith(".cjs")).sort();
    assert.deepEqual(present, [...expected.keys()].sort());
    for (const [name, content] of expected) {
      assert.equal(await readFile(join(GENERATED_DIR, name), "utf8"), content, `${name} is stale`);
    }
  });

  it("are used for every schema compileSchema was given, and judge as the run-time compiler does", async () => {
    const { default: generated } = (await import("../../src/core/generated-validators/index.cjs")) as {
      default: Record<string, () => (value: unknown) => boolean>;
    };
    const compiler = createSchemaCompiler();
    for (const schema of declaredSchemas()) {
      const load = generated[schemaKey(schema)];
      assert.ok(
        load,
        `no generated validator for ${String(schema.$id ?? JSON.stringify(schema).slice(0, 80))}`,
      );
      const compiled = compiler.compile(schema);
      for (const sample of [{}, null, [], "x", { schema_version: 1 }]) {
        assert.equal(load()(sample), compiled(sample));
      }
    }
  });
});
