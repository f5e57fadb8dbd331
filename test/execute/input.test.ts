import assert from "node:assert/strict";
import { describe, it, test } from "node:test";
import { ExecutionError } from "../../src/execute/errors.ts";
import { enforceOperationInput, validateInput } from "../../src/execute/input.ts";
import { itemSnapshot, orderSnapshot } from "./helpers.ts";

const item = itemSnapshot("https://api.example.com").input_schema;
const order = orderSnapshot("https://api.example.com").input_schema;

function failure(fn: () => unknown): ExecutionError {
  try {
    fn();
  } catch (error) {
    assert.ok(error instanceof ExecutionError);
    return error;
  }
  assert.fail("expected an ExecutionError");
}

describe("validateInput", () => {
  it("accepts valid arguments and coerces parameter strings, never the body", () => {
    const args = { path: { id: "a" }, query: { limit: "10", tags: "one" }, headers: { "x-trace-id": "t" } };
    const out = validateInput(item, args);
    assert.deepEqual(out.query, { limit: 10, tags: ["one"] });
    assert.deepEqual(args.query, { limit: "10", tags: "one" }, "the caller's object is not modified");
    assert.equal(out.hasBody, false);
    const body = validateInput(order, { body: { sku: "A-1", quantity: 2, email: "a@example.com" } });
    assert.deepEqual(body.body, { sku: "A-1", quantity: 2, email: "a@example.com" });
    const error = failure(() => validateInput(order, { body: { sku: "A-1", quantity: "2" } }));
    assert.equal(error.reason, "invalid_input");
  });

  it("reports a pointer and a keyword, never the offending value", () => {
    const secretish = "s3cr3t-VALUE-that-must-not-echo";
    const cases: [unknown, string, string, string][] = [
      [{ path: { id: "a" }, query: { limit: 1000 } }, "query", "/limit", "maximum"],
      [{ path: {} }, "path", "", "required"],
      [{ body: { sku: secretish, quantity: 1 } }, "body", "/sku", "pattern"],
      [{ body: { sku: "A", quantity: 1, email: secretish } }, "body", "/email", "format"],
      [{ body: { sku: "A", quantity: 1, [secretish]: 1 } }, "body", "", "additionalProperties"],
    ];
    for (const [args, location, pointer, keyword] of cases) {
      const schema = location === "body" ? order : item;
      const error = failure(() => validateInput(schema, args));
      assert.equal(error.reason, "invalid_input");
      assert.equal(error.code, "invalid_input");
      assert.equal(error.status, 400);
      const issues = error.details?.issues as { location: string; pointer: string; keyword: string }[];
      assert.deepEqual(
        { location: issues[0]?.location, pointer: issues[0]?.pointer, keyword: issues[0]?.keyword },
        { location, pointer, keyword },
      );
      const serialized = JSON.stringify(error.toJSON()) + error.message;
      assert.ok(!serialized.includes(secretish), "no value echoed");
      assert.ok(!serialized.includes("1000"), "no value echoed");
    }
  });

  it("refuses parts the operation does not take and malformed argument objects", () => {
    assert.equal(
      failure(() => validateInput(item, { path: { id: "a" }, body: { a: 1 } })).reason,
      "invalid_input",
    );
    assert.equal(
      failure(() => validateInput(order, { body: { sku: "A", quantity: 1 }, extra: 1 })).reason,
      "invalid_input",
    );
    assert.equal(failure(() => validateInput(order, { query: "x=1", body: {} })).reason, "invalid_input");
    assert.equal(failure(() => validateInput(order, null)).reason, "invalid_input");
    assert.equal(failure(() => validateInput(order, [1])).reason, "invalid_input");
    const noParams = { path: null, query: null, headers: null, body: null };
    assert.equal(failure(() => validateInput(noParams, { query: { a: 1 } })).reason, "invalid_input");
    assert.deepEqual(validateInput(noParams, {}).query, {});
  });

  it("compiles a schema once per content, whatever object carries it", () => {
    const copy = structuredClone(item);
    const first = validateInput(copy, { path: { id: "x" } });
    const second = validateInput(structuredClone(item), { path: { id: "x" } });
    assert.deepEqual(first, second);
  });

  it("treats an uncompilable schema as a bad snapshot, not bad input", () => {
    const broken = {
      ...item,
      query: { type: "object", properties: { a: { $ref: "https://elsewhere.example/x" } } },
    };
    assert.equal(
      failure(() => validateInput(broken, { path: { id: "a" } })).reason,
      "invalid_operation_snapshot",
    );
  });

  it("holds every section's schema, the body's too, to the JSON Schema meta-schema before compiling it", () => {
    // Not JSON Schema (a length is never negative), yet a compiler that skips the meta-schema
    // compiles it, into a rule that checks nothing: the operation is unusable (fail closed).
    const wrong = { type: "object", properties: { note: { type: "string", minLength: -1 } } };
    for (const section of ["query", "body"] as const) {
      const schema = { ...order, ...(section === "query" ? { query: wrong } : { body: wrong }) };
      const args = section === "query" ? { query: { note: "x" } } : { body: { note: "x" } };
      const error = failure(() => validateInput(schema, args));
      assert.equal(error.reason, "invalid_operation_snapshot", section);
    }
  });

  it("a stored pattern the linear-time engine cannot run makes the snapshot unusable, whatever the value", () => {
    for (const pattern of ["^(a)\\1$", "^(?!admin)", "(?<=x)y"]) {
      const stored = {
        ...item,
        query: { type: "object", patternProperties: { "^f_": { type: "string", pattern } } },
      };
      const error = failure(() => validateInput(stored, { path: { id: "a" }, query: { f_x: "aa" } }));
      assert.equal(error.reason, "invalid_operation_snapshot", pattern);
      assert.equal(error.details?.issue, "input_schema_pattern_unsupported", pattern);
    }
  });

  it("patterns and patternProperties run in linear time: a catastrophic pair answers at once", () => {
    const hostile = {
      ...item,
      query: {
        type: "object",
        patternProperties: { "^(f+)+$": { type: "string", pattern: "^(a|a)*$" } },
        additionalProperties: false,
      },
      body: { type: "object", properties: { note: { type: "string", pattern: "^(\\w+\\s?)*$" } } },
    };
    const long = `${"a".repeat(50_000)}!`;
    for (const args of [
      { path: { id: "a" }, query: { [`${"f".repeat(4_000)}!`]: "x" } },
      { path: { id: "a" }, query: { f: long } },
      { path: { id: "a" }, body: { note: `${"ab ".repeat(20_000)}!` } },
    ]) {
      assert.equal(failure(() => validateInput(hostile, args)).reason, "invalid_input");
    }
  });

  it("accepts schemas with an $id more than once", () => {
    const withId = { ...item, body: { $id: "https://schemas.example/body", type: "object" } };
    validateInput(withId, { path: { id: "a" }, body: {} });
    validateInput(structuredClone(withId), { path: { id: "a" }, body: {} });
  });
});

