import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { it } from "node:test";
import { errorCodes } from "../../src/errors.ts";
import { executionErrorTable } from "../../src/execute/errors.ts";

it("docs/execution.md's error table says what src/execute/errors.ts and src/errors.ts do", async () => {
  const doc = await readFile(new URL("../../docs/execution.md", import.meta.url), "utf8");
  const rows = [...doc.matchAll(/^\| `([a-z_]+)` \| `([a-z_]+)` \((\d{3})\) \|/gm)].map((m) => ({
    reason: m[1] ?? "",
    code: m[2] ?? "",
    status: Number(m[3]),
  }));
  const documented = new Map(rows.map((row) => [row.reason, row]));
  assert.deepEqual([...documented.keys()].sort(), Object.keys(executionErrorTable).sort());
  for (const [reason, spec] of Object.entries(executionErrorTable)) {
    const row = documented.get(reason);
    assert.equal(row?.code, spec.code, reason);
    assert.equal(row?.status, errorCodes[spec.code].status, reason);
  }
});
