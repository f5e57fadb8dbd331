/**
 * `make bench ONLY=sidecar-start`: what one pod pays for its sidecar before and between
 * requests, over several fresh `authority sidecar` processes started exactly as the injector
 * runs them (its NODE_OPTIONS, MALLOC_ARENA_MAX=2, the image's warm compile cache) against a
 * running authority, IdP and Redis (bench/lib/bench-world.ts):
 *
 * - start → first allowed Check: Checks are sent from the moment the process is spawned (one
 *   at a time, each with Envoy's 0.25 s timeout, as a pod's Envoy would forward them) until
 *   one is allowed; the refusals before it are counted;
 * - start → `/readyz` 200, and the first Check sent once it is: it must be allowed (a 503
 *   there means readiness said ready before a Check could meet its deadline);
 * - idle CPU (ms of CPU per second, all threads, from /proc schedstat) and idle RSS, a few
 *   seconds after that first Check;
 * - under load: RSS (max VmRSS), CPU per Check and the longest event-loop stall at 1,000 Checks
 *   per second, open loop, from a load generator of its own (bench/sidecar.ts's).
 *
 * Every round is a new process, started both ways the image starts one, alternated: from the
 * sources and from the V8 start-up snapshot (built here as `make sidecar-snapshot` builds it;
 * decision 2799), the latter by bin/authority-sidecar as the injector runs it (decision 2951).
 * The start-up figures are medians and maxima over the rounds.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Client, credentials } from "@grpc/grpc-js";
import { SNAPSHOT_ENV } from "../src/cli/sidecar-snapshot.ts";
import { checkMethod, type Decoded, envoyCheckRequest, unary } from "../test/servers/sidecar/grpc/helpers.ts";
import { UPSTREAM_HOST } from "./lib/bench-world.ts";
import {
  cpuMs,
  prepareServerEnv,
  rssBytes,
  rssSampler,
  SERVER_ENV,
  SERVER_NODE_FLAGS,
  stopChild,
  track,
  waitForLine,
  warmCompileCache,
} from "./lib/processes.ts";
import type { Stall } from "./lib/stall-probe.ts";
import type { Table } from "./report.ts";
import { checkRequestBytes, type Loader, startLoader, startNoopProcess } from "./sidecar.ts";

export interface SidecarStartOptions {
  /** Fresh processes per start-up measurement (default 5). */
  readonly rounds?: number;
  /** Idle CPU window per round (default 10 s). */
  readonly idleMs?: number;
  /** Measured phase at 1,000 Checks/s (default 10 s, after 2 s of warm-up). */
  readonly loadMs?: number;
}

const ENVOY_TIMEOUT_MS = 250;
const START_TARGET_MS = 250;
const RSS_TARGET_MB = 80;
const IDLE_TARGET_MS_PER_S = 2;
const STALL_TARGET_MS = 5;
const LOAD_RATE = 1000;

const REPO = fileURLToPath(new URL("../", import.meta.url));
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const median = (values: readonly number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)] ?? Number.NaN;
};
const round1 = (n: number) => Math.round(n * 10) / 10;
const mb = (bytes: number) => round1(bytes / (1024 * 1024));

interface Spawned {
  readonly child: ChildProcess;
  readonly startedAt: number;
  readonly ports: { grpc: number; metrics: number };
  readonly listenMs: number;
  stop(): Promise<void>;
}

/**
 * `authority sidecar` from the moment of the spawn: as the injector runs it (`script`:
 * bin/authority-sidecar, the Node flags in NODE_OPTIONS), or as `node <flags> bin/authority.ts
 * sidecar`.
 */
