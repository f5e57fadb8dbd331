import assert from "node:assert/strict";
import { test } from "node:test";
import { queryArguments } from "../../../src/pipeline/request-arguments.ts";

/**
 * Attack test: a repeated query name must not grow its array by copying it, nor a pair without
 * `=` search the rest of the query for one — either makes N repetitions cost O(N²). The query is not bounded
 * by MAX_REQUEST_PATH_LENGTH (that is the path before '?'): Envoy passes up to 60 KiB of
 * headers by default (96 KiB at most), so one authenticated request for an allowed operation,
 * `GET /op?a&a&a…` (30,000 times, 60 KB), holds the sidecar's event loop for seconds
 * (about 8 s measured here) — every other Check waits. A linear split takes milliseconds.
 *
 * The budget below is about 50× what a linear split of this query needs, and a small
 * fraction of what the quadratic one takes (~1–2 s for 20,000 repetitions, 40 KB).
 */
test("a query repeating one name 20,000 times (40 KB) is split in linear time", () => {
  const repeated = `/op?${"a&".repeat(20_000)}`;
  const distinct = `/op?${Array.from({ length: 20_000 }, (_, i) => `a${i}`).join("&")}`;
  queryArguments("/op?a&a"); // warm
  let started = performance.now();
  const parsed = queryArguments(distinct);
  const linear = performance.now() - started;
  assert.equal(Object.keys(parsed).length, 20_000);
  started = performance.now();
  const out = queryArguments(repeated);
  const elapsed = performance.now() - started;
  assert.equal((out.a as string[]).length, 20_000);
  assert.ok(
    elapsed < Math.max(250, 20 * linear),
    `20,000 repetitions took ${elapsed.toFixed(0)} ms (20,000 distinct names: ${linear.toFixed(1)} ms)`,
  );
});
