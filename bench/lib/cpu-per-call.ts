/**
 * CPU and wall time per call of `fn`, after up to 2,000 warm-up calls: the figure the
 * per-decision benches (decision chain, shadow paths) report.
 */
import { performance } from "node:perf_hooks";

export async function cpuPerCall(
  iterations: number,
  fn: () => unknown,
): Promise<{ readonly cpuUs: number; readonly wallUs: number }> {
  for (let i = 0; i < Math.min(2000, iterations); i++) await fn();
  const cpu = process.cpuUsage();
  const started = performance.now();
  for (let i = 0; i < iterations; i++) await fn();
  const wall = performance.now() - started;
  const used = process.cpuUsage(cpu);
  return { cpuUs: (used.user + used.system) / iterations, wallUs: (wall * 1000) / iterations };
}
