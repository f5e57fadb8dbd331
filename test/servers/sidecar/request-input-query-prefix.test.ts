import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { enforceOperationInput } from "../../../src/execute/input.ts";
import { operationArguments, queryArguments } from "../../../src/pipeline/request-arguments.ts";
import { snapshot } from "../../core/fixtures.ts";

/**
 * Attack: on ext_authz Envoy forwards the caller's query unchanged, so the sidecar must read
 * it as the upstream will. An upstream reads a request target's query with the WHATWG URL
 * parser (Node's URL, browsers; Go's url.ParseQuery, Python's parse_qs and Express' qs agree):
 * in `/p??limit=1` the query is `?limit=1` and its one name is `?limit`. The URLSearchParams
 * *constructor* strips a leading `?`; reading the query through it makes the sidecar decide on
 * `limit=1` while the upstream receives no `limit` at all — a required constraint bypassed.
 */

function upstreamView(path: string): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of new URL(`http://upstream${path}`).searchParams) {
    const prior = Object.hasOwn(out, name) ? out[name] : undefined;
    const next = prior === undefined ? value : Array.isArray(prior) ? [...prior, value] : [prior, value];
    Object.defineProperty(out, name, { value: next, enumerable: true, writable: true, configurable: true });
  }
  return out;
}

test("the sidecar reads a query as the upstream does, a leading '?' included", () => {
  // What a request line can carry (visible ASCII), with the separators and escapes that matter.
  const unit = fc.constantFrom("a", "b", "=", "&", "?", "%", "%41", "%3F", "+", ";", "%2B", "__proto__", "#");
  fc.assert(
    fc.property(fc.array(unit, { maxLength: 10 }), (units) => {
      const path = `/p?${units.join("")}`;
      assert.deepEqual({ ...queryArguments(path) }, { ...upstreamView(path) }, path);
    }),
    { numRuns: 3000 },
  );
  assert.deepEqual({ ...queryArguments("/p??limit=1") }, { "?limit": "1" });
  // A "?" inside the fragment starts no query.
  assert.deepEqual({ ...queryArguments("/p#x?limit=1") }, {});
});

test("a required query constraint is not met by `??limit=`: the upstream would get no limit", () => {
  const operation = snapshot("GET", "/export", {
    parameter_constraints: [{ in: "query", name: "limit", maximum: 50, required: true }],
  });
  const rollout = { enabled: true, partnerAllowlisted: true };
  const decide = (path: string): string => {
    try {
      enforceOperationInput(operation, operationArguments(operation, {}, path, {}, undefined), rollout);
      return "allow";
    } catch (error) {
      return (error as { code?: string }).code ?? "thrown";
    }
  };
  assert.equal(decide("/export?limit=1"), "allow");
  assert.equal(decide("/export"), "constraint_violation");
  assert.notEqual(decide("/export??limit=1"), "allow");
  assert.notEqual(decide("/export??limit=%31"), "allow");
});
