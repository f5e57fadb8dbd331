/**
 * How fast the CPU is now, for a section's footer. The machine is a VM whose host also runs
 * other work: its load average can read 1 while every figure of a run is a third slower, so a
 * section says how long a fixed single-threaded workload took beside it (the same workload on
 * the same machine: a larger figure means a slower, shared CPU; compare a section's figures with
 * another's only where their probes agree).
 */
import { createHash } from "node:crypto";

const BLOCK = Buffer.alloc(64 * 1024, 7);
const HASHES = 400;
const TRIES = 5;

/** Median wall milliseconds of hashing 25.6 MiB with SHA-256 (a few tens of ms; 5 tries). */
export function cpuProbeMs(): number {
  const times: number[] = [];
  for (let t = 0; t < TRIES; t++) {
    const started = performance.now();
    for (let i = 0; i < HASHES; i++) createHash("sha256").update(BLOCK).digest();
    times.push(performance.now() - started);
  }
  times.sort((a, b) => a - b);
  return Number((times[Math.floor(TRIES / 2)] ?? 0).toFixed(1));
}
