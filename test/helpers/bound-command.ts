/**
 * A long command a test runs to its end (the image test's `scripts/local-image.sh build`: buildah
 * and every process it starts), which cannot outlive the test, nor its own timeout.
 *
 *   const { stdout } = await runBound("bash", ["scripts/local-image.sh", "build"], { timeoutMs });
 *
 * The command runs in its own session (so its process group is its own) under a small shell
 * watchdog holding the read end of a pipe from this process: when the pipe closes — the test
 * process died in any way, even SIGKILL, or the timeout closed it — the watchdog stops the
 * command's process tree top-down (so nothing is re-parented away while it walks) and kills it
 * with the process group. A command that ends leaves no process of its group behind either.
 * (peer-process.ts is the same idea for a server a test starts and stops.)
 */
import { spawn } from "node:child_process";

export interface BoundCommandOptions {
  readonly timeoutMs: number;
  /** Most bytes kept of stdout and of stderr (default 16 MiB); beyond, the command is killed. */
  readonly maxBuffer?: number;
  readonly env?: NodeJS.ProcessEnv;
}

/** A failed command: its exit code (null when killed) and its output, for the test's message. */
export class BoundCommandError extends Error {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;

  constructor(message: string, result: { code: number | null; stdout: string; stderr: string }) {
    super(message);
    this.name = "BoundCommandError";
    this.code = result.code;
    this.stdout = result.stdout;
    this.stderr = result.stderr;
  }
}

const WATCHDOG = `
exec 3<&0
setsid "$0" "$@" </dev/null &
pid=$!
stop_tree() {
  kill -STOP "$1" 2>/dev/null
  echo "$1"
  for child in $(pgrep -P "$1"); do stop_tree "$child"; done
}
kill_all() {
  tree=$(stop_tree "$pid")
  for each in $tree; do [ "$each" = "$pid" ] || kill -KILL "$each" 2>/dev/null; done
  # The command (its group's leader) last: its end wakes the shell, which then stops this one.
  kill -KILL "-$pid" 2>/dev/null
}
( read -r _ <&3; kill_all ) &
watchdog=$!
wait "$pid"
status=$?
kill "$watchdog" 2>/dev/null
kill -KILL "-$pid" 2>/dev/null
exit "$status"
`;

export function runBound(
  command: string,
  args: readonly string[],
  options: BoundCommandOptions,
): Promise<{ stdout: string; stderr: string }> {
  const maxBuffer = options.maxBuffer ?? 16 << 20;
  const child = spawn("sh", ["-c", WATCHDOG, command, ...args], {
    stdio: ["pipe", "pipe", "pipe"],
    ...(options.env === undefined ? {} : { env: options.env }),
  });
  child.stdin.on("error", () => undefined);
  const output = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
  const sizes = { stdout: 0, stderr: 0 };
  let failure: string | undefined;
  /** Closing the pipe is what makes the watchdog kill the command's tree. */
  const stop = (why: string): void => {
    failure ??= why;
    child.stdin.destroy();
  };
  for (const stream of ["stdout", "stderr"] as const) {
    child[stream].on("data", (chunk: Buffer) => {
      sizes[stream] += chunk.length;
      if (sizes[stream] > maxBuffer) stop(`${stream} exceeded ${maxBuffer} bytes`);
      else output[stream].push(chunk);
    });
  }
  const timer = setTimeout(() => stop(`timed out after ${options.timeoutMs} ms`), options.timeoutMs);
  return new Promise((resolve, reject) => {
    child.once("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.once("close", (code) => {
      clearTimeout(timer);
      const result = {
        code,
        stdout: Buffer.concat(output.stdout).toString("utf8"),
        stderr: Buffer.concat(output.stderr).toString("utf8"),
      };
      if (failure === undefined && code === 0) resolve(result);
      else reject(new BoundCommandError(`${command} ${failure ?? `exited with ${code}`}`, result));
    });
  });
}
