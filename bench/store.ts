/**
 * Store micro-benchmarks: median time per call of get, put and append, one call at a time,
 * on a real SQLite file in a temp dir and a real redis-server on a free loopback port.
 */

import { join } from "node:path";
import { RedisStore } from "../src/store/redis/redis-store.ts";
import { SqliteStore } from "../src/store/sqlite/sqlite-store.ts";
import type { Store } from "../src/store/store.ts";
import { startRedisServer } from "../test/helpers/redis-server.ts";
import { makeTempDir } from "../test/helpers/temp-dir.ts";

export interface BenchResult {
  name: string;
  medianMs: number;
  opsPerSec: number;
}

async function measure(
  name: string,
  iterations: number,
  run: (i: number) => Promise<unknown>,
): Promise<BenchResult> {
  for (let i = 0; i < Math.min(50, iterations); i++) await run(i);
  const samples: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const start = process.hrtime.bigint();
    await run(i);
    samples.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  samples.sort((a, b) => a - b);
  const middle = Math.floor(samples.length / 2);
  const medianMs =
    samples.length % 2 === 1
      ? (samples[middle] ?? 0)
      : ((samples[middle - 1] ?? 0) + (samples[middle] ?? 0)) / 2;
  return { name, medianMs: Number(medianMs.toFixed(4)), opsPerSec: Math.round(1000 / medianMs) };
}

/** A value about the size of a stored policy record. */
const document = {
  subject: "agent:bench",
  state: "active",
  permissions: Array.from({ length: 20 }, (_, i) => `perm.read.resource-${i}`),
  meta: { version: 3, updatedAt: "2025-01-01T00:00:00.000Z", note: "x".repeat(200) },
};

async function benchOne(label: string, store: Store, iterations: number): Promise<BenchResult[]> {
  const ids = 1000;
  for (let i = 0; i < ids; i++) await store.put("bench", `doc-${i}`, document);
  return [
    await measure(`${label} get`, iterations, (i) => store.get("bench", `doc-${i % ids}`)),
    await measure(`${label} put`, iterations, (i) => store.put("bench", `doc-${i % ids}`, document)),
    await measure(`${label} append`, iterations, (i) => store.append("bench", { i, event: "bench" })),
  ];
}

export async function benchStore(options: { iterations?: number } = {}): Promise<BenchResult[]> {
  const iterations = options.iterations ?? 2000;
  const results: BenchResult[] = [];
  const dir = await makeTempDir("bench-store-");
  try {
    const sqlite = new SqliteStore({ path: join(dir.path, "bench.db") });
    try {
      results.push(...(await benchOne("sqlite", sqlite, iterations)));
    } finally {
      await sqlite.close();
    }
  } finally {
    await dir.cleanup();
  }
  const server = await startRedisServer();
  try {
    const redis = new RedisStore({ url: server.url });
    try {
      results.push(...(await benchOne("redis", redis, iterations)));
    } finally {
      await redis.close();
    }
  } finally {
    await server.stop();
  }
  return results;
}

if (import.meta.main) {
  console.table(await benchStore());
}
