import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { enforceOperationInput } from "../../../src/execute/input.ts";
import { operationArguments } from "../../../src/pipeline/request-arguments.ts";
import { snapshot } from "../../core/fixtures.ts";

/**
 * Attack on the sidecar's per-Check shortcuts together: the query split without
 * URLSearchParams, parameter copies by assignment (defineProperty only for `__proto__`), and
 * signed constraints prepared once per array. Parameter names that are Object.prototype's own
 * (`__proto__`, `constructor`, `toString`, `hasOwnProperty`) must be constrained like any
 * other, absent ones must not be "found" on the prototype, and a query spelled with nothing
 * to decode must get the verdict its percent-encoded twin (the URLSearchParams path) gets.
 */
const rollout = { enabled: true, partnerAllowlisted: true };
const NAMES = ["__proto__", "constructor", "toString", "hasOwnProperty", "valueOf", "limit"];

/** The verdict as the sidecar reaches it (fresh arguments), checked equal to the copying form's. */
function verdict(operation: ReturnType<typeof snapshot>, path: string): string {
  const outcome = (fresh: boolean): string => {
    try {
      const args = operationArguments(operation, {}, path, {}, undefined);
      enforceOperationInput(operation, args, rollout, { fresh });
      return "allow";
    } catch (error) {
      return (error as { code?: string }).code ?? "thrown";
    }
  };
  const sidecar = outcome(true);
  assert.equal(outcome(false), sidecar, `${path}: fresh and copied arguments disagree`);
  return sidecar;
}

function encodeAll(text: string): string {
  return [...Buffer.from(text)].map((b) => `%${b.toString(16).toUpperCase().padStart(2, "0")}`).join("");
}

test("a constraint on a prototype-named query parameter holds, on the split and the decoding path", () => {
  for (const name of NAMES) {
    const operation = snapshot("GET", "/export", {
      parameter_constraints: [{ in: "query", name, maximum: 5, required: true }],
    });
    for (const round of [1, 2]) {
      const label = `${name} (round ${round})`;
      assert.equal(verdict(operation, `/export?${name}=3`), "allow", label);
      assert.equal(verdict(operation, `/export?${name}=9`), "constraint_violation", label);
      assert.equal(
        verdict(operation, `/export?${encodeAll(name)}=${encodeAll("9")}`),
        "constraint_violation",
        label,
      );
      // Repeated: every value is checked, the last one as much as the first.
      assert.equal(verdict(operation, `/export?${name}=3&${name}=9`), "constraint_violation", label);
      assert.equal(verdict(operation, `/export?${name}=3&${name}=%39`), "constraint_violation", label);
      // Absent: required fails; Object.prototype's member is not the caller's value.
      assert.equal(verdict(operation, "/export"), "constraint_violation", label);
      assert.equal(verdict(operation, "/export?other=1"), "constraint_violation", label);
      assert.equal(verdict(operation, `/export?${name}`), "constraint_violation", label);
    }
  }
});

test("the split path and the decoding path give the same verdict for any query of these names", () => {
  const operation = snapshot("GET", "/export", {
    parameter_constraints: NAMES.map((name) => ({ in: "query", name, pattern: "^[0-4]*$" })),
  });
  const part = fc.tuple(
    fc.constantFrom(...NAMES, "", "x"),
    fc.option(fc.constantFrom("", "1", "9", "=", "1=9", "é"), { nil: undefined }),
  );
  fc.assert(
    fc.property(fc.array(part, { maxLength: 6 }), fc.constantFrom("&", "&&"), (parts, separator) => {
      const plain = parts.map(([n, v]) => (v === undefined ? n : `${n}=${v}`)).join(separator);
      const encoded = parts
        .map(([n, v]) => (v === undefined ? encodeAll(n) : `${encodeAll(n)}=${encodeAll(v)}`))
        .join(separator);
      assert.equal(verdict(operation, `/export?${plain}`), verdict(operation, `/export?${encoded}`), plain);
    }),
    { numRuns: 1500 },
  );
});
