import assert from "node:assert/strict";
import { test } from "node:test";
import { enforceOperationInput } from "../../src/execute/input.ts";

/**
 * Attack tests on every path through the shared enforcement step: the parameter sections are
 * ordinary objects, so a validator that reads a declared name as `data.name` finds
 * Object.prototype's member when the caller sent none. Without ajv's `ownProperties`:
 *   - `required: ["constructor"]` is met by a request that sends no `constructor` at all;
 *   - an optional declared `constructor`/`toString` with a type refuses every request that
 *     leaves it out (invalid_input/type), as an imported OpenAPI query parameter does.
 * And ajv never applies a `__proto__` subschema: with more than 8 other properties (an own-key
 * lookup then admits the name) a `__proto__` parameter would pass with none of its keywords, so
 * a schema that declares one refuses the operation.
 * Signed parameter_constraints read own keys only and are not affected.
 */
const rollout = { enabled: true, partnerAllowlisted: true };

function verdict(query: object, args: Record<string, unknown>): string {
  const operation = {
    method: "GET",
    input_schema: { path: { type: "object" }, query, headers: { type: "object" }, body: null },
    parameter_constraints: [],
  };
  const run = (fresh: boolean): string => {
    try {
      enforceOperationInput(operation, { query: JSON.parse(JSON.stringify(args)) }, rollout, { fresh });
      return "allow";
    } catch (error) {
      const { code, details } = error as {
        code?: string;
        details?: { issues?: Array<{ keyword?: string }> };
      };
      return `${code}/${details?.issues?.[0]?.keyword ?? ""}`;
    }
  };
  const fresh = run(true);
  assert.equal(run(false), fresh, "fresh and copied agree");
  return fresh;
}

const MEMBERS = ["constructor", "toString", "hasOwnProperty", "valueOf", "isPrototypeOf"];

test("a required prototype-named query parameter is required: leaving it out is invalid_input", () => {
  for (const name of MEMBERS) {
    const schema = {
      type: "object",
      properties: { [name]: {}, limit: { type: "integer" } },
      required: [name],
    };
    assert.equal(verdict(schema, { [name]: "1" }), "allow", name);
    assert.equal(verdict(schema, { limit: "1" }), "invalid_input/required", `${name} absent`);
  }
});

test("an optional typed prototype-named query parameter may be left out", () => {
  for (const name of MEMBERS) {
    const schema = {
      type: "object",
      properties: { [name]: { type: "integer" }, limit: { type: "integer" } },
      additionalProperties: false,
    };
    assert.equal(verdict(schema, { [name]: "3" }), "allow", name);
    assert.equal(verdict(schema, { limit: "1" }), "allow", `${name} absent`);
  }
});

test("a schema declaring a `__proto__` property (which ajv never checks) refuses the operation", () => {
  const properties = JSON.parse(
    '{"__proto__":{"type":"integer","maximum":5},"a":{},"b":{},"c":{},"d":{},"e":{},"f":{},"g":{},"h":{},"i":{}}',
  );
  const schema = { type: "object", properties, additionalProperties: false };
  for (const value of ["3", "999", "not a number"])
    assert.equal(verdict(schema, JSON.parse(`{"__proto__":"${value}"}`)), "policy_verification_failed/");
  // At any depth, and in the body too: the upstream would get whatever the caller put there.
  const nested = JSON.parse(
    '{"type":"object","properties":{"a":{"type":"object","properties":{"__proto__":{"maximum":5}}}}}',
  );
  assert.equal(verdict(nested, {}), "policy_verification_failed/");
  const operation = { method: "POST", input_schema: { body: nested }, parameter_constraints: [] };
  assert.throws(
    () => enforceOperationInput(operation, { body: JSON.parse('{"a":{"__proto__":999}}') }, rollout),
    (error: unknown) => (error as { code?: string }).code === "policy_verification_failed",
  );
});
