/**
 * Interop with the MCP Inspector's CLI (`@modelcontextprotocol/inspector-cli`, pinned), as an
 * operator runs it: a separate process over Streamable HTTP with a bearer header, listing and
 * calling. It speaks the 2025 revisions (its v1 line is built on SDK 1.x).
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { type Harness, permission, startHarness } from "./harness.ts";

const run = promisify(execFile);
const CLI = join(
  createRequire(import.meta.url).resolve("@modelcontextprotocol/inspector-cli/package.json"),
  "../build/index.js",
);

let h: Harness;
before(async () => {
  h = await startHarness();
  await h.grant("inspected", [permission("get", "/orders")]);
});
after(() => h.close());

async function inspector(token: string, ...args: string[]): Promise<Record<string, unknown>> {
  try {
    const { stdout } = await run(
      process.execPath,
      [CLI, `${h.url}/mcp`, "--transport", "http", "--header", `Authorization: Bearer ${token}`, ...args],
      // Its build finds its own package.json relative to the working directory.
      { timeout: 60_000, cwd: dirname(CLI) },
    );
    return JSON.parse(stdout) as Record<string, unknown>;
  } catch (error) {
    // Not the command line: it holds the token.
    const { stderr } = error as { stderr?: string };
    throw new Error(`inspector ${args.join(" ")} failed: ${stderr ?? String(error)}`);
  }
}

test("MCP Inspector CLI lists the caller's tools and calls one", async () => {
  const token = await h.token("inspected");
  const listed = (await inspector(token, "--method", "tools/list")) as { tools: Array<{ name: string }> };
  assert.equal(listed.tools.length, 1);
  const name = listed.tools[0]?.name ?? "";
  assert.match(name, /^listOrders_[0-9a-f]{8}$/);
  const called = (await inspector(token, "--method", "tools/call", "--tool-name", name)) as {
    structuredContent: { status: number; body: unknown };
  };
  assert.equal(called.structuredContent.status, 200);
  assert.deepEqual(called.structuredContent.body, [{ id: "o-1" }, { id: "o-2" }]);
});