test("enforceOperationInput: routing overrides are refused even when a snapshot declares them", () => {
  const open = { type: "object" } as const;
  const operation = {
    method: "POST",
    input_schema: { path: open, query: open, headers: open, body: open },
    parameter_constraints: [],
  };
  const rollout = { enabled: false, partnerAllowlisted: false };
  for (const args of [
    { query: { _method: "DELETE" } },
    { query: { _Method: "DELETE" } },
    { headers: { "X-HTTP-Method-Override": "DELETE" } },
    { headers: { "x-original-url": "/admin" } },
    { body: { _method: "DELETE" } },
  ]) {
    assert.throws(
      () => enforceOperationInput(operation, args, rollout),
      (error: unknown) => error instanceof ExecutionError && error.code === "invalid_input",
      JSON.stringify(args),
    );
  }
  assert.equal(enforceOperationInput(operation, { body: { method: "x" } }, rollout).hasBody, true);
});

test("enforceOperationInput: a closed schema that names an override (any case, or by pattern) is still scanned", () => {
  const closed = (properties: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
    type: "object",
    properties,
    additionalProperties: false,
    ...extra,
  });
  const text = { type: "string" };
  const rollout = { enabled: false, partnerAllowlisted: false };
  const cases: Array<[Record<string, unknown>, Record<string, unknown>, string]> = [
    [{ query: closed({ _Method: text }) }, { query: { _Method: "DELETE" } }, "routingOverride"],
    [
      { query: closed({}, { patternProperties: { "^_": text } }) },
      { query: { _method: "DELETE" } },
      "routingOverride",
    ],
    [
      { query: closed({ _method: text }, { allOf: [{}] }) },
      { query: { _method: "DELETE" } },
      "routingOverride",
    ],
    [
      { headers: closed({ "X-HTTP-Method-Override": text }) },
      { headers: { "X-HTTP-Method-Override": "DELETE" } },
      "routingOverride",
    ],
    // Not named: the schema itself refuses the name first.
    [{ query: closed({ limit: text }) }, { query: { _method: "DELETE" } }, "additionalProperties"],
    [
      { headers: closed({ "x-tenant": text }) },
      { headers: { "x-original-url": "/admin" } },
      "additionalProperties",
    ],
  ];
  for (const [input_schema, args, keyword] of cases) {
    const operation = { method: "GET", input_schema, parameter_constraints: [] };
    for (const fresh of [false, true]) {
      const error = failure(() =>
        enforceOperationInput(operation, structuredClone(args), rollout, { fresh }),
      );
      assert.equal(error.code, "invalid_input");
      assert.match(error.message, new RegExp(keyword), JSON.stringify({ input_schema, args, fresh }));
    }
  }
});

