/**
 * Scoping and granting claims (partner, tenant, roles, scopes, client, token use) are read in
 * one place: the verifier (src/identity), strictly, into VerifiedToken's typed fields. A module
 * that read `claims.partner_id` itself could read a malformed claim as "no partner" again —
 * the unscoped-token class decision 2503 closes. The development identity provider (which
 * writes claims) is the one other module that names them.
 */
import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import { join, relative } from "node:path";
import { describe, it } from "node:test";

const NAMES = "partner_id|roles|tenant|client_id|azp|scope|scp|token_use";
/** `claims.partner_id`, `claims["roles"]`, `read(claims, "roles")` and `{ partner_id } = ….claims`. */
const CLAIM_READ = new RegExp(
  `\\bclaims\\s*(?:\\.|\\[\\s*["'\`]|,\\s*["'\`])\\s*(?:${NAMES})\\b|\\{[^}]*\\b(?:${NAMES})\\b[^}]*\\}\\s*=\\s*[\\w.]*\\bclaims\\b`,
  "g",
);
const READERS = /^src\/(?:identity|servers\/idp)\//;

async function sourceFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await sourceFiles(path)));
    else if (entry.name.endsWith(".ts")) out.push(path);
  }
  return out;
}

describe("claims are read only by the verifier", () => {
  it("recognizes a direct read and a destructuring read", () => {
    const reads = (source: string) => [...source.matchAll(CLAIM_READ)].length;
    assert.equal(reads("const p = verified.claims.partner_id;"), 1);
    assert.equal(reads('const p = claims["roles"];'), 1);
    assert.equal(reads('partnerId: claimString(verified.claims, "partner_id"),'), 1);
    assert.equal(reads("const { binding_id: b, partner_id: p } = verified.claims;"), 1);
    assert.equal(reads("const b = verified.claims.binding_id; const p = verified.partnerId;"), 0);
  });

  it("no module outside src/identity reads a scoping or granting claim from `claims`", async () => {
    const root = process.cwd();
    const found: string[] = [];
    for (const path of await sourceFiles(join(root, "src"))) {
      const file = relative(root, path).split("\\").join("/");
      if (READERS.test(file)) continue;
      const source = await readFile(path, "utf8");
      for (const match of source.matchAll(CLAIM_READ)) found.push(`${file}: ${match[0].slice(0, 80)}`);
    }
    assert.deepEqual(
      found,
      [],
      "read VerifiedToken's typed fields (partnerId, roles, scopes, tenant, clientId, tokenUse)",
    );
  });
});
