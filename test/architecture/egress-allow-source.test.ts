/**
 * The egress allow list comes from the operator's configuration only (decision 2511): the one
 * place in src/ that hands `createEgressPolicy` an allow list is a process's composition root,
 * and what it hands is that process's validated configuration. Everywhere else builds the
 * strict policy (`createEgressPolicy()`) or takes the one its root built. So no admin route,
 * import field, document extension or auth profile can reach the list; and the list a policy
 * holds is frozen (test/servers/authority/admin/egress.test.ts).
 */
import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import { join, relative } from "node:path";
import { describe, it } from "node:test";

const repo = new URL("../../", import.meta.url).pathname;

/** Composition root → the configuration expression its allow list must be. */
const ROOTS: Readonly<Record<string, string>> = {
  "src/servers/authority/build.ts": "config.egress.allow",
  "src/servers/sidecar/build.ts": "config.egressAllow",
};

async function sources(): Promise<string[]> {
  const entries = await readdir(join(repo, "src"), { recursive: true, withFileTypes: true });
  return entries
    .filter((e) => e.isFile() && e.name.endsWith(".ts"))
    .map((e) => relative(repo, join(e.parentPath, e.name)));
}

describe("architecture: the egress allow list is configuration", () => {
  it("only composition roots give createEgressPolicy options, and their allow list is the process's configuration", async () => {
    const seen = new Set<string>();
    for (const file of await sources()) {
      if (file === "src/execute/egress.ts") continue;
      const text = (await readFile(join(repo, file), "utf8")).replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, "");
      for (const call of text.matchAll(/\bcreateEgressPolicy\s*\(([^)]*)\)/g)) {
        const args = (call[1] ?? "").trim();
        if (args === "") continue;
        const expected = ROOTS[file];
        assert.ok(
          expected !== undefined,
          `${file} builds an egress policy with options (${args.slice(0, 80)})`,
        );
        const allow = /\ballow\s*:\s*([^,\n}]+)/.exec(args)?.[1]?.trim();
        assert.equal(allow, expected, `${file}: the allow list is ${expected}`);
        seen.add(file);
      }
    }
    // A root that no longer builds one is a stale entry.
    assert.deepEqual([...seen].sort(), Object.keys(ROOTS).sort());
  });
});
