import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { normalizeRequestPath } from "../../src/core/path-template.ts";

/**
 * Attack on the plain-path fast path of normalizeRequestPath: a path made only of characters
 * that need no decoding is split without decodeURIComponent. Percent-encoding every character
 * but "/" sends the same path through the decoding path; both must give the same answer
 * (same canonical path, same segments, or both "never matches") — otherwise a spelling would
 * match a template, or miss a deny, that its encoded twin does not.
 */

const PLAIN_UNITS = [..."AZaz09-._~!*'()$&+,:;=@"];
const unit = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom(...PLAIN_UNITS) },
  { weight: 3, arbitrary: fc.constant("/") },
  { weight: 2, arbitrary: fc.constantFrom(".", "..", ".;x", "..;", "//", "/./", "/../") },
);

function encodeAll(path: string): string {
  return path.replace(/[^/]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, "0")}`);
}

test("a plain path normalizes as its fully percent-encoded twin does (the decoding path)", () => {
  fc.assert(
    fc.property(fc.array(unit, { maxLength: 30 }), (units) => {
      const plain = `/${units.join("")}`;
      const encoded = encodeAll(plain);
      assert.deepEqual(normalizeRequestPath(plain), normalizeRequestPath(encoded), plain);
      const normal = normalizeRequestPath(plain);
      if (normal !== undefined) assert.deepEqual(normalizeRequestPath(normal.path), normal);
    }),
    { numRuns: 3000 },
  );
});

test("plain-path spellings: dot segments refused, empty segments dropped, query and fragment cut", () => {
  const cases: ReadonlyArray<readonly [string, string | undefined]> = [
    ["/a/b", "/a/b"],
    ["/a//b/", "/a/b"],
    ["//a", "/a"],
    ["/", "/"],
    ["///", "/"],
    ["/a/./b", undefined],
    ["/a/../b", undefined],
    ["/a/..;x/b", undefined],
    ["/a/.;/b", undefined],
    ["/a/...", "/a/..."],
    ["/a/.x", "/a/.x"],
    ["/a/..x", "/a/..x"],
    ["/a?b=/../c", "/a"],
    ["/a#/../b", "/a"],
    ["/a/%2E%2E/b", undefined],
    ["/a/%2e/b", undefined],
    ["/a%2Fb", undefined],
    ["/a/%61", "/a/a"],
    ["a/b", undefined],
    ["", undefined],
  ];
  for (const [raw, expected] of cases) assert.equal(normalizeRequestPath(raw)?.path, expected, raw);
  // Segment limit holds on the fast path as on the decoding path.
  assert.equal(normalizeRequestPath(`/${"a/".repeat(256)}`)?.segments.length, 256);
  assert.equal(normalizeRequestPath(`/${"a/".repeat(257)}`), undefined);
  assert.equal(normalizeRequestPath(`/${"%61/".repeat(257)}`), undefined);
});
