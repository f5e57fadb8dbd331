/**
 * No pattern reaches the backtracking engine unless it is the project's own constant
 * (docs/decisions/2502). The scan reads every src/**\/*.ts and flags a `RegExp(` built at
 * run time and an ajv instance without `code: { regExp: linearRegExp }`. What remains is
 * allow-listed below with the reason no partner's or caller's pattern can reach it.
 */
import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import { join, relative } from "node:path";
import { describe, it } from "node:test";

const ROOT = join(import.meta.dirname, "..", "..");

const ALLOWED: Readonly<Record<string, string>> = {
  "src/core/ids.ts:RegExp": "the admin API's own identifier patterns (constants)",
  "src/execute/decoded-views.ts:RegExp":
    "character classes of the escape families, built once from constants (single-character matches)",
  "src/identity/claims.ts:RegExp": "the admin API's partner-id pattern (a constant of src/core/ids.ts)",
  "src/core/linear-pattern.ts:RegExp": "parses a partner pattern as ECMAScript, never runs it",
  "src/audit/receipts.ts:RegExp": "the receipt formats, built once from constants (bounded repetitions)",
  "src/mcp/downstream-client.ts:ajv":
    "each output schema on its own engine from createSnapshotAjv (src/catalog/schema-ajv.ts): linear patterns",
  "src/servers/inject/settings.ts:ajv": "the operator's sidecar settings schema (constants)",
  "src/servers/http/server.ts:ajv": "fastify's route schemas, all written in src/ (constants)",
  "src/mcp/protocol-server.ts:ajv":
    "the MCP SDK's validator; it only validates elicitation answers, never used here",
};

async function sources(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await sources(path)));
    else if (entry.name.endsWith(".ts")) out.push(path);
  }
  return out;
}

/** The source without comments, so a sentence about RegExp is not a call. */
function code(source: string): string {
  return source.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`\\])\/\/.*$/gm, "$1");
}

const AJV = /\bnew\s+(?:Ajv2020|Ajv|AjvJsonSchemaValidator)\s*\(|\bajv:\s*\{/g;

function findings(file: string, text: string): string[] {
  const found: string[] = [];
  if (/\bRegExp\s*\(/.test(text)) found.push(`${file}:RegExp`);
  for (const match of text.matchAll(AJV)) {
    const options = text.slice(match.index, match.index + 800);
    const end = options.indexOf("});");
    const call = end === -1 ? options : options.slice(0, end);
    if (!/regExp:\s*linearRegExp\b/.test(call)) found.push(`${file}:ajv`);
  }
  return found;
}

describe("patterns: the backtracking engine only runs the project's own constants", () => {
  it("every RegExp built at run time and every ajv instance is linear or allow-listed", async () => {
    const found = new Set<string>();
    for (const path of await sources(join(ROOT, "src"))) {
      const file = relative(ROOT, path);
      for (const finding of findings(file, code(await readFile(path, "utf8")))) found.add(finding);
    }
    const unexpected = [...found].filter((finding) => !Object.hasOwn(ALLOWED, finding));
    assert.deepEqual(
      unexpected,
      [],
      "run partner patterns through src/core/linear-pattern.ts, or allow-list a constant with its reason",
    );
    const stale = Object.keys(ALLOWED).filter((entry) => !found.has(entry));
    assert.deepEqual(stale, [], "allow-list entries that no longer match anything");
  });

  it("the scan sees a run-time RegExp and an ajv instance without the linear engine", () => {
    assert.deepEqual(findings("x.ts", "const r = new RegExp(partner.pattern, 'u');"), ["x.ts:RegExp"]);
    assert.deepEqual(findings("x.ts", "const a = new Ajv2020({ strict: false });"), ["x.ts:ajv"]);
    assert.deepEqual(findings("x.ts", "const a = new Ajv2020({ code: { regExp: linearRegExp } });"), []);
    assert.deepEqual(findings("x.ts", code("// new RegExp(x) in a comment\n/* RegExp( */")), []);
  });
});
