/**
 * The input validator compiles with ajv's `code.optimize: false` (decision 3081): a cheaper
 * compile, the same validation. Held here against a reference compiler with ajv's default
 * (optimized) code and the same options, on random values for schemas that use what a partner's
 * schema may (formats, patterns, additionalProperties, unevaluatedProperties, if/then, $ref,
 * oneOf, coercion): the same verdict, the same first error, the same coerced values.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Ajv2020 } from "ajv/dist/2020.js";
import formatsPlugin from "ajv-formats";
import fc from "fast-check";
import { linearRegExp } from "../../src/core/linear-pattern.ts";
import { ExecutionError } from "../../src/execute/errors.ts";
import { validateInput } from "../../src/execute/input.ts";

function reference(coerce: boolean): Ajv2020 {
  const ajv = new Ajv2020({
    strict: false,
    ownProperties: true,
    allErrors: false,
    coerceTypes: coerce ? "array" : false,
    useDefaults: false,
    removeAdditional: false,
    code: { regExp: linearRegExp },
  });
  formatsPlugin.default(ajv);
  return ajv;
}

const schemas: readonly object[] = [
  {
    type: "object",
    properties: {
      email: { type: "string", format: "email" },
      when: { type: "string", format: "date-time" },
      id: { type: "string", format: "uuid" },
      code: { type: "string", pattern: "^[A-Z]{2}[0-9]{1,3}$", maxLength: 5 },
    },
    required: ["code"],
    additionalProperties: false,
  },
  {
    type: "object",
    properties: { kind: { enum: ["a", "b"] }, n: { type: "integer", minimum: 0, maximum: 9 } },
    if: { properties: { kind: { const: "a" } } },
    // biome-ignore lint/suspicious/noThenProperty: JSON Schema's if/then/else, not a thenable
    then: { required: ["n"] },
    unevaluatedProperties: false,
  },
  {
    $defs: { item: { type: "object", properties: { x: { type: "number" } }, additionalProperties: false } },
    type: "array",
    items: { oneOf: [{ $ref: "#/$defs/item" }, { type: "string", format: "ipv4" }] },
    maxItems: 4,
  },
  {
    type: "object",
    patternProperties: { "^x-": { type: "string" } },
    properties: { limit: { type: "integer" }, tags: { type: "array", items: { type: "string" } } },
    additionalProperties: { type: "boolean" },
  },
];

const leaf = fc.oneof(
  fc.constantFrom("a", "b", "AB12", "ab1", "x@example.com", "2026-11-29T16:00:00Z", "10.0.0.1", "7", "true"),
  fc.constantFrom("123e4567-e89b-12d3-a456-426614174000", "not-a-date", "999.1.1.1", ""),
  fc.string({ maxLength: 6 }),
  fc.integer({ min: -3, max: 12 }),
  fc.double({ noNaN: true, min: -2, max: 2 }),
  fc.boolean(),
  fc.constant(null),
);
const key = fc.constantFrom("email", "when", "id", "code", "kind", "n", "x", "x-a", "limit", "tags", "other");
const anything = fc.letrec((tie) => ({
  any: fc.oneof({ depthSize: "small" }, leaf, tie("object"), tie("array")),
  object: fc.dictionary(key, tie("any"), { maxKeys: 5 }),
  array: fc.array(tie("any"), { maxLength: 5 }),
})).any;
/** Values close to the first two schemas, which random ones would almost never pass. */
const nearly = fc.oneof(
  fc.record(
    {
      code: fc.constantFrom("AB12", "ab1", "AB1234", "XY9"),
      email: fc.constantFrom("x@example.com", "x@"),
      when: fc.constantFrom("2026-11-29T16:00:00Z", "2026-13-29T16:00:00Z"),
      id: fc.constantFrom("123e4567-e89b-12d3-a456-426614174000", "123e4567"),
    },
    { requiredKeys: ["code"] },
  ),
  fc.record(
    { kind: fc.constantFrom("a", "b", "c"), n: fc.integer({ min: -1, max: 10 }) },
    { requiredKeys: [] },
  ),
);
const value = fc.oneof(anything, nearly);

type Outcome = { ok: true; value: unknown } | { ok: false; pointer: string; keyword: string };

function ours(section: "body" | "query", schema: object, input: unknown): Outcome {
  try {
    const validated = validateInput({ [section]: schema }, { [section]: structuredClone(input) });
    return { ok: true, value: validated[section] };
  } catch (error) {
    if (!(error instanceof ExecutionError)) throw error;
    const [issue] = (error.details as { issues: Array<{ pointer: string; keyword: string }> }).issues;
    return { ok: false, pointer: issue?.pointer ?? "", keyword: issue?.keyword ?? "" };
  }
}

function theirs(ajv: Ajv2020, schema: object, input: unknown): Outcome {
  const validate = ajv.compile(schema);
  const data = structuredClone(input);
  if (validate(data)) return { ok: true, value: data };
  const [error] = validate.errors ?? [];
  return { ok: false, pointer: error?.instancePath ?? "", keyword: error?.keyword ?? "" };
}

describe("input validation without ajv's code optimization", () => {
  const body = reference(false);
  const query = reference(true);
  it("agrees with the optimized compile: verdict, first error, coerced values", () => {
    const verdicts = schemas.map(() => new Set<boolean>());
    fc.assert(
      fc.property(fc.nat(schemas.length - 1), value, (index, input) => {
        const schema = schemas[index] as object;
        const outcome = ours("body", schema, input);
        assert.deepEqual(outcome, theirs(body, schema, input));
        verdicts[index]?.add(outcome.ok);
        // Query parameters are an object of strings coerced by the schema.
        if (index !== 2 && typeof input === "object" && input !== null && !Array.isArray(input)) {
          const strings = Object.fromEntries(
            Object.entries(input).map(([k, v]) => [
              k,
              typeof v === "object" && v !== null ? JSON.stringify(v) : String(v),
            ]),
          );
          assert.deepEqual(ours("query", schema, strings), theirs(query, schema, strings));
        }
      }),
      { numRuns: 400 },
    );
    // Not vacuous: every schema both passed and refused some values.
    assert.deepEqual(
      verdicts.map((seen) => seen.size),
      schemas.map(() => 2),
    );
  });
});
