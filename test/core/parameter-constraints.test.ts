import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  type ConstraintArguments,
  type ConstraintResult,
  checkConstraintMetadata,
  evaluateConstraints,
  MAX_PATTERN_INPUT_LENGTH,
} from "../../src/core/parameter-constraints.ts";

const on = { enabled: true, partnerAllowlisted: true };

const run = (constraints: readonly unknown[], args: ConstraintArguments = {}): ConstraintResult =>
  evaluateConstraints(constraints, args, on);

function assertFails(result: ConstraintResult, code: string, includes?: string): void {
  assert.equal(result.ok, false);
  assert.ok(!result.ok);
  assert.equal(result.code, code);
  if (includes !== undefined) assert.ok(result.message.includes(includes), result.message);
}

describe("evaluateConstraints: rollout", () => {
  it("no constraints is ok whatever the rollout", () => {
    assert.deepEqual(evaluateConstraints([], {}, { enabled: false, partnerAllowlisted: false }), {
      ok: true,
    });
  });

  it("constraints outside the rollout fail closed", () => {
    const constraints = [{ in: "query", name: "limit", maximum: 10 }];
    assertFails(
      evaluateConstraints(constraints, {}, { enabled: false, partnerAllowlisted: true }),
      "constraint_rollout_disabled",
    );
    assertFails(
      evaluateConstraints(constraints, {}, { enabled: true, partnerAllowlisted: false }),
      "constraint_rollout_disabled",
    );
    assert.deepEqual(evaluateConstraints(constraints, {}, on), { ok: true });
  });
});

