import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import type { OperationSnapshot } from "../../../src/core/operation-snapshot.ts";
import { enforceOperationInput } from "../../../src/execute/input.ts";
import { operationArguments } from "../../../src/pipeline/request-arguments.ts";
import { headersToRemove } from "../../../src/servers/sidecar/request-input.ts";
import { snapshot } from "../../core/fixtures.ts";

/**
 * Attack on the sidecar's input step: ordinary objects (setOwn/ownValue), the direct
 * query split, and validation in place (`fresh`). For prototype-named and ordinary
 * parameters under schema keywords (type, required, maximum, pattern, enum) and signed
 * constraints, the sidecar's verdict AND its validated arguments must equal the copying
 * form's and the percent-encoded twin's (URLSearchParams path); coercing in place must leave
 * nothing shared (decision params, the header bag, the snapshot) changed for a later request.
 */
const rollout = { enabled: true, partnerAllowlisted: true };
const PROTO = ["__proto__", "constructor", "toString", "hasOwnProperty", "valueOf"];
const NAMES = [...PROTO, "limit", "x-tenant"];

/** Own keys only, `__proto__` spelled out, the prototype named: a faithful picture of a section. */
function picture(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(picture);
  if (typeof value !== "object" || value === null) return value;
  const proto = Object.getPrototypeOf(value);
  const out: Record<string, unknown> = { "<proto>": proto === Object.prototype ? "Object" : String(proto) };
  for (const key of Object.keys(value)) out[`.${key}`] = picture((value as Record<string, unknown>)[key]);
  return out;
}

type Headers = Record<string, string | string[]>;

function outcome(operation: OperationSnapshot, path: string, headers: Headers, fresh: boolean): string {
  try {
    const args = operationArguments(operation, { id: "7" }, path, headers, undefined);
    const input = enforceOperationInput(operation, args, rollout, { fresh });
    return `allow ${JSON.stringify(picture({ path: input.path, query: input.query, headers: input.headers }))}`;
  } catch (error) {
    const { code, details } = error as { code?: string; details?: { issues?: Array<{ keyword?: string }> } };
    return `${code ?? "thrown"}/${details?.issues?.[0]?.keyword ?? ""}`;
  }
}

function encodeAll(text: string): string {
  return [...Buffer.from(text)].map((b) => `%${b.toString(16).toUpperCase().padStart(2, "0")}`).join("");
}

/** The sidecar's result, checked equal to the copying form's and to the all-encoded twin's. */
function sidecar(
  operation: OperationSnapshot,
  query: Array<[string, string | undefined]>,
  headers: Headers = {},
) {
  const plain = `/items/7?${query.map(([n, v]) => (v === undefined ? n : `${n}=${v}`)).join("&")}`;
  const encoded = `/items/7?${query.map(([n, v]) => (v === undefined ? encodeAll(n) : `${encodeAll(n)}=${encodeAll(v)}`)).join("&")}`;
  const result = outcome(operation, plain, headers, true);
  assert.equal(outcome(operation, plain, headers, false), result, `${plain}: fresh and copied disagree`);
  assert.equal(outcome(operation, encoded, headers, true), result, `${plain}: the encoded twin disagrees`);
  return result;
}

function operationWith(
  query: Record<string, unknown>,
  headers: Record<string, unknown> = { type: "object" },
  parameter_constraints: unknown[] = [],
): OperationSnapshot {
  return snapshot("GET", "/items/{id}", {
    input_schema: {
      path: { type: "object", properties: { id: { type: "integer" } }, required: ["id"] },
      query,
      headers,
      body: null,
    },
    parameter_constraints,
  } as Partial<OperationSnapshot>);
}

test("prototype-named query parameters under schema keywords: fresh = copied = encoded twin", () => {
  for (const name of NAMES) {
    const schemas: Array<Record<string, unknown>> = [
      { type: "object", properties: { [name]: { type: "integer", maximum: 5 } } },
      { type: "object", properties: { [name]: { type: "array", items: { type: "integer", maximum: 5 } } } },
      { type: "object", properties: { [name]: { type: "string", pattern: "^[0-4]+$" } }, required: [name] },
      { type: "object", properties: { [name]: { enum: ["1", "2"] } }, additionalProperties: false },
      { type: "object", additionalProperties: { type: "integer", maximum: 5 } },
    ];
    for (const schema of schemas) {
      const operation = operationWith(schema, { type: "object" }, [
        { in: "query", name, maximum: 5, required: true },
      ]);
      for (const query of [
        [],
        [[name, "3"]],
        [[name, "9"]],
        [[name, undefined]],
        [[name, ""]],
        [
          [name, "3"],
          [name, "9"],
        ],
        [
          [name, "3"],
          [name, "4"],
        ],
        [[name, "05"]],
        [["other", "1"]],
      ] as Array<Array<[string, string | undefined]>>) {
        const result = sidecar(operation, query);
        // Object.prototype's member is never the caller's value: absent stays absent.
        if (query.length === 0)
          assert.notEqual(result.slice(0, 5), "allow", `${name} ${JSON.stringify(schema)}`);
        if (query.some(([, v]) => v === "9")) assert.notEqual(result.slice(0, 5), "allow", `${name} 9`);
      }
    }
  }
});

