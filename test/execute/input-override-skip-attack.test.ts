import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { enforceOperationInput } from "../../src/execute/input.ts";
import {
  ROUTING_OVERRIDE_HEADERS,
  ROUTING_OVERRIDE_PARAMETERS,
} from "../../src/execute/routing-overrides.ts";

/**
 * Attack on the routing-override scan skip: a query/headers section whose schema is
 * "closed" (additionalProperties false, no patternProperties) and names no override is not
 * scanned after validation. The oracle: the same schema with an empty `patternProperties` —
 * ajv validates it identically, but it is never "closed", so it is always scanned. For every
 * schema and instance the two must give the same verdict (and keyword), fresh or copied, and
 * an instance carrying an override name is never allowed.
 */
const rollout = { enabled: true, partnerAllowlisted: true };

function verdict(
  section: "query" | "headers",
  schema: unknown,
  args: Record<string, unknown>,
  fresh: boolean,
) {
  const operation = {
    method: "GET",
    input_schema: {
      path: { type: "object" },
      query: { type: "object" },
      headers: { type: "object" },
      body: null,
      [section]: schema,
    },
    parameter_constraints: [],
  };
  try {
    // JSON round trip: a fresh object with `__proto__` as a plain own key.
    enforceOperationInput(operation, { [section]: JSON.parse(JSON.stringify(args)) }, rollout, { fresh });
    return "allow";
  } catch (error) {
    const { code, details } = error as { code?: string; details?: { issues?: Array<{ keyword?: string }> } };
    return `${code}/${details?.issues?.[0]?.keyword ?? ""}`;
  }
}

/** The verdict, checked equal to the always-scanned twin's, fresh and copied. */
function checked(section: "query" | "headers", schema: unknown, args: Record<string, unknown>): string {
  const twin =
    typeof schema === "object" && schema !== null && !("patternProperties" in schema)
      ? { ...schema, patternProperties: {} }
      : schema;
  const fresh = verdict(section, schema, args, true);
  const label = JSON.stringify({ section, schema, args });
  assert.equal(verdict(section, schema, args, false), fresh, `${label}: fresh and copied disagree`);
  assert.equal(verdict(section, twin, args, true), fresh, `${label}: the skip changed the verdict`);
  return fresh;
}

const text = { type: "string" };
const nine = Object.fromEntries(["a", "b", "c", "d", "e", "f", "g", "h", "i"].map((k) => [k, text]));

/** Closed-looking schemas that might admit a name outside `properties`. */
const TRICKY: unknown[] = [
  {
    additionalProperties: false,
    properties: { a: text },
    $ref: "#/$defs/o",
    $defs: { o: { properties: { _method: text } } },
  },
  { additionalProperties: false, allOf: [{ properties: { _method: text, "x-http-method-override": text } }] },
  { additionalProperties: false, anyOf: [{ properties: { _method: text } }, {}] },
  { additionalProperties: false, oneOf: [{ patternProperties: { ".": {} } }] },
  // biome-ignore lint/suspicious/noThenProperty: JSON Schema's if/then/else, not a thenable
  { additionalProperties: false, if: {}, then: { properties: { _method: text } }, else: {} },
  { additionalProperties: false, unevaluatedProperties: true },
  { additionalProperties: false, dependentSchemas: { a: { properties: { _method: text } } } },
  { additionalProperties: false, propertyNames: { pattern: "." } },
  { additionalProperties: false, properties: { ...nine } },
  {
    additionalProperties: false,
    properties: JSON.parse(
      '{"__proto__":{"type":"string"},"a":{},"b":{},"c":{},"d":{},"e":{},"f":{},"g":{},"h":{},"i":{}}',
    ),
  },
  { additionalProperties: false, properties: { "_method ": text, " _method": text, "_method\u0000": text } },
  // Names that fold toward an override only under other case mappings (Kelvin sign, dotless and dotted i).
  {
    additionalProperties: false,
    properties: {
      "_\u0130ttpmethod": text,
      "_httpmethod\u212A": text,
      "x-orıginal-url": text,
      "X-ORİGİNAL-URL": text,
    },
  },
  { additionalProperties: false },
  { additionalProperties: false, properties: {} },
  {
    type: "object",
    additionalProperties: false,
    properties: { limit: { type: "integer" } },
    required: ["limit"],
  },
  // Not closed: scanned as before.
  { additionalProperties: true, properties: { a: text } },
  { additionalProperties: {}, properties: { a: text } },
  { properties: { a: text } },
  { additionalProperties: false, patternProperties: { "^_": {} } },
  true,
  false,
  {},
];

