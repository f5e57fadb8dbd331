import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { JsonLimitError } from "../../src/core/bounded-json.ts";
import { ExecutionError } from "../../src/execute/errors.ts";
import { enforceOperationInput, validateInput } from "../../src/execute/input.ts";

/**
 * The enforcement step every path shares (invoke, broker, MCP, ext_authz, the proxy) does work
 * bounded by the size of the caller's arguments, whatever the partner's schema says:
 *
 * - `uniqueItems` on an array of objects (common in OpenAPI documents) was ajv's pairwise deep
 *   comparison: 8,000 small objects cost a second of CPU, a 1 MiB body of `{}` items minutes.
 *   It now takes one pass. The guard compares the growth of CPU time with the input (8× the
 *   items: linear is about 8×, the old quadratic 64×), not a wall-clock target.
 * - Arguments past the JSON limits (however they arrived) are refused before ajv walks them.
 */

const uniqueObjects = {
  body: { type: "array", uniqueItems: true, items: { type: "object" } },
} as const;

const objects = (n: number) => Array.from({ length: n }, (_, i) => ({ id: i, tag: "t" }));

function cpuMicros(fn: () => void): number {
  const start = process.cpuUsage();
  fn();
  const used = process.cpuUsage(start);
  return used.user + used.system;
}

describe("bounded work in the shared enforcement step", () => {
  it("uniqueItems keeps ajv's meaning: equal whatever the key order, -0 equals 0", () => {
    const refused = (body: unknown): boolean => {
      try {
        validateInput(uniqueObjects, { body });
        return false;
      } catch (error) {
        assert.ok(error instanceof ExecutionError);
        assert.equal(error.reason, "invalid_input");
        assert.match(error.message, /uniqueItems/);
        return true;
      }
    };
    assert.equal(
      refused([
        { a: 1, b: [1, 2] },
        { b: [1, 2], a: 1 },
      ]),
      true,
    );
    assert.equal(refused([{ a: 1 }, { a: 2 }]), false);
    assert.equal(refused([{ a: [1, 2] }, { a: [2, 1] }]), false);
    assert.equal(refused([{ n: 0 }, { n: -0 }]), true);
    assert.equal(refused([{ n: "1" }, { n: 1 }]), false);
    const scalars = {
      query: {
        type: "object",
        properties: { ids: { type: "array", uniqueItems: true, items: { type: "integer" } } },
      },
    } as const;
    // Coerced first ("1" → 1), then compared: a repeated id is still a repeat.
    assert.throws(() => validateInput(scalars, { query: { ids: ["1", "1"] } }), /uniqueItems/);
  });

  it("uniqueItems over an array of objects is linear (8× the items: less than 24× the CPU)", () => {
    const run = (n: number) => {
      const body = objects(n);
      return cpuMicros(() => validateInput(uniqueObjects, { body }));
    };
    run(2000); // compiled and warmed
    const small = Math.max(run(2000), 1000);
    const large = run(16_000);
    assert.ok(large < small * 24, `2,000 items: ${small} µs of CPU; 16,000 items: ${large} µs`);
  });

  it("arguments past the JSON limits are refused before validation, in every section", () => {
    let deep: unknown = 1;
    for (let i = 0; i < 200; i++) deep = [deep];
    for (const args of [
      { body: deep },
      { query: { q: deep } },
      { headers: { h: deep } },
      { path: { p: deep } },
    ]) {
      assert.throws(
        () =>
          enforceOperationInput(
            {
              method: "POST",
              input_schema: { body: {}, query: {}, headers: {}, path: {} },
              parameter_constraints: [],
            },
            args,
            { enabled: false, partnerAllowlisted: false },
          ),
        (error: unknown) => error instanceof JsonLimitError && error.code === "input_too_complex",
      );
    }
  });
});
