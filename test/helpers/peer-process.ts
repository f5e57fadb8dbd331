/**
 * A peer binary (Envoy, PostgreSQL, …) run by a test, which cannot outlive the test process.
 *
 *   const peer = startPeerProcess({ command: envoy, args: ["-c", file] });
 *   await peer.stop();        // stopSignal (default SIGTERM), then SIGKILL after graceMs
 *   peer.output()             // the last 64 KiB of stdout + stderr, for a failing test's message
 *
 * The binary runs under a small shell watchdog holding the read end of a pipe from this
 * process (as test/helpers/redis-server.ts does): if the test process dies in any way, even
 * SIGKILL, the pipe closes and the watchdog kills the peer.
 */
import { type ChildProcessByStdio, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import type { Readable, Writable } from "node:stream";
import { fileURLToPath } from "node:url";

export interface PeerProcessOptions {
  readonly command: string;
  readonly args?: readonly string[];
  readonly cwd?: string;
  readonly env?: NodeJS.ProcessEnv;
  /** The signal for a graceful stop (PostgreSQL: SIGINT, its "fast" shutdown). */
  readonly stopSignal?: NodeJS.Signals;
}

export interface PeerProcess {
  /** The peer's own pid (not the watchdog's). */
  readonly pid: Promise<number>;
  readonly exited: Promise<number | null>;
  readonly running: boolean;
  output(): string;
  stop(graceMs?: number): Promise<void>;
  kill(): Promise<void>;
}

const WATCHDOG = `
exec 3<&0
"$0" "$@" <&- &
pid=$!
echo "pid:$pid" >&2
( read -r _ <&3; kill -KILL "$pid" 2>/dev/null ) &
watchdog=$!
wait "$pid"
status=$?
kill "$watchdog" 2>/dev/null
exit "$status"
`;

const live = new Set<ChildProcessByStdio<Writable, Readable, Readable>>();
let exitHookInstalled = false;

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));

/** A tool `scripts/ensure-test-peers.sh` installs into .tools/bin; throws, naming it, when absent. */
/**
 * Tests stop processes at will: an authority process started here has no SIGTERM drain
 * period unless its test sets one (the drain tests do), so a stop takes no 5 s default wait.
 */
function withoutDrain(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return { AUTHORITY_SHUTDOWN_WAIT: "0", AUTHORITY_SIDECAR_SHUTDOWN_WAIT_MS: "0", ...env };
}

export function projectTool(name: "envoy" | "helm" | "opa"): string {
  const path = `${repoRoot}.tools/bin/${name}`;
  if (!existsSync(path)) {
    throw new Error(
      `${name} is not installed in .tools/bin: run scripts/ensure-test-peers.sh (make test does)`,
    );
  }
  return path;
}

export function startPeerProcess(options: PeerProcessOptions): PeerProcess {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once("exit", () => {
      for (const child of live) child.kill("SIGKILL");
    });
  }
  const child = spawn("sh", ["-c", WATCHDOG, options.command, ...(options.args ?? [])], {
    stdio: ["pipe", "pipe", "pipe"],
    ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
    env: withoutDrain(options.env ?? process.env),
  });
  live.add(child);
  child.stdin.on("error", () => undefined);
  let text = "";
  let running = true;
  const append = (chunk: Buffer): void => {
    text = (text + chunk.toString("utf8")).slice(-65_536);
  };
  child.stdout.on("data", append);
  child.stderr.on("data", append);
  const exited = new Promise<number | null>((resolve) => {
    child.once("exit", (code) => {
      running = false;
      live.delete(child);
      resolve(code);
    });
  });
  const pid = new Promise<number>((resolve, reject) => {
    const onData = (): void => {
      const match = /pid:(\d+)/.exec(text);
      if (match?.[1] !== undefined) {
        child.stderr.off("data", onData);
        resolve(Number(match[1]));
      }
    };
    child.stderr.on("data", onData);
    void exited.then(() => reject(new Error(`${options.command} exited at once: ${text}`)));
  });
  pid.catch(() => undefined);
  const signal = async (sig: NodeJS.Signals): Promise<void> => {
    if (!running) return;
    try {
      process.kill(await pid, sig);
    } catch {
      // already gone
    }
  };
  return {
    pid,
    exited,
    get running() {
      return running;
    },
    output: () => text,
    async stop(graceMs = 5000) {
      if (!running) return;
      await signal(options.stopSignal ?? "SIGTERM");
      const timer = setTimeout(() => void signal("SIGKILL"), graceMs);
      await exited;
      clearTimeout(timer);
    },
    async kill() {
      if (!running) return;
      await signal("SIGKILL");
      await exited;
    },
  };
}