const INSTANCES: Array<Record<string, unknown>> = [
  ...[...ROUTING_OVERRIDE_PARAMETERS, ...ROUTING_OVERRIDE_HEADERS].flatMap((name) => [
    { [name]: "DELETE" },
    { [name.toUpperCase()]: "DELETE" },
    { a: "1", [name]: ["GET", "DELETE"] },
  ]),
  { _Method: "DELETE" },
  { "X-Http-Method-Override": "DELETE" },
  JSON.parse('{"__proto__":"x","_method":"DELETE"}'),
  JSON.parse('{"__proto__":{"_method":"DELETE"}}'),
  { constructor: "x", _method: "x" },
  { "_\u0130ttpmethod": "DELETE" },
  { "_httpmethod\u212A": "DELETE" },
  { "x-orıginal-url": "/admin" },
  { "X-ORİGİNAL-URL": "/admin" },
  { "_method ": "DELETE" },
  { a: "1" },
  { limit: "5" },
  {},
];

test("the skip gives every tricky schema the scanned twin's verdict; an override name is never allowed", () => {
  for (const section of ["query", "headers"] as const) {
    const names = section === "query" ? ROUTING_OVERRIDE_PARAMETERS : ROUTING_OVERRIDE_HEADERS;
    for (const schema of TRICKY) {
      for (const args of INSTANCES) {
        const result = checked(section, schema, args);
        if (Object.keys(args).some((name) => names.has(name.toLowerCase())))
          assert.notEqual(result, "allow", JSON.stringify({ section, schema, args }));
      }
    }
  }
});

test("a closed schema that names an override under another case is scanned and refuses it", () => {
  for (const name of ["_METHOD", "_HttpMethod", "X-HTTP-Method-Override", "X-Original-URL"]) {
    const section = name.startsWith("_") ? "query" : "headers";
    const schema = { type: "object", additionalProperties: false, properties: { [name]: text, a: text } };
    assert.equal(checked(section, schema, { [name]: "DELETE" }), "invalid_input/routingOverride", name);
    assert.equal(checked(section, schema, { a: "1" }), "allow", name);
  }
});

test("property: random closed/open schemas and instances — skip and scan agree", () => {
  const NAMES = [
    "_method",
    "_METHOD",
    "_httpMethod",
    "x-http-method-override",
    "X-Original-Url",
    "a",
    "limit",
    "__proto__",
    "constructor",
  ];
  const prop = fc.constantFrom<unknown>(
    text,
    { type: "integer" },
    { type: "array", items: text },
    {},
    true,
    false,
  );
  const schema = fc
    .record(
      {
        type: fc.constantFrom("object", undefined),
        properties: fc.option(fc.dictionary(fc.constantFrom(...NAMES), prop, { maxKeys: 4 }), {
          nil: undefined,
        }),
        additionalProperties: fc.constantFrom<unknown>(false, false, true, {}, undefined),
        required: fc.option(fc.subarray(NAMES, { maxLength: 2 }), { nil: undefined }),
        allOf: fc.option(fc.constant([{ properties: { _method: text } }]), { nil: undefined }),
      },
      { requiredKeys: [] },
    )
    .map((s) => JSON.parse(JSON.stringify(s)) as unknown);
  const instance = fc
    .dictionary(fc.constantFrom(...NAMES), fc.constantFrom<unknown>("1", "DELETE", ["1", "2"]), {
      maxKeys: 3,
    })
    .map((s) => JSON.parse(JSON.stringify(s)) as Record<string, unknown>);
  fc.assert(
    fc.property(
      fc.constantFrom("query" as const, "headers" as const),
      schema,
      instance,
      (section, s, args) => {
        checked(section, s, args);
      },
    ),
    { numRuns: 600 },
  );
});
