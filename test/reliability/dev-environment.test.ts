/**
 * `authority dev` as its users run it: every service in one process on free ports
 * (`startDevEnvironment`), then the demo's walk through every runtime path. Every secret
 * the environment generated (the values of dev-credentials.json, the vault's secrets,
 * partner keys, the workload client secret) is then looked for in every log line of every
 * component, in the demo's printed story and in every stored byte of the state directory
 * (apart from dev-credentials.json itself, which exists to hold them, and the authority's
 * crypto-credentials.json — what a deployment mounts from a Secret —, both mode 0600).
 */
import assert from "node:assert/strict";
import { readdir, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { createDemoContext } from "../../src/dev/demo/context.ts";
import { createReporter } from "../../src/dev/demo/reporter.ts";
import { adminSection, authorizeSection } from "../../src/dev/demo/steps-authorize.ts";
import { bindingSection } from "../../src/dev/demo/steps-binding.ts";
import { managedSection } from "../../src/dev/demo/steps-managed.ts";
import { mcpSection } from "../../src/dev/demo/steps-mcp.ts";
import { sidecarSection } from "../../src/dev/demo/steps-sidecar.ts";
import { type DevEnvironment, startDevEnvironment } from "../../src/dev/environment.ts";
import { createLogCapture, type LogCapture } from "../helpers/log-capture.ts";
import { newCounts, report } from "../helpers/suite-report.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

const SECRET_KEY = /secret|password|passwd|api_?key|access_?key|bearer/i;

/** Every string under a secret-looking key, anywhere in `value`. */
function secretsIn(value: unknown, key = "", out = new Set<string>()): Set<string> {
  if (typeof value === "string") {
    if (SECRET_KEY.test(key) && value.length >= 12 && !/^https?:\/\//.test(value)) out.add(value);
  } else if (typeof value === "object" && value !== null) {
    for (const [name, inner] of Object.entries(value))
      secretsIn(inner, SECRET_KEY.test(key) ? key : name, out);
  }
  return out;
}

describe("authority dev + demo walk-through: no generated secret escapes", () => {
  let dir: TempDir;
  let logs: LogCapture;
  let env: DevEnvironment;
  const story: string[] = [];
  const counts = newCounts();

  before(async () => {
    dir = await makeTempDir("reliability-dev-");
    logs = createLogCapture("debug");
    env = await startDevEnvironment({ stateDir: dir.path, ports: "ephemeral", log: logs.logger("dev") });
  });
  after(async () => {
    await env?.close();
    await dir?.cleanup();
  });

  test("every demo section runs with the expected outcomes", async () => {
    assert.deepEqual(env.warnings, []);
    const reporter = createReporter({ write: (line) => story.push(line) });
    const context = createDemoContext(env, reporter);
    for (const section of [
      adminSection,
      authorizeSection,
      managedSection,
      bindingSection,
      mcpSection,
      sidecarSection,
    ]) {
      await section(context);
    }
    const summary = reporter.summary();
    assert.deepEqual(summary.failures, []);
    assert.ok(summary.passed > 0);
  });

  test("no generated secret in any log line, in the printed story, or in the stored bytes", async (t) => {
    const secrets = secretsIn({
      secrets: env.secrets,
      keys: env.partnerKeys,
      binding: env.binding,
      file: env.credentials,
    });
    assert.ok(secrets.size >= 10, `found ${secrets.size} secrets to look for`);
    const lines = logs.lines();
    assert.ok(lines.length > 0);
    for (const secret of secrets) {
      const hint = `${secret.slice(0, 5)}…`;
      assert.equal(
        lines.find((line) => line.includes(secret)),
        undefined,
        `${hint} is in a log line`,
      );
      assert.equal(
        story.find((line) => line.includes(secret)),
        undefined,
        `${hint} is in the demo's story`,
      );
    }
    const credentialsFile = join(dir.path, "dev-credentials.json");
    assert.equal((await stat(credentialsFile)).mode & 0o077, 0, "dev-credentials.json is private");
    // The authority's crypto credentials: what a deployment mounts from a Secret (crypto mode).
    const cryptoCredentialsFile = join(dir.path, "crypto-credentials.json");
    assert.equal((await stat(cryptoCredentialsFile)).mode & 0o077, 0, "crypto-credentials.json is private");
    let scanned = 0;
    for (const name of await readdir(dir.path, { recursive: true })) {
      const file = join(dir.path, String(name));
      if (file === credentialsFile || file === cryptoCredentialsFile || !(await stat(file)).isFile())
        continue;
      const bytes = (await readFile(file)).toString("latin1");
      scanned++;
      for (const secret of secrets)
        assert.equal(
          bytes.includes(secret),
          false,
          `${secret.slice(0, 5)}… stored in clear in ${String(name)}`,
        );
    }
    assert.ok(scanned >= 2);
    report(
      t,
      "dev-environment",
      counts,
      `secrets watched: ${secrets.size}, log lines scanned: ${lines.length}, files scanned: ${scanned}`,
    );
  });
});
