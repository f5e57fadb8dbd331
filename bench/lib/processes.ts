/**
 * The processes a bench starts (the real `authority sidecar`, reference servers, Envoy's
 * neighbours) and what it reads about them from /proc: CPU time, RSS. Children still running
 * when the bench exits are killed.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { SIDECAR_GLIBC_TUNABLES, SIDECAR_NODE_OPTIONS } from "../../src/servers/inject/patch.ts";

/**
 * The servers run with the settings the injector gives the sidecar's container
 * (docs/sidecar.md, "Memory"): its NODE_OPTIONS (SIDECAR_NODE_OPTIONS: a small young
 * generation — V8's otherwise grows to 16–32 MB semi-spaces under allocation-heavy load — and
 * a bounded old generation, which otherwise grows to about twice the live heap),
 * MALLOC_ARENA_MAX=2 (glibc keeps per-thread arenas of freed memory otherwise), GLIBC_TUNABLES
 * (SIDECAR_GLIBC_TUNABLES: compiler zones' segments mapped, not kept in the arenas) and a warm
 * NODE_COMPILE_CACHE (compiled code, and no TypeScript stripping at start: its WebAssembly
 * instance alone is ~17 MB). The no-op server gets the same settings, so the comparison is of
 * the work done, not of heap settings. BENCH_SIDECAR_NODE_FLAGS overrides the flags ("" for
 * none); BENCH_SIDECAR_PLAIN_ENV=1 drops the two environment settings.
 */
export const SERVER_NODE_FLAGS = (process.env.BENCH_SIDECAR_NODE_FLAGS ?? SIDECAR_NODE_OPTIONS)
  .split(" ")
  .filter((flag) => flag.length > 0);
/** Filled in by prepareServerEnv(): the compile cache lives in the bench's temporary directory. */
export const SERVER_ENV: Record<string, string> = {};

export interface ChildServer {
  readonly child: ChildProcess;
  readonly ports: { grpc: number; proxy: number; metrics: number };
  stop(): Promise<void>;
}

export function waitForLine(
  child: ChildProcess,
  match: (line: string) => boolean,
  timeoutMs = 20_000,
): Promise<string> {
  return new Promise((resolve, reject) => {
    let buffer = "";
    let errors = "";
    const timer = setTimeout(
      () => reject(new Error(`child did not start: ${errors.slice(-2000)}`)),
      timeoutMs,
    );
    child.stderr?.on("data", (chunk: Buffer) => {
      errors += chunk.toString("utf8");
    });
    child.stdout?.on("data", (chunk: Buffer) => {
      buffer += chunk.toString("utf8");
      let newline = buffer.indexOf("\n");
      while (newline !== -1) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        if (match(line)) {
          clearTimeout(timer);
          resolve(line);
        }
        newline = buffer.indexOf("\n");
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`child exited with ${code}: ${errors.slice(-2000)}`));
    });
  });
}

/** Children still running when this process exits (even on an uncaught error) are killed. */
const liveChildren = new Set<ChildProcess>();
let exitHookInstalled = false;

export function track(child: ChildProcess): ChildProcess {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once("exit", () => {
      for (const running of liveChildren) running.kill("SIGKILL");
    });
    // Stopped by a signal (Ctrl-C, a timeout): exit through the hook above, children included.
    for (const signal of ["SIGINT", "SIGTERM"] as const) process.once(signal, () => process.exit(130));
  }
  liveChildren.add(child);
  child.once("exit", () => liveChildren.delete(child));
  return child;
}

export function stopChild(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) {
      resolve();
      return;
    }
    const guard = setTimeout(() => child.kill("SIGKILL"), 15_000);
    child.once("exit", () => {
      clearTimeout(guard);
      resolve();
    });
    child.kill("SIGTERM");
  });
}

/**
 * `cli`: `node bin/authority.ts sidecar`, exactly as deployed. `command`: the same
 * `authority sidecar` command (src/cli/commands/sidecar.ts: same flags, same run()) registered
 * alone, without the modules of every other subcommand that src/cli/main.ts may import.
 */
export async function startSidecarProcess(
  env: Record<string, string>,
  entry: "cli" | "command",
  /** Another checkout of this repository to run the sidecar from (BENCH_SIDECAR_BEFORE). */
  tree?: string,
): Promise<ChildServer> {
  const root = tree === undefined ? new URL("../../", import.meta.url) : pathToFileURL(`${tree}/`);
  const bin = fileURLToPath(new URL("bin/authority.ts", root));
  const command = new URL("src/cli/commands/sidecar.ts", root).href;
  const code = `
    const { Command } = await import("commander");
    const { register } = await import(${JSON.stringify(command)});
    const program = new Command("authority");
    register(program);
    await program.parseAsync(["node", "authority", "sidecar"]);
  `;
  const args = entry === "cli" ? [bin, "sidecar"] : ["--input-type=module", "-e", code];
  const child = track(
    spawn(process.execPath, [...SERVER_NODE_FLAGS, ...args], {
      // Each sidecar its own decision journal (one owner per journal), as each pod has.
      env: {
        ...process.env,
        ...SERVER_ENV,
        AUTHORITY_SIDECAR_JOURNAL_DIR: await mkdtemp(join(tmpdir(), "bench-sidecar-journal-")),
        ...env,
        AUTHORITY_LOG_LEVEL: "info",
      },
      stdio: ["ignore", "pipe", "pipe"],
    }),
  );
  const line = await waitForLine(child, (text) => text.includes('"sidecar listening"'));
  const parsed = JSON.parse(line) as { grpcPort: number; proxyPort: number; metricsPort: number };
  child.stdout?.resume();
  return {
    child,
    ports: { grpc: parsed.grpcPort, proxy: parsed.proxyPort, metrics: parsed.metricsPort },
    stop: () => stopChild(child),
  };
}

