import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { type DevEnvironment, startDevEnvironment } from "../../src/dev/environment.ts";
import { createLogger } from "../../src/observability/logger.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";
import { assertInOrder, documentedOutputs, freePort, runGuide } from "./guide-runner.ts";

/**
 * docs/onboarding.md as written: its `sh` blocks, in order, in one bash, against a development
 * environment of this test's own — twice in a row against the same state (a re-run must give
 * the same answers). Only the documented addresses (the `make dev` ports), the state directory
 * and Envoy's listener port are replaced; every command is the page's.
 */

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

  for (const pass of ["first", "second"]) {
    test(`${pass} pass: imports the API, creates the agent and its client, assigns a policy; one call allowed, one denied (authorize, MCP, Envoy)`, async () => {
      const { blocks, stdout, lines } = await runGuide({
        page: "docs/onboarding.md",
        replacements: [
          ["http://127.0.0.1:8080", env.urls.authority],
          ["http://127.0.0.1:8083", env.urls.idp],
          ["http://127.0.0.1:18080", env.urls.sampleApi],
          [".authority/", `${dir.path}/`],
          ["ENVOY_PORT=8000", `ENVOY_PORT=${await freePort()}`],
          ["/tmp/my-agent-tools.txt", join(dir.path, "my-agent-tools.txt")],
        ],
        pidVariables: ["ENVOY_PID"],
        env: { AUTHORITY_URL: env.urls.authority },
      });
      const json = lines
        .filter((line) => line.startsWith("{"))
        .map((line) => JSON.parse(line) as Record<string, unknown>);
      // Every output the page shows on a line of its own (`# {…}`) is printed, in that order.
      const documented = documentedOutputs(blocks);
      assert.equal(documented.length, 4);
      assertInOrder(lines, documented, stdout);
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
  }
});