test("declared prototype-named headers: fresh = copied, repeated values joined, constraint holds", () => {
  for (const name of NAMES) {
    const operation = operationWith(
      { type: "object" },
      { type: "object", properties: { [name]: { type: "integer", maximum: 5 } } },
      [{ in: "header", name, maximum: 5 }],
    );
    for (const headers of [
      {},
      { [name]: "3" },
      { [name]: "9" },
      { [name]: ["3", "4"] },
      { [name.toUpperCase()]: "9" },
    ] as Headers[]) {
      const result = sidecar(operation, [], headers);
      const values = Object.values(headers).flat();
      if (values.includes("9"))
        assert.notEqual(result.slice(0, 5), "allow", `${name}: ${JSON.stringify(headers)}`);
      if (values.length === 2) assert.notEqual(result.slice(0, 5), "allow", "3, 4 is no integer");
    }
  }
});

test("coercion differences: integer vs array-typed limit, empty, repeated", () => {
  const integer = operationWith({ type: "object", properties: { limit: { type: "integer" } } });
  const array = operationWith({
    type: "object",
    properties: { limit: { type: "array", items: { type: "integer" } } },
  });
  const cases: Array<[OperationSnapshot, Array<[string, string | undefined]>, string]> = [
    [
      integer,
      [["limit", "5"]],
      'allow {"<proto>":"Object",".path":{"<proto>":"Object",".id":7},".query":{"<proto>":"Object",".limit":5},".headers":{"<proto>":"Object"}}',
    ],
    [integer, [["limit", ""]], "invalid_input/type"],
    [integer, [["limit", undefined]], "invalid_input/type"],
    [
      integer,
      [
        ["limit", "1"],
        ["limit", "2"],
      ],
      "invalid_input/type",
    ],
    [
      array,
      [["limit", "5"]],
      'allow {"<proto>":"Object",".path":{"<proto>":"Object",".id":7},".query":{"<proto>":"Object",".limit":[5]},".headers":{"<proto>":"Object"}}',
    ],
    [
      array,
      [
        ["limit", "1"],
        ["limit", "2"],
      ],
      'allow {"<proto>":"Object",".path":{"<proto>":"Object",".id":7},".query":{"<proto>":"Object",".limit":[1,2]},".headers":{"<proto>":"Object"}}',
    ],
    [array, [["limit", ""]], "invalid_input/type"],
  ];
  for (const [operation, query, expected] of cases)
    assert.equal(sidecar(operation, query), expected, JSON.stringify(query));
});

test("in-place coercion leaves the decision's params, the header bag and the snapshot as they were", () => {
  const operation = operationWith(
    { type: "object", properties: { limit: { type: "array", items: { type: "integer" } } } },
    { type: "object", properties: { "x-n": { type: "integer" } } },
    [{ in: "query", name: "limit", maximum: 5 }],
  );
  const before = JSON.stringify(operation);
  const params = Object.freeze({ id: "7" });
  const headers: Headers = Object.freeze({ "x-n": "4", "X-HTTP-Method-Override": "DELETE", cookie: "c" });
  const bagBefore = JSON.stringify(headers);
  const allowed = (path: string, bag: Headers) => {
    const args = operationArguments(operation, params, path, bag, undefined);
    return enforceOperationInput(operation, args, rollout, { fresh: true });
  };
  // An override header is refused, and removed from what goes upstream, before and after.
  assert.throws(() => allowed("/items/7?limit=1", headers), /routingOverride|additionalProperties/);
  const clean: Headers = Object.freeze({ "x-n": "4", accept: "*/*", "x-other": "1" });
  for (let round = 0; round < 3; round++) {
    const input = allowed("/items/7?limit=1&limit=2", clean);
    assert.deepEqual(input.query, { limit: [1, 2] });
    assert.deepEqual(input.headers, { "x-n": 4 });
    assert.deepEqual(input.path, { id: 7 });
    assert.deepEqual(params, { id: "7" }, "the decision's params are not coerced");
    assert.deepEqual(headersToRemove(clean, new Set(["x-n"]), {}), ["x-other"]);
    assert.throws(() => allowed("/items/7?limit=9", clean), /maximum|limit/);
  }
  assert.equal(JSON.stringify(headers), bagBefore);
  assert.equal(JSON.stringify(operation), before, "the snapshot is not touched");
});

test("property: random prototype-named queries under a random schema — fresh = copied = encoded twin", () => {
  const propSchema = fc.constantFrom<unknown>(
    { type: "integer", maximum: 5 },
    { type: "array", items: { type: "integer" } },
    { type: "string", pattern: "^[0-4]*$" },
    { enum: ["1", 2] },
    {},
  );
  const schema = fc
    .record(
      {
        properties: fc.dictionary(fc.constantFrom(...NAMES), propSchema, { maxKeys: 3 }),
        required: fc.subarray(NAMES, { maxLength: 2 }),
        additionalProperties: fc.constantFrom<unknown>(false, true, { type: "integer" }),
      },
      { requiredKeys: ["properties"] },
    )
    .map((s) => JSON.parse(JSON.stringify({ type: "object", ...s })) as Record<string, unknown>);
  const part = fc.tuple(
    fc.constantFrom(...NAMES, "_method", "x"),
    fc.option(fc.constantFrom("", "1", "9", "05", "a", "1 2", "é"), { nil: undefined }),
  );
  const constraint = fc.record({
    in: fc.constant("query"),
    name: fc.constantFrom(...NAMES),
    maximum: fc.constant(5),
    required: fc.boolean(),
  });
  fc.assert(
    fc.property(
      schema,
      fc.array(part, { maxLength: 5 }),
      fc.array(constraint, { maxLength: 2 }),
      (s, query, constraints) => {
        sidecar(operationWith(s, { type: "object" }, constraints), query);
      },
    ),
    { numRuns: 800 },
  );
});