test("enforceOperationInput: constraints with the rollout gate, after the schema", () => {
  const operation = {
    method: "GET",
    input_schema: { query: { type: "object", properties: { limit: { type: "integer" } } } },
    parameter_constraints: [{ in: "query", name: "limit", maximum: 5 }],
  };
  const on = { enabled: true, partnerAllowlisted: true };
  const code = (args: unknown, rollout = on) => {
    try {
      enforceOperationInput(operation, args, rollout);
      return "ok";
    } catch (error) {
      return error instanceof ExecutionError ? error.reason : "other";
    }
  };
  assert.equal(code({ query: { limit: "5" } }), "ok");
  assert.equal(code({ query: { limit: "6" } }), "constraint_violation");
  assert.equal(code({ query: { limit: "x" } }), "invalid_input");
  assert.equal(
    code({ query: { limit: "1" } }, { enabled: true, partnerAllowlisted: false }),
    "constraint_rollout_disabled",
  );
  assert.equal(code({ body: {} }), "invalid_input");
});

test("a parameter with a lone surrogate is invalid_input with the schema, before any constraint", () => {
  const operation = {
    method: "GET",
    input_schema: {
      path: { type: "object", properties: { id: { type: "string" } } },
      query: { type: "object", properties: { limit: { type: "integer" }, q: { type: "string" } } },
      headers: { type: "object", properties: { "x-tenant": { type: "string" } } },
    },
    parameter_constraints: [{ in: "query", name: "limit", maximum: 5 }],
  };
  const on = { enabled: true, partnerAllowlisted: true };
  for (const args of [
    { path: { id: "a\ud800" }, query: { limit: "9" } },
    { query: { limit: "9", q: ["ok", "\udc00b"] } },
    { headers: { "x-tenant": "\ud800" }, query: { limit: "9" } },
  ]) {
    const error = failure(() => enforceOperationInput(operation, args, on));
    assert.equal(error.reason, "invalid_input", JSON.stringify(args));
    assert.equal(failure(() => validateInput(operation.input_schema, args)).reason, "invalid_input");
  }
  assert.doesNotThrow(() => validateInput(operation.input_schema, { path: { id: "日本😀" } }));
});

test("validateInput copies parameters: the caller's objects are not coerced, __proto__ stays a plain key", () => {
  const schema = { query: { type: "object", properties: { n: { type: "integer" }, l: { type: "array" } } } };
  const query = JSON.parse('{"n":"5","l":"x","__proto__":"p"}') as Record<string, unknown>;
  const validated = validateInput(schema, { query });
  assert.equal(validated.query.n, 5);
  assert.deepEqual(validated.query.l, ["x"]);
  assert.equal(query.n, "5");
  assert.equal(query.l, "x");
  assert.equal(Object.getOwnPropertyDescriptor(validated.query, "__proto__")?.value, "p");
  assert.equal(Object.getPrototypeOf(validated.query), Object.prototype);
});
