/**
 * A long command a test starts (image.test.ts's buildah build) dies with the test
 * (test/helpers/bound-command.ts): killing the test runner, even with SIGKILL, kills the command and every
 * process it started; so does the command's timeout. Checked with `sleep`, not a build.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { runBound } from "../helpers/bound-command.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

const HELPER = fileURLToPath(new URL("../helpers/bound-command.ts", import.meta.url));

/** Polls `probe` until it holds or `timeoutMs` passed (a generous bound: the machine is shared). */
async function eventually(probe: () => Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return true;
}

/**
 * A command that starts children (as a build does), one of them in a session of its own (out of
 * the command's process group), and writes the pids to `file`.
 */
const tree = (file: string) => [
  "-c",
  `sleep 300 & one=$!; setsid sleep 300 & echo "$$ $one $!" > "${file}"; wait`,
];

/** Whether a process is alive (a zombie waiting for its reaper is not). */
async function alive(pid: number): Promise<boolean> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    return !/^\d+ \(.*\) [ZX] /s.test(stat);
  } catch {
    return false;
  }
}

async function anyAlive(pids: readonly number[]): Promise<boolean> {
  for (const pid of pids) if (await alive(pid)) return true;
  return false;
}

async function pidsIn(file: string): Promise<number[]> {
  let pids: number[] = [];
  const written = await eventually(async () => {
    const text = await readFile(file, "utf8").catch(() => "");
    pids = text.trim().split(" ").filter(Boolean).map(Number);
    return pids.length === 3;
  }, 20_000);
  assert.ok(written, "the command wrote its pids");
  return pids;
}

describe("a bound command dies with the test that started it", () => {
  let dir: TempDir;
  before(async () => {
    dir = await makeTempDir("bound-command-");
  });
  after(() => dir.cleanup());

  it("answers the command's output, and its failure with its stderr", async () => {
    const ok = await runBound("sh", ["-c", "echo out; echo err >&2"], { timeoutMs: 20_000 });
    assert.equal(ok.stdout, "out\n");
    assert.equal(ok.stderr, "err\n");
    await assert.rejects(runBound("sh", ["-c", "echo broke >&2; exit 3"], { timeoutMs: 20_000 }), (error) => {
      assert.match(String((error as { stderr?: string }).stderr), /broke/);
      return true;
    });
  });

  it("a SIGKILLed test runner takes the command and its children with it", async () => {
    const file = join(dir.path, "killed.pids");
    const script = `import(${JSON.stringify(HELPER)}).then((m) => m.runBound("sh", ${JSON.stringify(tree(file))}, { timeoutMs: 600000 }));`;
    const runner = spawn(process.execPath, ["-e", script], { stdio: "ignore" });
    const pids = await pidsIn(file);
    for (const pid of pids) assert.ok(await alive(pid), `${pid} runs while the runner does`);
    runner.kill("SIGKILL");
    const gone = await eventually(async () => !(await anyAlive(pids)), 20_000);
    for (const pid of pids) if (!gone && (await alive(pid))) process.kill(pid, "SIGKILL");
    assert.ok(gone, "the command and its children died with the runner");
  });

  it("a timeout kills the command and its children", async () => {
    const file = join(dir.path, "timeout.pids");
    const run = runBound("sh", tree(file), { timeoutMs: 5_000 });
    const pids = await pidsIn(file);
    await assert.rejects(run);
    const gone = await eventually(async () => !(await anyAlive(pids)), 20_000);
    for (const pid of pids) if (!gone && (await alive(pid))) process.kill(pid, "SIGKILL");
    assert.ok(gone, "the command and its children died at the timeout");
  });
});