describe("evaluateConstraints: values", () => {
  it("required values must be present in their location", () => {
    const constraints = [{ in: "path", name: "id", required: true }];
    assert.deepEqual(run(constraints, { path: { id: "7" } }), { ok: true });
    assertFails(run(constraints, { query: { id: "7" } }), "constraint_violation", "required");
    assertFails(run(constraints, {}), "constraint_violation");
    assertFails(
      run([{ in: "query", name: "tag", required: true }], { query: { tag: [] } }),
      "constraint_violation",
    );
    assertFails(
      run([{ in: "query", name: "toString", required: true }], { query: {} }),
      "constraint_violation",
    );
  });

  it("optional absent values pass", () => {
    assert.deepEqual(run([{ in: "query", name: "limit", maximum: 10 }], { query: {} }), { ok: true });
  });

  it("allowed values match exactly; string arguments may spell numbers and booleans", () => {
    const constraints = [{ in: "query", name: "region", allowed_values: ["eu", "us", 1, true] }];
    for (const region of ["eu", "us", "1", "true", 1, true]) {
      assert.deepEqual(run(constraints, { query: { region } }), { ok: true }, String(region));
    }
    for (const region of ["EU", "ap", " eu", "1.0", "01", false, null]) {
      assertFails(run(constraints, { query: { region } }), "constraint_violation", "not allowed");
    }
  });

  it("excluded values match broadly so they cannot be slipped past", () => {
    const constraints = [{ in: "query", name: "limit", excluded_values: [0, "all"] }];
    for (const limit of [0, "0", "0.0", " 0", "-0", "0e5", "all"]) {
      assertFails(run(constraints, { query: { limit } }), "constraint_violation", "excluded");
    }
    assert.deepEqual(run(constraints, { query: { limit: "5" } }), { ok: true });
    assertFails(
      run([{ in: "body", name: "/n", excluded_values: ["5"] }], { body: { n: 5 } }),
      "constraint_violation",
    );
  });

  it("patterns match the whole value", () => {
    const constraints = [{ in: "path", name: "id", pattern: "[0-9]+" }];
    assert.deepEqual(run(constraints, { path: { id: "123" } }), { ok: true });
    assertFails(run(constraints, { path: { id: "123abc" } }), "constraint_violation", "pattern");
    assertFails(run(constraints, { path: { id: "abc123" } }), "constraint_violation", "pattern");
    assertFails(
      run(constraints, { path: { id: "1".repeat(MAX_PATTERN_INPUT_LENGTH + 1) } }),
      "constraint_violation",
    );
  });

  it("max_length counts characters", () => {
    const constraints = [{ in: "header", name: "X-Note", max_length: 3 }];
    assert.deepEqual(run(constraints, { headers: { "x-note": "😀😀😀" } }), { ok: true });
    assertFails(run(constraints, { headers: { "x-note": "abcd" } }), "constraint_violation", "too long");
  });

  it("minimum and maximum read numbers strictly", () => {
    const constraints = [{ in: "query", name: "limit", minimum: 1, maximum: 100 }];
    for (const limit of [1, "1", "100", "5.5", "1e2"])
      assert.deepEqual(run(constraints, { query: { limit } }), { ok: true });
    for (const limit of [0, "101", "0x10", "", " 5", "NaN", "Infinity", true, null, Number.NaN]) {
      assertFails(run(constraints, { query: { limit } }), "constraint_violation");
    }
  });

  it("headers are found case-insensitively and every spelling must pass", () => {
    const constraints = [{ in: "header", name: "X-Tenant", allowed_values: ["t1"] }];
    assert.deepEqual(run(constraints, { headers: { "x-tenant": "t1" } }), { ok: true });
    assertFails(
      run(constraints, { headers: { "X-Tenant": "t1", "x-tenant": "t2" } }),
      "constraint_violation",
    );
    assertFails(run(constraints, { headers: { "x-tenant": ["t1", "t2"] } }), "constraint_violation");
  });

  it("repeated values and JSON arrays are checked element by element", () => {
    const constraints = [{ in: "query", name: "tag", allowed_values: ["a", "b"] }];
    assert.deepEqual(run(constraints, { query: { tag: ["a", "b"] } }), { ok: true });
    assertFails(run(constraints, { query: { tag: ["a", "c"] } }), "constraint_violation");
    assertFails(run(constraints, { query: { tag: [["a"]] } }), "constraint_violation", "scalar");
  });

  it("body constraints address values by JSON pointer", () => {
    const constraints = [
      { in: "body", name: "/transfer/amount", required: true, maximum: 1000 },
      { in: "body", name: "/items/0/sku", pattern: "SKU-[0-9]{4}" },
      { in: "body", name: "/a~1b", allowed_values: ["x"] },
    ];
    assert.deepEqual(
      run(constraints, { body: { transfer: { amount: 500 }, items: [{ sku: "SKU-0001" }], "a/b": "x" } }),
      { ok: true },
    );
    assertFails(
      run(constraints, { body: { transfer: { amount: 5000 } } }),
      "constraint_violation",
      "maximum",
    );
    assertFails(run(constraints, { body: { transfer: {} } }), "constraint_violation", "required");
    assertFails(run(constraints, { body: { transfer: { amount: { $gt: 0 } } } }), "constraint_violation");
    assertFails(run(constraints, { body: "raw" }), "constraint_violation", "required");
    assertFails(
      run(constraints, { body: { transfer: { amount: 1 }, items: [{ sku: "nope" }] } }),
      "constraint_violation",
      "pattern",
    );
  });

  it("messages name the parameter, never the value", () => {
    const result = run([{ in: "query", name: "q", allowed_values: ["x"] }], {
      query: { q: "top-secret-value" },
    });
    assert.ok(!result.ok);
    assert.ok(!result.message.includes("top-secret-value"));
    assert.ok(result.message.includes('"q"'));
  });
});

