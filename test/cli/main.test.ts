import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);
const WRAPPER = fileURLToPath(new URL("../../bin/authority", import.meta.url));

interface Outcome {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs the `authority` wrapper the README puts on the PATH (it picks the project's Node 24). */
async function authority(...args: string[]): Promise<Outcome> {
  try {
    const { stdout, stderr } = await run(WRAPPER, args, { timeout: 30_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

describe("the authority command", () => {
  it("prints the package's version with --version and -V", async () => {
    const manifest = JSON.parse(await readFile(new URL("../../package.json", import.meta.url), "utf8")) as {
      version: string;
    };
    for (const flag of ["--version", "-V"]) {
      const outcome = await authority(flag);
      assert.equal(outcome.code, 0);
      assert.equal(outcome.stdout.trim(), manifest.version);
    }
  });

  it("reports a runtime error in one line, without the help text", async () => {
    const outcome = await authority("token", "--client-id", "someone");
    assert.equal(outcome.code, 1);
    assert.equal(outcome.stderr.trim(), "authority token: --client-id and --client-secret go together");
    assert.doesNotMatch(outcome.stderr, /Usage:/);
  });

  it("follows a usage error with the command's help", async () => {
    const outcome = await authority("token", "--no-such-flag");
    assert.notEqual(outcome.code, 0);
    assert.match(outcome.stderr, /unknown option '--no-such-flag'/);
    assert.match(outcome.stderr, /Usage: authority token/);
  });
});
