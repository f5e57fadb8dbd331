/**
 * One JSON-object check for all of src/ (`isRecord` in src/core/own-property.ts): 23 private
 * copies had grown, each a place where a parser of untrusted JSON could drift (an array taken
 * for an object). A textual scan, like process-state.test.ts: it needs no dependency.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { test } from "node:test";

const SRC = join(import.meta.dirname, "../../src");
const HOME = "core/own-property.ts";

function* sources(dir: string): Generator<string> {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* sources(path);
    else if (entry.name.endsWith(".ts")) yield path;
  }
}

test("isRecord is defined once, in src/core/own-property.ts", () => {
  const copies: string[] = [];
  for (const path of sources(SRC)) {
    const file = relative(SRC, path);
    if (file === HOME) continue;
    if (/function isRecord\(|const isRecord\s*=/.test(readFileSync(path, "utf8"))) copies.push(file);
  }
  assert.deepEqual(copies, []);
  assert.match(readFileSync(join(SRC, HOME), "utf8"), /export function isRecord\(/);
});
