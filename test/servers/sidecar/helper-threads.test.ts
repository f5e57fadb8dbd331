import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { HELPER_THREAD_NICENESS } from "../../../src/servers/sidecar/helper-threads.ts";
import { type SidecarProcess, startSidecarProcess } from "../../helpers/sidecar-process.ts";
import { makeTempDir, type TempDir } from "../../helpers/temp-dir.ts";
import { sidecarProcessEnv } from "./sidecar-process.ts";
import { startWorld, type World } from "./world.ts";

/**
 * Decision 3092: a sidecar's V8 helper threads run at the lowest priority, so that on the one
 * core a sidecar is given they never hold the event loop off its Checks; the main thread and
 * libuv's threads keep theirs. Read from /proc, as the kernel schedules them.
 */
const module = new URL("../../../src/servers/sidecar/helper-threads.ts", import.meta.url).href;

interface Thread {
  readonly name: string;
  readonly niceness: number;
}

/** A task's name and niceness from /proc/<pid>/task/<tid>/stat (the name may hold spaces and parentheses). */
function threadOf(stat: string): Thread {
  const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return { name, niceness: Number(fields[16]) }; // field 19 of stat(5); fields[0] is field 3
}

function threadsOf(pid: number | "self"): Thread[] {
  const dir = `/proc/${pid}/task`;
  return readdirSync(dir).map((task) => threadOf(readFileSync(join(dir, task, "stat"), "utf8")));
}

const niceness = (threads: readonly Thread[], name: string) =>
  threads.filter((thread) => thread.name === name).map((thread) => thread.niceness);

describe("V8's helper threads at the lowest priority (decision 3092)", {
  skip: process.platform !== "linux",
}, () => {
  it("lowers every V8 helper thread of its process, and no other thread", () => {
    const script = `const m = await import(${JSON.stringify(module)}); const lowered = m.lowerHelperThreadPriority();
      const fs = await import("node:fs"); const threads = fs.readdirSync("/proc/self/task").map((t) => fs.readFileSync("/proc/self/task/" + t + "/stat", "utf8"));
      process.stdout.write(JSON.stringify({ lowered, threads }));`;
    const child = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
    assert.equal(child.status, 0, child.stderr);
    const { lowered, threads } = JSON.parse(child.stdout) as { lowered: number; threads: string[] };
    const parsed = threads.map(threadOf);
    const helpers = niceness(parsed, "V8Worker");
    assert.ok(helpers.length > 0, JSON.stringify(parsed));
    assert.equal(lowered, helpers.length);
    assert.deepEqual(
      helpers,
      helpers.map(() => HELPER_THREAD_NICENESS),
    );
    for (const thread of parsed.filter((t) => t.name !== "V8Worker"))
      assert.equal(thread.niceness, 0, thread.name);
  });

  describe("the `authority sidecar` process", () => {
    let world: World;
    let dir: TempDir;
    let sidecar: SidecarProcess | undefined;
    before(async () => {
      world = await startWorld();
      dir = await makeTempDir("helper-threads-");
    });
    after(async () => {
      await sidecar?.peer.stop();
      await dir?.cleanup();
      await world?.close();
    });

    it("runs its helpers at the lowest priority once ready, and its event loop at its own", async () => {
      const env = await sidecarProcessEnv(world, dir.path, {
        AUTHORITY_SIDECAR_JOURNAL_DIR: join(dir.path, "journal"),
        AUTHORITY_SIDECAR_SHUTDOWN_WAIT_MS: "0",
      });
      sidecar = await startSidecarProcess(env, {
        command: process.execPath,
        args: ["bin/authority.ts", "sidecar"],
      });
      await sidecar.untilReady();
      // Lowered once ready: read until the change shows (a loaded machine may delay it).
      const pid = await sidecar.peer.pid;
      let threads = threadsOf(pid);
      for (let wait = 0; wait < 100 && niceness(threads, "V8Worker").some((n) => n === 0); wait++) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        threads = threadsOf(pid);
      }
      const helpers = niceness(threads, "V8Worker");
      assert.ok(helpers.length > 0, JSON.stringify(threads));
      assert.deepEqual(
        helpers,
        helpers.map(() => HELPER_THREAD_NICENESS),
      );
      assert.deepEqual(niceness(threads, "MainThread"), [0], JSON.stringify(threads));
    });
  });
});
