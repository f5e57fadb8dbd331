import assert from "node:assert/strict";
import { test } from "node:test";
import { evaluateConstraints } from "../../src/core/parameter-constraints.ts";

/**
 * Attack on the per-array memo of prepared constraints: a constraint object shared between
 * two policies' arrays, one array evaluated for many operations, and a reloaded policy (a new
 * array of different constraints) must each be judged by their own constraints — a verdict
 * prepared for one array never stands in for another.
 */
const rollout = { enabled: true, partnerAllowlisted: true };
const code = (result: ReturnType<typeof evaluateConstraints>): string => (result.ok ? "ok" : result.code);

test("a constraint object shared by two arrays, and a reload with the same names, are judged afresh", () => {
  const limit = { in: "query", name: "limit", maximum: 50 };
  const loose = [limit];
  const strict = [limit, { in: "query", name: "limit", maximum: 5 }];
  assert.equal(code(evaluateConstraints(loose, { query: { limit: "10" } }, rollout)), "ok");
  assert.equal(
    code(evaluateConstraints(strict, { query: { limit: "10" } }, rollout)),
    "constraint_violation",
  );
  assert.equal(code(evaluateConstraints(loose, { query: { limit: "10" } }, rollout)), "ok");
  // A reload: the same JSON parsed again is a new array; a stricter policy is a new array too.
  const reloaded = JSON.parse(JSON.stringify([{ in: "query", name: "limit", maximum: 1 }])) as unknown[];
  assert.equal(
    code(evaluateConstraints(reloaded, { query: { limit: "10" } }, rollout)),
    "constraint_violation",
  );
  // A bad array after a good one with the same constraints is still bad, and vice versa.
  const bad = [limit, { in: "query", name: "n", minimum: 5, maximum: 1 }];
  assert.equal(
    code(evaluateConstraints(bad, { query: { limit: "1" } }, rollout)),
    "constraint_metadata_invalid",
  );
  assert.equal(code(evaluateConstraints(loose, { query: { limit: "1" } }, rollout)), "ok");
});

test("a pattern linear time cannot run, or a malformed one, is refused on every evaluation, not only the first", () => {
  const unsafe = [{ in: "query", name: "q", pattern: "(a)\\1" }];
  const malformed = [{ in: "query", name: "q", pattern: "(" }];
  for (let round = 0; round < 3; round++) {
    assert.equal(
      code(evaluateConstraints(unsafe, { query: { q: "a" } }, rollout)),
      "constraint_metadata_invalid",
    );
    assert.equal(
      code(evaluateConstraints(malformed, { query: { q: "a" } }, rollout)),
      "constraint_metadata_invalid",
    );
    assert.equal(code(evaluateConstraints(unsafe, {}, rollout)), "constraint_metadata_invalid");
  }
});
