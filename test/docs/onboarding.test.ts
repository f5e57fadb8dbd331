import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import type { AddressInfo } from "node:net";
import { createServer } from "node:net";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { promisify } from "node:util";
import { type DevEnvironment, startDevEnvironment } from "../../src/dev/environment.ts";
import { createLogger } from "../../src/observability/logger.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

/**
 * docs/onboarding.md as written: its `sh` blocks, in order, in one bash, against a development
 * environment of this test's own. Only the documented addresses (the `make dev` ports), the
 * state directory and Envoy's listener port are replaced; every command is the page's.
 */

const run = promisify(execFile);
const repo = new URL("../../", import.meta.url).pathname;

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

function shellBlocks(markdown: string): string[] {
  return [...markdown.matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((match) => match[1] ?? "");
}

describe("docs/onboarding.md, run verbatim", () => {
  let dir: TempDir;
  let env: DevEnvironment;

  before(async () => {
    dir = await makeTempDir("onboarding-");
    env = await startDevEnvironment({
      stateDir: dir.path,
      ports: "ephemeral",
      log: createLogger("onboarding-test", "silent"),
    });
  });
  after(async () => {
    await env?.close();
    await dir?.cleanup();
  });

  test("imports the API, creates the agent and its client, assigns a policy; one call allowed, one denied (authorize, MCP, Envoy)", async () => {
    const page = await readFile(join(repo, "docs/onboarding.md"), "utf8");
    const blocks = shellBlocks(page);
    assert.ok(blocks.length >= 6, "the guide's shell blocks");
    const script = blocks
      .join("\n")
      .replaceAll("http://127.0.0.1:8080", env.urls.authority)
      .replaceAll("http://127.0.0.1:8083", env.urls.idp)
      .replaceAll("http://127.0.0.1:18080", env.urls.sampleApi)
      .replaceAll(".authority/", `${dir.path}/`)
      .replaceAll("ENVOY_PORT=8000", `ENVOY_PORT=${await freePort()}`)
      .replaceAll("/tmp/my-agent-tools.txt", join(dir.path, "my-agent-tools.txt"));
    // Not the page's: Envoy is stopped even when a step fails.
    const guarded = `trap 'kill \${ENVOY_PID:-} 2>/dev/null || true' EXIT\n${script}`;
    const { stdout } = await run("bash", ["-euo", "pipefail", "-c", guarded], {
      cwd: repo,
      env: { ...process.env, AUTHORITY_URL: env.urls.authority },
      timeout: 120_000,
      maxBuffer: 4 * 1024 * 1024,
    });
    const lines = stdout.split("\n").filter((line) => line.trim().length > 0);
    const json = lines
      .filter((line) => line.startsWith("{"))
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    // Every output the page shows on a line of its own (`# {…}`) is printed, in that order.
    const documented = blocks
      .flatMap((block) => block.split("\n"))
      .map((line) => /^# (\{.*\})$/.exec(line)?.[1])
      .filter((text) => text !== undefined)
      .map((text) => JSON.parse(text) as Record<string, unknown>);
    assert.equal(documented.length, 4);
    let at = 0;
    for (const expected of documented) {
      while (at < json.length && JSON.stringify(json[at]) !== JSON.stringify(expected)) at += 1;
      assert.ok(at < json.length, `documented output ${JSON.stringify(expected)} in ${stdout}`);
      at += 1;
    }
    assert.deepEqual(json[0], { catalog_version: "1", operation_count: 8 });
    assert.ok(lines.includes("my-api:get:/customers/{customerId}"));
    assert.ok(lines.includes("my-api:delete:/customers/{customerId}"));
    assert.deepEqual(json[1], { subject_id: "my-agent", identity: "platform_vouched" });
    assert.deepEqual(json[2], { state: "active" });
    assert.equal(json[3]?.status, "allowed");
    assert.equal(json[3]?.permissionId, "my-api:get:/customers/{customerId}");
    assert.equal(json[4]?.status, "denied");
    assert.equal(json[4]?.reason, "operation_not_allowed");
    assert.ok(lines.some((line) => /^getCustomer_/.test(line)));
    assert.ok(!lines.some((line) => /^deleteCustomer_/.test(line)));
    assert.deepEqual(json[5], { status: 200, id: "cus_00000001" });
    assert.ok(lines.includes("no delete tool"));
    // Through Envoy and the sidecar's ext_authz.
    assert.ok(lines.includes("GET 200"), stdout);
    assert.ok(lines.includes("DELETE 403"), stdout);
  });
});