describe("evaluateConstraints: metadata", () => {
  const invalid: Array<[string, unknown]> = [
    ["unknown location", { in: "cookie", name: "a" }],
    ["missing name", { in: "query" }],
    ["unknown key", { in: "query", name: "a", relax: true }],
    ["not an object", "query:a"],
    ["bad regex", { in: "query", name: "a", pattern: "[a-" }],
    ["backreference", { in: "query", name: "a", pattern: "(a)\\1" }],
    ["named backreference", { in: "query", name: "a", pattern: "(?<n>a)\\k<n>" }],
    ["lookahead", { in: "query", name: "a", pattern: "(?!admin)[a-z]+" }],
    ["lookbehind", { in: "query", name: "a", pattern: "(?<=x)a" }],
    ["valid only once wrapped in the anchors", { in: "query", name: "a", pattern: "a)|(b" }],
    ["repeat count above 1000", { in: "query", name: "a", pattern: "(a{1,100}){1,100}" }],
    ["overlong pattern", { in: "query", name: "a", pattern: "a".repeat(300) }],
    ["min above max", { in: "query", name: "a", minimum: 5, maximum: 1 }],
    ["allowed and excluded", { in: "query", name: "a", allowed_values: ["x"], excluded_values: ["x"] }],
    ["empty allowed list", { in: "query", name: "a", allowed_values: [] }],
    ["body name not a pointer", { in: "body", name: "amount" }],
    ["bad pointer escape", { in: "body", name: "/a~2" }],
    ["negative max_length", { in: "query", name: "a", max_length: -1 }],
    ["object allowed value", { in: "query", name: "a", allowed_values: [{}] }],
  ];
  for (const [label, constraint] of invalid) {
    it(`fails closed: ${label}`, () => {
      assertFails(run([constraint], { query: { a: "x" } }), "constraint_metadata_invalid");
      assertFails(checkConstraintMetadata([constraint]), "constraint_metadata_invalid");
    });
  }

  it("one bad constraint fails the whole evaluation, even if the argument is absent", () => {
    assertFails(
      run([
        { in: "query", name: "ok" },
        { in: "query", name: "b", pattern: "(x)\\1" },
      ]),
      "constraint_metadata_invalid",
    );
  });

  it("accepts good metadata", () => {
    assert.deepEqual(
      checkConstraintMetadata([
        { in: "query", name: "limit", minimum: 1, maximum: 100, required: false },
        { in: "path", name: "id", pattern: "[a-z0-9-]{1,36}", max_length: 36 },
        { in: "body", name: "/to/iban", excluded_values: ["DE00"], allowed_values: ["FR76"] },
      ]),
      { ok: true },
    );
  });
});

describe("evaluateConstraints: patterns run in linear time", () => {
  it("accepts the nested repeats a backtracking engine chokes on, and still means them", () => {
    for (const pattern of [
      "(a+)+",
      "(a|a)*",
      "(\\w+\\s?)*",
      "(a{1,10}){1,10}b",
      "(([a-z])+.)+[A-Z]([a-z])+",
    ]) {
      assert.deepEqual(checkConstraintMetadata([{ in: "query", name: "q", pattern }]), { ok: true }, pattern);
    }
    const constraints = [{ in: "query", name: "q", pattern: "(a+)+" }];
    assert.deepEqual(run(constraints, { query: { q: "aaaa" } }), { ok: true });
    const hostile = `${"a".repeat(MAX_PATTERN_INPUT_LENGTH - 1)}!`;
    assertFails(
      run(constraints, { query: { q: hostile } }),
      "constraint_violation",
      "does not match the pattern",
    );
  });

  it("names why a pattern cannot be used", () => {
    assertFails(
      checkConstraintMetadata([{ in: "path", name: "id", pattern: "(a)\\1" }]),
      "constraint_metadata_invalid",
      'path parameter "id": pattern cannot be used: backreferences (\\1) are not supported',
    );
  });
});

describe("evaluateConstraints: one array evaluated again and again (prepared once)", () => {
  it("gives every request its own verdict, and bad metadata fails every time", () => {
    const constraints = [
      { in: "query", name: "limit", maximum: 50 },
      { in: "header", name: "x-tenant", pattern: "[a-z]+" },
    ];
    for (let round = 0; round < 3; round++) {
      assert.deepEqual(run(constraints, { query: { limit: "5" }, headers: { "x-tenant": "acme" } }), {
        ok: true,
      });
      assertFails(run(constraints, { query: { limit: "51" } }), "constraint_violation", "maximum");
      assertFails(run(constraints, { headers: { "x-tenant": "ACME" } }), "constraint_violation", "pattern");
    }
    const bad = [{ in: "query", name: "n", minimum: 5, maximum: 1 }];
    for (let round = 0; round < 3; round++)
      assertFails(run(bad, { query: { n: "3" } }), "constraint_metadata_invalid", "minimum is above maximum");
    // The rollout gate is not part of what is prepared: still refused when off.
    assertFails(
      evaluateConstraints(constraints, {}, { enabled: false, partnerAllowlisted: true }),
      "constraint_rollout_disabled",
    );
  });
});
