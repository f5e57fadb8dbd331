/**
 * Loaded into a measured process with `--import` (bench only): finds the event loop's stalls
 * and says what each was. A 2 ms timer chain notes every gap over STALL_PROBE_MIN_MS beyond its
 * due time, with what the main thread did meanwhile: its own CPU (`process.threadCpuUsage`),
 * the time it waited runnable for a core (`/proc/thread-self/schedstat`'s run-queue delay: the
 * machine's contention, not ours) and the GC pauses inside the gap (`PerformanceObserver`).
 * With STALL_PROBE_OUT set the process appends them there as JSON lines, every second.
 * With STALL_PROBE_ON_SIGNAL=1 the probe sleeps until SIGUSR2, and each SIGUSR2 turns it on or
 * off (off writes what it found at once): the bench probes one run and leaves the others, and
 * their CPU figures, untouched.
 */
import { appendFileSync, readFileSync } from "node:fs";
import { PerformanceObserver } from "node:perf_hooks";

const TICK_MS = 2;
const MIN_MS = Number(process.env.STALL_PROBE_MIN_MS ?? 5);

export interface Stall {
  /** When the gap started (epoch ms). */
  readonly atMs: number;
  /** How late the tick came. */
  readonly lagMs: number;
  /** The main thread's CPU during the gap. */
  readonly cpuMs: number;
  /** Time runnable but waiting for a core during the gap. */
  readonly runQueueMs: number;
  /**
   * CPU of the process's other threads during the gap (V8's GC helpers, libuv's pool): on a
   * process given one core, the part of the wait for a core that is the process's own.
   */
  readonly helperCpuMs: number;
  /** Page faults that read from disk, and times the thread slept voluntarily (a lock, I/O), during the gap. */
  readonly majorFaults: number;
  readonly sleeps: number;
  /** GC pauses inside the gap, and their kinds. */
  readonly gcMs: number;
  readonly gcKinds: string;
}

const runQueueNs = (): number => {
  try {
    return Number(readFileSync("/proc/thread-self/schedstat", "utf8").split(" ")[1]);
  } catch {
    return Number.NaN;
  }
};

const gcs: { start: number; end: number; kind: number }[] = [];
const gcObserver = new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    gcs.push({
      start: entry.startTime,
      end: entry.startTime + entry.duration,
      kind: (entry as unknown as { detail: { kind: number } }).detail.kind,
    });
  }
  if (gcs.length > 4096) gcs.splice(0, gcs.length - 4096);
});
const GC_KIND: Record<number, string> = { 1: "minor", 2: "major", 4: "incremental", 8: "weak" };

let stalls: Stall[] = [];
let last = performance.now();
let lastCpu = process.threadCpuUsage();
let lastProcessCpu = process.cpuUsage();
let lastQueue = runQueueNs();
let lastUsage = process.resourceUsage();
const tick = (): void => {
  const now = performance.now();
  const cpu = process.threadCpuUsage();
  const processCpu = process.cpuUsage();
  const queue = runQueueNs();
  const usage = process.resourceUsage();
  const lag = now - last - TICK_MS;
  if (lag > MIN_MS) {
    const inGap = gcs.filter((gc) => gc.end > last && gc.start < now);
    stalls.push({
      atMs: Math.round(performance.timeOrigin + last),
      lagMs: Math.round(lag * 10) / 10,
      cpuMs: Math.round((cpu.user + cpu.system - lastCpu.user - lastCpu.system) / 100) / 10,
      runQueueMs: Math.round((queue - lastQueue) / 1e5) / 10,
      helperCpuMs:
        Math.round(
          (processCpu.user +
            processCpu.system -
            lastProcessCpu.user -
            lastProcessCpu.system -
            (cpu.user + cpu.system - lastCpu.user - lastCpu.system)) /
            100,
        ) / 10,
      majorFaults: usage.majorPageFault - lastUsage.majorPageFault,
      sleeps: usage.voluntaryContextSwitches - lastUsage.voluntaryContextSwitches,
      gcMs: Math.round(inGap.reduce((sum, gc) => sum + gc.end - gc.start, 0) * 10) / 10,
      gcKinds: [...new Set(inGap.map((gc) => GC_KIND[gc.kind] ?? String(gc.kind)))].join("+"),
    });
  }
  last = now;
  lastCpu = cpu;
  lastProcessCpu = processCpu;
  lastQueue = queue;
  lastUsage = usage;
  timer = setTimeout(tick, TICK_MS).unref();
};
let timer: NodeJS.Timeout | undefined;
const start = (): void => {
  gcObserver.observe({ entryTypes: ["gc"] });
  last = performance.now();
  lastCpu = process.threadCpuUsage();
  lastProcessCpu = process.cpuUsage();
  lastQueue = runQueueNs();
  lastUsage = process.resourceUsage();
  timer = setTimeout(tick, TICK_MS).unref();
};

const out = process.env.STALL_PROBE_OUT;
const flush = (): void => {
  if (out === undefined || stalls.length === 0) return;
  appendFileSync(out, stalls.map((stall) => `${JSON.stringify(stall)}\n`).join(""));
  stalls = [];
};
setInterval(flush, 1000).unref();
process.on("exit", flush);
if (process.env.STALL_PROBE_ON_SIGNAL === "1") {
  process.on("SIGUSR2", () => {
    if (timer === undefined) return start();
    clearTimeout(timer);
    timer = undefined;
    gcObserver.disconnect();
    flush();
  });
} else start();