async function spawnSidecar(
  env: Record<string, string>,
  {
    extraFlags = [],
    script = false,
  }: { readonly extraFlags?: readonly string[]; readonly script?: boolean } = {},
): Promise<Spawned> {
  const journal = await mkdtemp(join(tmpdir(), "bench-sidecar-start-"));
  const flags = [...SERVER_NODE_FLAGS, ...extraFlags];
  const startedAt = performance.now();
  const child = track(
    spawn(
      script ? "bin/authority-sidecar" : process.execPath,
      script ? [] : [...flags, "bin/authority.ts", "sidecar"],
      {
        cwd: REPO,
        env: {
          ...process.env,
          ...SERVER_ENV,
          ...env,
          ...(script
            ? {
                NODE_OPTIONS: flags.join(" "),
                PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ""}`,
              }
            : {}),
          AUTHORITY_SIDECAR_JOURNAL_DIR: journal,
          AUTHORITY_SIDECAR_SHUTDOWN_WAIT_MS: "0",
          AUTHORITY_LOG_LEVEL: "info",
        },
        stdio: ["ignore", "pipe", "pipe"],
      },
    ),
  );
  const line = await waitForLine(child, (text) => text.includes('"sidecar listening"'));
  const listenMs = performance.now() - startedAt;
  child.stdout?.resume();
  const parsed = JSON.parse(line) as { grpcPort: number; metricsPort: number };
  return {
    child,
    startedAt,
    listenMs,
    ports: { grpc: parsed.grpcPort, metrics: parsed.metricsPort },
    stop: () => stopChild(child),
  };
}

type Outcome = "allowed" | `denied ${string}` | "no answer";

async function check(client: Client, token: string, id: string): Promise<Outcome> {
  const request = envoyCheckRequest({
    method: "GET",
    path: "/orders/42",
    host: UPSTREAM_HOST,
    headers: { authorization: `Bearer ${token}` },
    contextExtensions: {},
    id,
  });
  try {
    const response: Decoded = await unary(client, checkMethod, request, ENVOY_TIMEOUT_MS);
    if (response.status?.code === 0) return "allowed";
    return `denied ${String(response.denied_response?.status?.code ?? "?")}`;
  } catch {
    // not listening yet, or no answer within Envoy's timeout
    return "no answer";
  }
}

async function readyzOk(metricsPort: number): Promise<boolean> {
  const response = await fetch(`http://127.0.0.1:${metricsPort}/readyz`).catch(() => undefined);
  await response?.arrayBuffer();
  return response?.status === 200;
}

interface FirstAllowed {
  readonly listenMs: number;
  readonly cpuMs: number;
  readonly firstAllowedMs: number;
  readonly refusedBefore: Readonly<Record<string, number>>;
}

/** Checks one after another from the spawn until one is allowed. */
async function firstAllowedRound(start: StartKind, token: string, round: number) {
  const sidecar = await spawnSidecar(start.env, { script: start.script });
  const client = new Client(`127.0.0.1:${sidecar.ports.grpc}`, credentials.createInsecure());
  try {
    const refused: Record<string, number> = {};
    for (let attempt = 0; ; attempt++) {
      const outcome = await check(client, token, `start-${round}-${attempt}`);
      if (outcome === "allowed") {
        return {
          listenMs: sidecar.listenMs,
          cpuMs: cpuMs(sidecar.child.pid),
          firstAllowedMs: performance.now() - sidecar.startedAt,
          refusedBefore: refused,
        } satisfies FirstAllowed;
      }
      refused[outcome] = (refused[outcome] ?? 0) + 1;
      if (performance.now() - sidecar.startedAt > 30_000) throw new Error("no allowed Check within 30 s");
      await sleep(5);
    }
  } finally {
    client.close();
    await sidecar.stop();
  }
}

interface StartKind {
  readonly name: string;
  readonly env: Record<string, string>;
  /** Started by bin/authority-sidecar, the injected command. */
  readonly script: boolean;
  readonly firsts: FirstAllowed[];
  readonly readies: ReadyRound[];
}

/** `make sidecar-snapshot` into `dir` (returned): the snapshot the image builds. */
function buildSnapshot(dir: string): string {
  const built = spawnSync(process.execPath, ["scripts/build-sidecar-snapshot.ts", dir], {
    cwd: REPO,
    encoding: "utf8",
  });
  if (built.status !== 0) throw new Error(`the sidecar snapshot could not be built: ${built.stderr}`);
  return dir;
}

interface ReadyRound {
  readonly readyMs: number;
  readonly firstAfterReady: Outcome;
  readonly firstAfterReadyMs: number;
  readonly idleCpuMsPerSec: number;
  readonly idleRss: number;
}

/** `/readyz` polled from the spawn; at 200, one Check; then the idle process is watched. */
async function readyRound(
  start: StartKind,
  token: string,
  round: number,
  idleMs: number,
): Promise<ReadyRound> {
  const sidecar = await spawnSidecar(start.env, { script: start.script });
  const client = new Client(`127.0.0.1:${sidecar.ports.grpc}`, credentials.createInsecure());
  try {
    while (!(await readyzOk(sidecar.ports.metrics))) {
      if (performance.now() - sidecar.startedAt > 30_000) throw new Error("not ready within 30 s");
      await sleep(5);
    }
    const readyMs = performance.now() - sidecar.startedAt;
    const sent = performance.now();
    const firstAfterReady = await check(client, token, `ready-${round}`);
    const firstAfterReadyMs = performance.now() - sent;
    // Idle: what the process does by itself once it serves (its timers, the lease, Redis).
    await sleep(2000);
    const pid = sidecar.child.pid;
    const before = cpuMs(pid);
    await sleep(idleMs);
    const idleCpuMsPerSec = ((cpuMs(pid) - before) * 1000) / idleMs;
    return { readyMs, firstAfterReady, firstAfterReadyMs, idleCpuMsPerSec, idleRss: rssBytes(pid) };
  } finally {
    client.close();
    await sidecar.stop();
  }
}

/** The longest event-loop delay the sidecar saw since the last scrape (prom-client resets it per scrape). */
async function eventLoopMaxMs(metricsPort: number): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const match = /^nodejs_eventloop_lag_max_seconds(?:\{[^}]*\})? (\S+)$/m.exec(text);
  return match === null ? Number.NaN : Number(match[1]) * 1000;
}

/** V8's pause of each collection, from `--trace-gc` lines ("… 1.23 / 0.00 ms …"), while `recording`. */
function gcPauses(child: ChildProcess) {
  let recording = false;
  const pauses: number[] = [];
  const markCompacts: number[] = [];
  let buffer = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    buffer += chunk.toString("utf8");
    const lines = buffer.split("\n");
    buffer = lines.pop() ?? "";
    if (!recording) return;
    for (const line of lines) {
      const pause = / ms: (?:Scavenge|Mark-Compact|Minor Mark-Sweep)\b.*?, ([\d.]+) \/ [\d.]+ ms/.exec(line);
      if (pause === null) continue;
      pauses.push(Number(pause[1]));
      if (line.includes(" ms: Mark-Compact")) markCompacts.push(Number(pause[1]));
    }
  });
  return {
    start() {
      recording = true;
    },
    stop() {
      recording = false;
      return {
        maxMs: Math.max(0, ...pauses),
        medianMs: median(pauses),
        count: pauses.length,
        markCompacts: markCompacts.length,
        markCompactMaxMs: Math.max(0, ...markCompacts),
      };
    },
  };
}

interface MemorySample {
  readonly rss: number;
  readonly pss: number;
  readonly privateBytes: number;
}

/**
 * The process's memory at its largest RSS while sampling (/proc/<pid>/smaps_rollup, every
 * 250 ms): RSS counts the Node binary's file pages, shared by every process that maps them
 * (every sidecar of a node); PSS divides shared pages among their sharers; private pages are
 * this process's alone.
 */
function memorySampler(pid: number | undefined) {
  let max: MemorySample = { rss: 0, pss: 0, privateBytes: 0 };
  const kb = (text: string, field: string) =>
    Number(new RegExp(`^${field}:\\s+(\\d+)`, "m").exec(text)?.[1] ?? 0) * 1024;
  const read = (): void => {
    if (pid === undefined) return;
    try {
      const text = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
      const rss = kb(text, "Rss");
      if (rss <= max.rss) return;
      max = {
        rss,
        pss: kb(text, "Pss"),
        privateBytes: kb(text, "Private_Clean") + kb(text, "Private_Dirty"),
      };
    } catch {
      // The process is gone or /proc is unavailable: no sample.
    }
  };
  const timer = setInterval(read, 250);
  read();
  return {
    stop(): MemorySample {
      clearInterval(timer);
      read();
      return max;
    },
  };
}

/** Loaded into the sidecar under load: its stalls, each with its CPU, run-queue wait and GC (stall-probe.ts). */
const STALL_PROBE = fileURLToPath(new URL("./lib/stall-probe.ts", import.meta.url));

/** The stalls the probe wrote that began inside [from, to] (epoch ms). */
function stallsBetween(file: string, from: number, to: number): Stall[] {
  let text = "";
  try {
    text = readFileSync(file, "utf8");
  } catch {
    // No stall written.
  }
  return text
    .split("\n")
    .filter((line) => line.length > 0)
    .map((line) => JSON.parse(line) as Stall)
    .filter((stall) => stall.atMs >= from && stall.atMs <= to);
}

/**
 * Stalls over the target: how many, the longest, and how much of them was waiting for a core or
 * GC; and the sidecar's own ones, whose lag beside the time waiting for a core (a machine shared
 * with the load generator and other work) still exceeds the target.
 */
function summarizeStalls(stalls: readonly Stall[]) {
  const over = stalls.filter((stall) => stall.lagMs > STALL_TARGET_MS);
  const ownMs = (stall: Stall) => stall.lagMs - stall.runQueueMs;
  const own = over.filter((stall) => ownMs(stall) > STALL_TARGET_MS);
  const longest = over.reduce<Stall | undefined>(
    (a, b) => (a === undefined || b.lagMs > a.lagMs ? b : a),
    undefined,
  );
  const sum = (pick: (stall: Stall) => number) => over.reduce((total, stall) => total + pick(stall), 0);
  return {
    count: over.length,
    longest,
    lagMs: sum((stall) => stall.lagMs),
    runQueueMs: sum((stall) => stall.runQueueMs),
    cpuMs: sum((stall) => stall.cpuMs),
    gcMs: sum((stall) => stall.gcMs),
    own: own.length,
    ownLongest: own.reduce<Stall | undefined>(
      (a, b) => (a === undefined || ownMs(b) > ownMs(a) ? b : a),
      undefined,
    ),
  };
}

/**
 * The floor: the no-op grpc-js Check server (Node, @grpc/grpc-js and @grpc/proto-loader, the
 * stack DESIGN.md mandates, with the sidecar's flags and environment) under the same load, in
 * the same run, measured the same way.
 */
async function noopUnderLoad(loader: Loader, request: number[], loadMs: number) {
  // Its own modules are outside src/: a first start fills the compile cache (else it would load
  // Node's TypeScript stripper, ≈ 12 MB more RSS under load, as a deployed sidecar does not).
  await (await startNoopProcess()).stop();
  const noop = await startNoopProcess();
  try {
    const task = { kind: "fixed", port: noop.ports.grpc, rate: LOAD_RATE, request } as const;
    await loader.run({ ...task, durationMs: 2000, warmupMs: 0 });
    const pid = noop.child.pid;
    const rss = rssSampler(pid);
    const memory = memorySampler(pid);
    const cpuBefore = cpuMs(pid);
    const result = await loader.run({ ...task, durationMs: loadMs, warmupMs: 0 });
    const cpuUsPerCheck = ((cpuMs(pid) - cpuBefore) * 1000) / Math.max(1, result.calls);
    return { maxRss: rss.stop(), atMax: memory.stop(), cpuUsPerCheck };
  } finally {
    await noop.stop();
  }
}

async function underLoad(env: Record<string, string>, token: string, loadMs: number) {
  const stallsFile = join(await mkdtemp(join(tmpdir(), "bench-stalls-")), "stalls.jsonl");
  const sidecar = await spawnSidecar(
    { ...env, STALL_PROBE_OUT: stallsFile },
    { extraFlags: ["--trace-gc", "--import", STALL_PROBE] },
  );
  const gc = gcPauses(sidecar.child);
  const loader = startLoader();
  try {
    const client = new Client(`127.0.0.1:${sidecar.ports.grpc}`, credentials.createInsecure());
    while (!(await readyzOk(sidecar.ports.metrics))) await sleep(20);
    await check(client, token, "load-warm");
    client.close();
    const request = await checkRequestBytes(token, "/orders/42");
    const task = { kind: "fixed", port: sidecar.ports.grpc, rate: LOAD_RATE, request } as const;
    await loader.run({ ...task, durationMs: 2000, warmupMs: 0 });
    await eventLoopMaxMs(sidecar.ports.metrics);
    const pid = sidecar.child.pid;
    const rss = rssSampler(pid);
    const memory = memorySampler(pid);
    const cpuBefore = cpuMs(pid);
    gc.start();
    const from = Date.now();
    const result = await loader.run({ ...task, durationMs: loadMs, warmupMs: 0 });
    const to = Date.now();
    const pauses = gc.stop();
    const cpuUsPerCheck = ((cpuMs(pid) - cpuBefore) * 1000) / Math.max(1, result.calls);
    const maxRss = rss.stop();
    const atMax = memory.stop();
    const lagMs = await eventLoopMaxMs(sidecar.ports.metrics);
    await sleep(1200); // the probe writes every second
    const stalls = summarizeStalls(stallsBetween(stallsFile, from, to));
    await sidecar.stop();
    const floor = await noopUnderLoad(loader, request, loadMs);
    return {
      floor,
      stalls,
      result,
      cpuUsPerCheck,
      maxRss,
      atMax,
      lagMs,
      gcMaxMs: pauses.maxMs,
      gcMedianMs: pauses.medianMs,
      gcCount: pauses.count,
      markCompacts: pauses.markCompacts,
      markCompactMaxMs: pauses.markCompactMaxMs,
    };
  } finally {
    await loader.close();
    await sidecar.stop();
  }
}

export async function benchSidecarStart(options: SidecarStartOptions = {}): Promise<Table[]> {
  const rounds = options.rounds ?? 5;
  const idleMs = options.idleMs ?? 10_000;
  const loadMs = options.loadMs ?? 10_000;
  const [{ startBenchWorld }, { ordersApi, startUpstream }] = await Promise.all([
    import("./lib/bench-world.ts"),
    import("../test/servers/sidecar/world.ts"),
  ]);
  const upstream = await startUpstream();
  try {
    const world = await startBenchWorld({
      document: ordersApi(),
      upstreamUrl: upstream.url,
      subjects: ["bench-agent"],
      allowed: ["orders:get:/orders/{orderId}"],
    });
    try {
      await prepareServerEnv(world.dir);
      const token = await world.token("bench-agent");
      // The two ways the image starts a sidecar (decision 2799), alternated round by round.
      const sources: StartKind = {
        name: "sources",
        env: { ...world.sidecarEnv, [SNAPSHOT_ENV]: "off" },
        script: false,
        firsts: [],
        readies: [],
      };
      const snapshot: StartKind = {
        name: "start-up snapshot",
        env: { ...world.sidecarEnv, [SNAPSHOT_ENV]: buildSnapshot(join(world.dir, "sidecar-snapshot")) },
        // as the image's injected sidecar starts (decision 2951)
        script: true,
        firsts: [],
        readies: [],
      };
      const starts = [sources, snapshot];
      // The authority's own first requests are not the sidecar's start-up.
      await firstAllowedRound(sources, token, -1);
      for (let round = 0; round < rounds; round++) {
        for (const start of starts) {
          start.firsts.push(await firstAllowedRound(start, token, round));
          start.readies.push(await readyRound(start, token, round, idleMs));
        }
      }
      // The load phase's extra V8 flag: without its own cache that process compiles every module (decision 3041).
      if (SERVER_ENV.NODE_COMPILE_CACHE !== undefined) await warmCompileCache(["--trace-gc"]);
      const load = await underLoad(sources.env, token, loadMs);
      return tables(starts, load, { rounds, idleMs, loadMs });
    } finally {
      await world.close();
    }
  } finally {
    await upstream.close();
  }
}

function stallsValue(stalls: ReturnType<typeof summarizeStalls>): string {
  const { count, longest } = stalls;
  if (longest === undefined) return "0";
  const share = (ms: number) => `${Math.round((100 * ms) / stalls.lagMs)} %`;
  const parts = (stall: Stall) =>
    `${stall.lagMs} ms (${stall.cpuMs} / ${stall.runQueueMs} / ${stall.gcMs} ms${stall.gcKinds ? ` ${stall.gcKinds}` : ""}${stall.majorFaults > 0 ? `, ${stall.majorFaults} major faults` : ""})`;
  const own = stalls.ownLongest === undefined ? "" : `, longest ${parts(stalls.ownLongest)}`;
  return `${count}; ${parts(longest)}; waiting ${share(stalls.runQueueMs)}, GC ${share(stalls.gcMs)}; not waiting for a core: ${stalls.own}${own}`;
}

function tables(
  starts: readonly StartKind[],
  load: Awaited<ReturnType<typeof underLoad>>,
  how: { rounds: number; idleMs: number; loadMs: number },
): Table[] {
  const flags = `${SERVER_NODE_FLAGS.join(" ")}${SERVER_ENV.MALLOC_ARENA_MAX === undefined ? "" : ", MALLOC_ARENA_MAX=2, warm compile cache"}`;
  const perRound = starts.flatMap(({ name, firsts, readies }) =>
    firsts.map((first, index) => {
      const ready = readies[index];
      const refused = Object.entries(first.refusedBefore)
        .map(([outcome, count]) => `${count}× ${outcome}`)
        .join(", ");
      return {
        round: index + 1,
        from: name,
        listeningMs: Math.round(first.listenMs),
        firstAllowedCheckMs: Math.round(first.firstAllowedMs),
        cpuToFirstAllowedMs: Math.round(first.cpuMs),
        refusedBeforeIt: refused === "" ? "none" : refused,
        readyMs: Math.round(ready?.readyMs ?? Number.NaN),
        firstCheckAfterReady:
          ready === undefined ? "" : `${ready.firstAfterReady} in ${Math.round(ready.firstAfterReadyMs)} ms`,
        idleCpuMsPerSec: round1(ready?.idleCpuMsPerSec ?? Number.NaN),
        idleRssMb: mb(ready?.idleRss ?? Number.NaN),
      };
    }),
  );
  const readies = starts.flatMap((start) => start.readies);
  const notAllowedAfterReady = readies.filter((ready) => ready.firstAfterReady !== "allowed").length;
  const idle = readies.map((ready) => ready.idleCpuMsPerSec);
  const startRows = starts.map(({ name, firsts }) => {
    const firstAllowed = firsts.map((first) => first.firstAllowedMs);
    const cpu = firsts.map((first) => first.cpuMs);
    return {
      measure: `start → first allowed Check from the ${name} (median / max; its CPU median / max)`,
      value: `${Math.round(median(firstAllowed))} / ${Math.round(Math.max(...firstAllowed))} ms; ${Math.round(median(cpu))} / ${Math.round(Math.max(...cpu))} ms`,
      target: `≤ ${START_TARGET_MS} ms`,
      met: String(Math.max(...firstAllowed) <= START_TARGET_MS),
    };
  });

  const summary = [
    ...startRows,
    {
      measure: "first Check after /readyz said ready, not allowed",
      value: `${notAllowedAfterReady} of ${readies.length}`,
      target: "0",
      met: String(notAllowedAfterReady === 0),
    },
    {
      measure: `idle CPU (median / max over ${how.idleMs / 1000} s windows)`,
      value: `${round1(median(idle))} / ${round1(Math.max(...idle))} ms/s`,
      target: `≤ ${IDLE_TARGET_MS_PER_S} ms/s`,
      met: String(Math.max(...idle) <= IDLE_TARGET_MS_PER_S),
    },
    {
      measure: `RSS at ${LOAD_RATE.toLocaleString("en")} Checks/s (max VmRSS over ${how.loadMs / 1000} s)`,
      value: `${mb(load.maxRss)} MB`,
      target: `≤ ${RSS_TARGET_MB} MB`,
      met: String(load.maxRss > 0 && load.maxRss <= RSS_TARGET_MB * 1024 * 1024),
    },
    {
      measure: `the same process at its largest RSS (smaps_rollup every 250 ms): RSS / PSS (shared pages divided among the processes that map them) / private`,
      value: `${mb(load.atMax.rss)} / ${mb(load.atMax.pss)} / ${mb(load.atMax.privateBytes)} MB`,
      target: "",
      met: "",
    },
    {
      measure: `the floor: the no-op grpc-js Check server (Node, grpc-js, proto-loader; the same flags and environment) at ${LOAD_RATE.toLocaleString("en")} Checks/s in the same run: max VmRSS; RSS / PSS / private at its largest RSS; CPU per Check`,
      value: `${mb(load.floor.maxRss)} MB; ${mb(load.floor.atMax.rss)} / ${mb(load.floor.atMax.pss)} / ${mb(load.floor.atMax.privateBytes)} MB; ${Math.round(load.floor.cpuUsPerCheck)} µs`,
      target: "",
      met: "",
    },
    {
      measure: "the sidecar's own above the floor: RSS / PSS / private at the largest RSS",
      value: `${mb(load.atMax.rss - load.floor.atMax.rss)} / ${mb(load.atMax.pss - load.floor.atMax.pss)} / ${mb(load.atMax.privateBytes - load.floor.atMax.privateBytes)} MB`,
      target: "",
      met: "",
    },
    {
      measure: `GC pauses at ${LOAD_RATE.toLocaleString("en")} Checks/s (--trace-gc; ${load.gcCount} collections, ${load.markCompacts} of them mark-compacts): longest, median, longest mark-compact; event-loop lag max (sampled every 100 ms)`,
      value: `${round1(load.gcMaxMs)} ms, ${round1(load.gcMedianMs)} ms, ${round1(load.markCompactMaxMs)} ms; ${round1(load.lagMs)} ms`,
      target: `≤ ${STALL_TARGET_MS} ms`,
      met: String(load.gcMaxMs <= STALL_TARGET_MS && load.lagMs <= STALL_TARGET_MS),
    },
    {
      measure: `event-loop stalls over ${STALL_TARGET_MS} ms at ${LOAD_RATE.toLocaleString("en")} Checks/s, in the sidecar (a 2 ms timer): count, longest (its own CPU / waiting for a core / GC); over all of them, the share spent waiting for a core and in GC; those still over ${STALL_TARGET_MS} ms without the wait for a core`,
      value: stallsValue(load.stalls),
      target: "0",
      met: String(load.stalls.count === 0),
    },
    {
      measure: `sidecar CPU per Check at ${LOAD_RATE.toLocaleString("en")} Checks/s; round trip p50 / p99`,
      value: `${Math.round(load.cpuUsPerCheck)} µs; ${load.result.p50Ms} / ${load.result.p99Ms} ms (${load.result.rps} req/s, ${load.result.errors + load.result.denied} failed)`,
      target: "",
      met: "",
    },
  ];
  return [
    {
      title: `Summary (${how.rounds} fresh processes of each start; ${flags}; load at 1,000 Checks/s from the sources)`,
      rows: summary,
    },
    { title: "Per fresh process", rows: perRound },
  ];
}
