/**
 * Figures over several rounds (fresh measurement windows): the median is the figure, the
 * spread (lowest–highest) is printed beside it, so one lucky or unlucky window is not the page.
 */
import type { CallTarget, HttpCaller } from "./http-caller.ts";
import type { CpuUs } from "./world-process.ts";
export interface Spread {
  readonly median: number;
  readonly min: number;
  readonly max: number;
}

export function spread(values: readonly number[]): Spread {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length / 2;
  const median =
    sorted.length % 2 === 1
      ? (sorted[Math.floor(middle)] ?? 0)
      : ((sorted[middle - 1] ?? 0) + (sorted[middle] ?? 0)) / 2;
  return { median, min: sorted[0] ?? 0, max: sorted[sorted.length - 1] ?? 0 };
}

/** "1.23–1.98": the spread of `values` over the rounds, at `digits` decimals. */
export function spreadText(values: readonly number[], digits = 2): string {
  const { min, max } = spread(values);
  return `${min.toFixed(digits)}–${max.toFixed(digits)}`;
}

/** The median of `values`, rounded to `digits` decimals. */
export function medianOf(values: readonly number[], digits = 3): number {
  return Number(spread(values).median.toFixed(digits));
}

/** The p-th percentile (0–100) of `samples`, nearest rank. */
export function percentile(samples: readonly number[], p: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  if (sorted.length === 0) return 0;
  const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[index] ?? 0;
}

/** One row of a rounds table: the median over the rounds, the spread beside it. */
export function figureRow(name: string, values: readonly number[], target = "", met = "", unit = "ms") {
  return {
    measurement: name,
    rounds: values.length,
    median: medianOf(values),
    spread: spreadText(values),
    unit,
    target,
    met,
  };
}

/** "yes" when the median of `values` is at most `limit`. */
export const metByMedian = (values: readonly number[], limit: number): string =>
  medianOf(values) <= limit ? "yes" : "no";

export interface AlternatedBlocks {
  readonly direct: number[];
  readonly gateway: number[];
  /** The `extra` target's samples (a quarter of a block each time). */
  readonly extra: number[];
  /** Per gateway call: the world process's CPU (all threads, its event loop) and the generator's. */
  readonly serverCpuMsPerCall: number;
  readonly loopCpuMsPerCall: number;
  readonly generatorCpuMsPerCall: number;
}

/**
 * One round's window: `iterations` calls straight to the upstream and as many through the
 * gateway, one at a time, alternating in 8 blocks; the world's CPU is read around each gateway
 * block, so it counts the gateway's calls alone.
 */
export async function alternateBlocks(options: {
  readonly caller: HttpCaller;
  readonly world: { cpuUs(): Promise<CpuUs> };
  readonly direct: CallTarget;
  readonly gateway: CallTarget;
  readonly iterations: number;
  readonly extra?: CallTarget;
}): Promise<AlternatedBlocks> {
  const { caller, world } = options;
  const blocks = 8;
  const perBlock = Math.ceil(options.iterations / blocks);
  const direct: number[] = [];
  const gateway: number[] = [];
  const extra: number[] = [];
  let processUs = 0;
  let loopUs = 0;
  let generatorUs = 0;
  for (let block = 0; block < blocks; block++) {
    direct.push(...(await caller.sequential(options.direct, perBlock)).samplesMs);
    const before = await world.cpuUs();
    const measured = await caller.sequential(options.gateway, perBlock);
    const after = await world.cpuUs();
    processUs += after.process - before.process;
    loopUs += after.loop - before.loop;
    generatorUs += measured.cpuUs;
    gateway.push(...measured.samplesMs);
    if (options.extra !== undefined)
      extra.push(...(await caller.sequential(options.extra, Math.ceil(perBlock / 4))).samplesMs);
  }
  const perCall = (us: number) => us / 1000 / Math.max(1, gateway.length);
  return {
    direct,
    gateway,
    extra,
    serverCpuMsPerCall: perCall(processUs),
    loopCpuMsPerCall: perCall(loopUs),
    generatorCpuMsPerCall: perCall(generatorUs),
  };
}
