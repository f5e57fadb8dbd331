import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { Command, CommanderError } from "commander";

const run = promisify(execFile);
const BIN = fileURLToPath(new URL("../../bin/authority.ts", import.meta.url));

async function authority(args: string[], env: Record<string, string> = {}) {
  try {
    const { stdout, stderr } = await run(process.execPath, [BIN, ...args], {
      timeout: 30_000,
      env: { PATH: process.env.PATH ?? "", ...env },
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

/**
 * Runs `authority <command> <args>` in this process (as main.ts registers it), with commander's
 * exit turned into an exception: what the command would print on stderr, and its exit code.
 */
async function inProcess(command: string, args: string[]): Promise<{ code: number; stderr: string }> {
  let stderr = "";
  const program = new Command("authority").exitOverride().configureOutput({
    writeErr: (text) => {
      stderr += text;
    },
  });
  const module = (await import(`../../src/cli/commands/${command}.ts`)) as { register(p: Command): void };
  module.register(program);
  try {
    await program.parseAsync([command, ...args], { from: "user" });
    return { code: 0, stderr };
  } catch (error) {
    if (!(error instanceof CommanderError)) throw error;
    return { code: error.exitCode, stderr };
  }
}

/** A setting each subcommand has, with a value its validator refuses. */
const BAD: Readonly<Record<string, [string, string, RegExp]>> = {
  serve: ["log-level", "loud", /must be one of fatal, error/],
  reprotect: ["listen", "nowhere", /must be host:port/],
  sidecar: ["decision-timeout-ms", "soon", /must be a duration/],
  managed: ["rate-limit", "0", /must be an integer from 1/],
  crypto: ["issuer", "ftp://idp", /must be an absolute http\(s\) URL/],
  idp: ["token-lifetime", "forever", /must be a duration/],
  inject: ["tls-cert", "/no/such/cert.pem", /does not exist/],
  token: ["token-url", "mailto:x", /must be an absolute http\(s\) URL/],
  dev: ["log-level", "chatty", /must be one of/],
  demo: ["color", "sometimes", /must be true or false/],
};

describe("every subcommand reads --config", () => {
  let dir = "";
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "authority-config-file-"));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  for (const [command, [key, value, message]] of Object.entries(BAD)) {
    it(`authority ${command} validates its file once, in one line naming the key and the file`, async () => {
      const file = join(dir, `${command}.yaml`);
      await writeFile(file, `${key}: ${JSON.stringify(value)}\n`);
      const outcome = await inProcess(command, ["--config", file]);
      assert.equal(outcome.code, 1, outcome.stderr);
      const line = outcome.stderr.trim();
      assert.equal(line.split("\n").length, 1, line);
      assert.ok(line.startsWith(`authority ${command}: ${key} in ${file}`), line);
      assert.match(line, message);
    });
  }

  it("refuses an unknown key, and a JSON file works as well as YAML", async () => {
    const typo = join(dir, "typo.yaml");
    await writeFile(typo, "client-idd: agent\n");
    const unknown = await authority(["token", "--config", typo]);
    assert.equal(unknown.stderr.trim(), `authority token: ${typo} has unknown settings: client-idd`);
    const json = join(dir, "token.json");
    await writeFile(json, JSON.stringify({ "client-id": "from-file" }));
    const fromFile = await authority(["token", "--config", json]);
    assert.equal(fromFile.stderr.trim(), "authority token: --client-id and --client-secret go together");
  });

  it("a flag wins over the file, and a secret given in the file is never echoed", async () => {
    const file = join(dir, "sidecar.yaml");
    await writeFile(file, 'redis-url: "postgres://user:hunter2-secret@db"\ntoken-file: /t\n');
    const refused = await authority(["sidecar", "--config", file]);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /redis-url in .*sidecar\.yaml must be redis:\/\//);
    assert.doesNotMatch(refused.stderr, /hunter2/);
    const flagWins = await authority(["sidecar", "--config", file, "--redis-url", "nope"]);
    assert.match(flagWins.stderr, /^authority sidecar: --redis-url must be redis:\/\//);
  });

  it("AUTHORITY_CONFIG_FILE is read by serve only: a variable exported for it does not reach another process", async () => {
    const file = join(dir, "serve.yaml");
    await writeFile(file, "listen: 127.0.0.1:1\npublic-url: nope\n");
    const serve = await authority(["serve"], { AUTHORITY_CONFIG_FILE: file });
    assert.match(serve.stderr, /^authority serve: public-url in .*serve\.yaml must be an absolute/);
    const token = await authority(["token"], { AUTHORITY_CONFIG_FILE: file });
    assert.equal(
      token.stderr.trim(),
      "authority token: give --client-id and --client-secret, or --username and --password",
    );
  });
});
