/**
 * Load with nothing lost, full size: ≥ 20,000 mixed authorize-invocation decisions plus
 * binding invokes with duplicated Idempotency-Keys, through the whole system on loopback
 * (test/helpers/system.ts: dev IdPs, authority service, upstream API), then the
 * conservation checks of test/helpers/load-run.ts: audit records = decisions, usage
 * counters = records, each key executed upstream once. The CI-size run of the same is
 * test/reliability/load.test.ts.
 *
 *   node bench/load.ts                      # sqlite
 *   BENCH_LOAD_STORES=sqlite,redis,postgres node bench/load.ts
 *
 * `benchLoad()` returns one row per store; `nothingLost` is the verdict.
 */
import { type LoadResult, runMixedLoad } from "../test/helpers/load-run.ts";
import { type PostgresServerHandle, startPostgresServer } from "../test/helpers/postgres-server.ts";
import { type RedisServerHandle, startRedisServer } from "../test/helpers/redis-server.ts";
import { startSystem } from "../test/helpers/system.ts";

const LOAD_STORES = ["sqlite", "redis", "postgres"] as const;
type LoadStore = (typeof LOAD_STORES)[number];

export interface LoadBenchOptions {
  readonly decisions?: number;
  readonly invokeKeys?: number;
  readonly duplicatesPerKey?: number;
  readonly concurrency?: number;
  readonly stores?: ReadonlyArray<LoadStore>;
}

export interface LoadBenchRow {
  readonly store: string;
  readonly decisions: number;
  readonly allowed: number;
  readonly denied: number;
  readonly auditRecords: number;
  readonly recordsLost: number;
  readonly usageCounted: number;
  readonly invokes: number;
  readonly invokeKeys: number;
  readonly upstreamExecutions: number;
  readonly replays: number;
  readonly evidenceRecords: number;
  readonly reqPerSec: number;
  readonly seconds: number;
  readonly nothingLost: boolean;
}

function verdict(result: LoadResult): boolean {
  return (
    result.unexpected === 0 &&
    result.recordsLost === 0 &&
    result.duplicatedRecords === 0 &&
    result.auditRecordsForRequests === result.decisions &&
    // Invokes decide too: every request once, the executed one and each replayed duplicate
    // (docs/decisions/0702), while the upstream runs once per key.
    result.auditDecisionRecords === result.decisions + result.invokes &&
    result.invokeReplays === result.invokes - result.invokeKeys &&
    result.usageCounted === result.auditDecisionRecords &&
    result.invokesExecutedUpstream === result.invokeKeys &&
    result.inconsistentKeys === 0 &&
    result.evidenceRecords === result.invokeKeys &&
    result.droppedByRecorder === 0
  );
}

export async function benchLoad(options: LoadBenchOptions = {}): Promise<LoadBenchRow[]> {
  const decisions = options.decisions ?? 20_000;
  if (!Number.isSafeInteger(decisions) || decisions < 1)
    throw new TypeError("decisions must be a positive integer");
  const invokeKeys = options.invokeKeys ?? 500;
  const duplicatesPerKey = options.duplicatesPerKey ?? 4;
  const concurrency = options.concurrency ?? 64;
  const rows: LoadBenchRow[] = [];
  for (const store of options.stores ?? ["sqlite"]) {
    let redis: RedisServerHandle | undefined;
    let postgres: PostgresServerHandle | undefined;
    if (store === "redis") redis = await startRedisServer();
    if (store === "postgres") postgres = await startPostgresServer();
    const storeUrl = redis?.url ?? postgres?.url;
    // Warn level: the service writes no per-request line (the leak scan is the tests' job).
    const system = await startSystem({ logLevel: "warn", ...(storeUrl === undefined ? {} : { storeUrl }) });
    try {
      const result = await runMixedLoad(system, {
        decisions,
        invokeKeys,
        duplicatesPerKey,
        concurrency,
        flushTimeoutMs: 120_000,
      });
      rows.push({
        store,
        decisions: result.decisions,
        allowed: result.allowed,
        denied: result.denied,
        auditRecords: result.auditRecordsForRequests,
        recordsLost: result.recordsLost,
        usageCounted: result.usageCounted,
        invokes: result.invokes,
        invokeKeys: result.invokeKeys,
        upstreamExecutions: result.invokesExecutedUpstream,
        replays: result.invokeReplays,
        evidenceRecords: result.evidenceRecords,
        reqPerSec: Math.round(result.requestsPerSecond),
        seconds: Math.round(result.durationMs / 100) / 10,
        nothingLost: verdict(result),
      });
    } finally {
      await system.close();
      await redis?.stop();
      await postgres?.stop();
    }
  }
  return rows;
}

if (import.meta.main) {
  const stores = (process.env.BENCH_LOAD_STORES ?? "sqlite")
    .split(",")
    .filter((name): name is LoadStore => (LOAD_STORES as readonly string[]).includes(name));
  const rows = await benchLoad({ stores });
  console.table(rows);
  process.exit(rows.every((row) => row.nothingLost) ? 0 : 1);
}