/**
 * scripts/warm-compile-cache.ts with the servers' Node flags, into SERVER_ENV's cache. Node keys
 * the cache by V8 flags: a server started with more of them (`--trace-gc`) misses a cache filled
 * without them, and compiles every module again (TypeScript stripping included: ≈ 10 MB more RSS
 * under load) unless the cache is also filled with `extraFlags`.
 */
export async function warmCompileCache(extraFlags: readonly string[] = []): Promise<void> {
  const script = fileURLToPath(new URL("../../scripts/warm-compile-cache.ts", import.meta.url));
  const child = spawn(process.execPath, [...SERVER_NODE_FLAGS, ...extraFlags, script], {
    env: { ...process.env, ...SERVER_ENV },
    stdio: ["ignore", "ignore", "inherit"],
  });
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  if (code !== 0) throw new Error(`warm-compile-cache exited with ${code}`);
}

/** VmRSS of a process in bytes (Linux), sampled every 100 ms while `sampling` runs. */
export function rssSampler(pid: number | undefined) {
  let max = 0;
  const read = (): void => {
    if (pid === undefined) return;
    try {
      const status = readFileSync(`/proc/${pid}/status`, "utf8");
      const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
      max = Math.max(max, kb * 1024);
    } catch {
      // The process is gone or /proc is unavailable: no sample.
    }
  };
  const timer = setInterval(read, 100);
  read();
  return {
    stop(): number {
      clearInterval(timer);
      read();
      return max;
    },
  };
}

/** CPU time (ms) a process has used, all its threads (Linux schedstat, ns resolution); NaN if unknown. */
export function cpuMs(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN;
  try {
    let total = 0;
    for (const task of readdirSync(`/proc/${pid}/task`)) {
      try {
        total += Number(readFileSync(`/proc/${pid}/task/${task}/schedstat`, "utf8").split(" ")[0]);
      } catch {
        // The thread ended meanwhile.
      }
    }
    return total / 1e6;
  } catch {
    return Number.NaN;
  }
}

/** The redis-server serving `port` (the test helper runs it under a watchdog). */
export function redisPid(port: number): number | undefined {
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8");
      if (cmdline.startsWith("redis-server") && cmdline.includes(`:${port}`)) return Number(entry);
    } catch {
      // Gone.
    }
  }
  return undefined;
}

/** cpuMs in µs: the per-thread schedstat sum, for differences of a few µs per call. */
export function schedCpuUs(pid: number | undefined): number {
  return cpuMs(pid) * 1000;
}

/**
 * CPU time (ms) a process has used, all its threads: utime + stime from /proc/<pid>/stat
 * (clock ticks, usually 10 ms); NaN if unknown. Coarser than cpuMs but what `top` and
 * cgroups account, and it needs no schedstat.
 */
export function statCpuMs(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name (field 2) may hold spaces: the fields after it start past its ")".
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const ticks = Number(fields[11]) + Number(fields[12]);
    return (ticks * 1000) / CLOCK_TICKS_PER_SECOND;
  } catch {
    return Number.NaN;
  }
}

/** USER_HZ: 100 on every Linux ABI Node runs on. */
const CLOCK_TICKS_PER_SECOND = 100;

/** VmRSS of a process in bytes now (0 when unknown). */
export function rssBytes(pid: number | undefined): number {
  if (pid === undefined) return 0;
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) * 1024;
  } catch {
    return 0;
  }
}

/**
 * The servers' environment of prepareServerEnv(): a warm compile cache in `dir` and
 * MALLOC_ARENA_MAX=2 and GLIBC_TUNABLES, as the sidecar's container runs (unless
 * BENCH_SIDECAR_PLAIN_ENV=1).
 */
export async function prepareServerEnv(dir: string): Promise<void> {
  if (process.env.BENCH_SIDECAR_PLAIN_ENV === "1") return;
  SERVER_ENV.NODE_COMPILE_CACHE = join(dir, "compile-cache");
  SERVER_ENV.MALLOC_ARENA_MAX = "2";
  SERVER_ENV.GLIBC_TUNABLES = SIDECAR_GLIBC_TUNABLES;
  await warmCompileCache();
}

/**
 * Runs module code in a process of its own with the servers' flags and environment; the code
 * prints "<tag> <port>" once listening and exits on SIGTERM.
 */
export async function startScriptProcess(
  code: string,
  tag: string,
): Promise<{ child: ChildProcess; port: number; stop(): Promise<void> }> {
  const script = `${code}\nprocess.on("SIGTERM", () => process.exit(0));`;
  const child = track(
    spawn(process.execPath, [...SERVER_NODE_FLAGS, "--input-type=module", "-e", script], {
      env: { ...process.env, ...SERVER_ENV },
      stdio: ["ignore", "pipe", "pipe"],
    }),
  );
  const line = await waitForLine(child, (text) => text.startsWith(`${tag} `));
  child.stdout?.resume();
  return { child, port: Number(line.split(" ")[1]), stop: () => stopChild(child) };
}
