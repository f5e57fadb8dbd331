import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createSnapshotAjv } from "../../src/catalog/schema-ajv.ts";
import type { OperationSnapshot } from "../../src/core/operation-snapshot.ts";

const root = new URL("../../", import.meta.url);

export const readFixture = (name: string): string =>
  readFileSync(new URL(`test/fixtures/openapi/${name}`, root), "utf8");

export const readExample = (name: string): string =>
  readFileSync(new URL(`examples/openapi/${name}`, root), "utf8");

/** Every schema of every snapshot, with a label saying where it came from. */
export function snapshotSchemas(operations: readonly OperationSnapshot[]): Array<[string, object]> {
  const out: Array<[string, object]> = [];
  for (const op of operations) {
    const label = `${op.method} ${op.path}`;
    out.push([`${label} path`, op.input_schema.path], [`${label} query`, op.input_schema.query]);
    out.push([`${label} headers`, op.input_schema.headers]);
    if (op.input_schema.body !== null) out.push([`${label} body`, op.input_schema.body]);
    if (op.response_schema !== null) out.push([`${label} response`, op.response_schema]);
  }
  return out;
}

/** Compiles every schema with ajv's 2020-12 class in the snapshot configuration. */
export function assertAllSchemasCompile(operations: readonly OperationSnapshot[]): number {
  const ajv = createSnapshotAjv();
  const schemas = snapshotSchemas(operations);
  for (const [label, schema] of schemas) {
    assert.doesNotThrow(() => ajv.compile(schema), label);
  }
  return schemas.length;
}
