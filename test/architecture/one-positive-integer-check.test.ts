/**
 * One check of a positive whole-number option for all of src/ (`positiveIntegerOption` in
 * src/core/positive-integer.ts; settings are parsed by src/config/validators.ts): issue 29 found
 * seven private copies, and after them thirteen inline ones, each free to drift (`isInteger`
 * against `isSafeInteger`, a bound forgotten). A textual scan, like one-is-record.test.ts.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { test } from "node:test";

const SRC = join(import.meta.dirname, "../../src");
const HOMES = new Set(["core/positive-integer.ts", "config/validators.ts"]);
/**
 * Request arguments, not options: a page size or trim bound a caller sends, answered 400
 * `invalid_request` by the store's own error (docs/decisions/2901).
 */
const REQUEST_ARGUMENTS = new Set(["store/errors.ts", "store/log-query.ts"]);

/** `Number.isInteger(x) || x < 1` and its spellings (`isSafeInteger`, `x <= 0`). */
const INLINE_CHECK = /Number\.is(?:Safe)?Integer\(([\w.$]+)\)\s*\|\|\s*\1\s*(?:<\s*1\b|<=\s*0\b)/;

function* sources(dir: string): Generator<string> {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* sources(path);
    else if (entry.name.endsWith(".ts")) yield path;
  }
}

test("a positive integer option is checked by positiveIntegerOption only", () => {
  const copies: string[] = [];
  for (const path of sources(SRC)) {
    const file = relative(SRC, path);
    if (HOMES.has(file) || REQUEST_ARGUMENTS.has(file)) continue;
    const lines = readFileSync(path, "utf8").split("\n");
    lines.forEach((line, index) => {
      if (INLINE_CHECK.test(line)) copies.push(`${file}:${index + 1}`);
    });
  }
  assert.deepEqual(copies, []);
});

test("the scan sees each spelling of the check", () => {
  for (const line of [
    "if (!Number.isInteger(value) || value < 1) {",
    "if (!Number.isSafeInteger(options.max) || options.max < 1)",
    "if (!Number.isInteger(lifetimeSec) || lifetimeSec <= 0) {",
  ])
    assert.ok(INLINE_CHECK.test(line), line);
  assert.ok(!INLINE_CHECK.test("if (!Number.isSafeInteger(reprLimit) || reprLimit < 16) {"));
});
