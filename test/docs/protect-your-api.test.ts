import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { resolveDevConfig } from "../../src/config/dev.ts";
import { type DevEnvironment, startDevEnvironment } from "../../src/dev/environment.ts";
import { createLogger } from "../../src/observability/logger.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";
import { assertInOrder, documentedOutputs, freePort, runGuide } from "./guide-runner.ts";

/**
 * docs/protect-your-api.md as written, twice in a row against the same state: the user's own
 * API on a loopback port, imported, a policy, allowed and denied calls through
 * authorize-invocation, MCP (the call reaches that API) and a real Envoy. The development
 * environment is this test's own, given the allow list the page's step 0 gives `make dev`
 * (AUTHORITY_EGRESS_ALLOW, through `authority dev`'s settings). Replaced: the documented
 * addresses, the state directory, the API's and Envoy's ports.
 */

describe("docs/protect-your-api.md, run verbatim twice", () => {
  let dir: TempDir;
  let env: DevEnvironment;
  let apiPort: number;

  before(async () => {
    dir = await makeTempDir("protect-your-api-");
    apiPort = await freePort();
    const config = resolveDevConfig({ env: { AUTHORITY_EGRESS_ALLOW: `127.0.0.1:${apiPort}` } });
    env = await startDevEnvironment({
      stateDir: dir.path,
      ports: "ephemeral",
      log: createLogger("protect-your-api-test", "silent"),
      egressAllow: config.egressAllow,
    });
  });
  after(async () => {
    await env?.close();
    await dir?.cleanup();
  });

  const runPage = async () =>
    runGuide({
      page: "docs/protect-your-api.md",
      replacements: [
        ["http://127.0.0.1:8080", env.urls.authority],
        ["http://127.0.0.1:8083", env.urls.idp],
        [".authority", dir.path],
        ["19090", String(apiPort)],
        ["ENVOY_PORT=8001", `ENVOY_PORT=${await freePort()}`],
      ],
      pidVariables: ["ENVOY_PID", "MY_API_PID"],
      env: { AUTHORITY_URL: env.urls.authority },
    });

  for (const pass of ["first", "second"]) {
    test(`${pass} pass: every documented output, in order`, async () => {
      const { blocks, stdout, lines } = await runPage();
      const documented = documentedOutputs(blocks);
      assert.deepEqual(documented, [
        '{"id":"ord_1","status":"shipped"}',
        '{"catalog_version":"1","operation_count":2}',
        '{"subject_id":"orders-agent","identity":"platform_vouched"}',
        '{"state":"active"}',
        '{"status":"allowed","reason":null}',
        '{"status":"denied","reason":"operation_not_allowed"}',
        '{"status":200,"body":{"id":"ord_7","status":"shipped"}}',
        "no cancel tool",
        "GET 200",
        "DELETE 403",
      ]);
      // `ord_7 … shipped` is the user's API's answer: the MCP tool call reached it.
      assertInOrder(lines, documented, stdout);
    });
  }
});
