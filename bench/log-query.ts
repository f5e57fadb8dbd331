/**
 * Filtered audit queries at scale: fills a real SQLite file, a real PostgreSQL server and a real
 * redis-server with
 * `records` audit records (default 1,000,000: 20 partners, 2,000 subjects, 50 capabilities,
 * 10 % denied over 5 reasons, one record per 50 ms) and times the first page (limit 100) of
 * the queries the admin views send, the median of several runs each. It also reports the
 * fill rate (appendMany in batches of 1,000, the audit writer's group commit) and one
 * retention batch (trimLog of 500 entries).
 *
 *   node bench/log-query.ts [--records=N]     standalone (the figures printed)
 *   node bench/run.ts --only=log-query        as a module of the report
 */
import { join } from "node:path";
import { PostgresStore } from "../src/store/postgres/postgres-store.ts";
import { RedisStore } from "../src/store/redis/redis-store.ts";
import { SqliteStore } from "../src/store/sqlite/sqlite-store.ts";
import type { LogQuery, Store } from "../src/store/store.ts";
import { startPostgresServer } from "../test/helpers/postgres-server.ts";
import { startRedisServer } from "../test/helpers/redis-server.ts";
import { makeTempDir } from "../test/helpers/temp-dir.ts";

const T0 = Date.parse("2026-01-01T00:00:00.000Z");
const STEP_MS = 50;
const REASONS = [
  "policy_expired",
  "operation_not_allowed",
  "not_assigned",
  "invalid_token",
  "capability_unknown",
];

function record(i: number) {
  const partner = i % 20;
  const denied = i % 10 === 3;
  return {
    kind: "decision",
    partner_id: `partner-${partner}`,
    subject_id: `agent-${partner}-${(i * 7) % 100}`,
    capability_id: `cap-${partner}-${(i * 13) % 50 >= 25 ? 1 : 0}-${i % 50}`,
    permission_id: `api:get:/items/{id}`,
    decision: denied ? "denied" : "allowed",
    reason: denied ? REASONS[i % 5] : null,
    transport: "http",
    time: new Date(T0 + i * STEP_MS).toISOString(),
    requestId: `req_${i.toString(36).padStart(10, "0")}`,
  };
}

async function fill(store: Store, records: number): Promise<number> {
  const started = performance.now();
  for (let i = 0; i < records; i += 1000) {
    const batch = Array.from({ length: Math.min(1000, records - i) }, (_, j) => record(i + j));
    await store.appendMany("audit", batch);
  }
  return Math.round(records / ((performance.now() - started) / 1000));
}

async function medianMs(runs: number, run: () => Promise<unknown>): Promise<number> {
  await run();
  const samples: number[] = [];
  for (let i = 0; i < runs; i++) {
    const start = performance.now();
    await run();
    samples.push(performance.now() - start);
  }
  samples.sort((a, b) => a - b);
  return Number((samples[Math.floor(samples.length / 2)] ?? 0).toFixed(2));
}

function queries(records: number): Array<[string, LogQuery]> {
  const lastTime = T0 + (records - 1) * STEP_MS;
  return [
    ["no filter", {}],
    ["partner (1 in 20)", { where: { partner_id: "partner-7" } }],
    ["partner + subject", { where: { partner_id: "partner-7", subject_id: "agent-7-49" } }],
    [
      "partner + capability + denied",
      { where: { partner_id: "partner-3", capability_id: "cap-3-1-3", decision: "denied" } },
    ],
    ["reason, last hour", { where: { reason: "invalid_token" }, since: lastTime - 3_600_000 }],
    [
      "subject, since last 10 %",
      { where: { subject_id: "agent-3-21" }, since: lastTime - records * STEP_MS * 0.1 },
    ],
    ["partner + kind (not indexed)", { where: { partner_id: "partner-2", kind: "decision" } }],
    ["subject that never matches", { where: { partner_id: "partner-1", subject_id: "nobody" } }],
  ];
}

interface Row {
  readonly store: string;
  readonly query: string;
  readonly firstPageMs: number;
  readonly items: number;
  /** The first page came with a `next` cursor (more matches, or Redis's walk budget spent). */
  readonly next: boolean;
}

async function benchOne(
  label: string,
  store: Store,
  records: number,
  runs: number,
  afterFill: () => Promise<unknown> = async () => undefined,
): Promise<Row[]> {
  const fillRate = await fill(store, records);
  await afterFill();
  const rows: Row[] = [
    {
      store: label,
      query: `fill: records/s (appendMany of 1,000)`,
      firstPageMs: fillRate,
      items: records,
      next: false,
    },
  ];
  for (const [name, query] of queries(records)) {
    let items = 0;
    let next = false;
    const ms = await medianMs(runs, async () => {
      const page = await store.queryLog("audit", { ...query, limit: 100 });
      items = page.entries.length;
      next = page.next !== undefined;
    });
    rows.push({ store: label, query: name, firstPageMs: ms, items, next });
  }
  const trimMs = await medianMs(runs, () => store.trimLog("audit", { keepLast: records, max: 500 }));
  const start = performance.now();
  const removed = await store.trimLog("audit", { olderThan: T0 + 500 * STEP_MS, max: 500 });
  rows.push({
    store: label,
    query: "retention: one trim of 500 (ms)",
    firstPageMs: Number((performance.now() - start).toFixed(2)),
    items: removed,
    next: false,
  });
  rows.push({
    store: label,
    query: "retention: a trim that finds nothing (ms)",
    firstPageMs: trimMs,
    items: 0,
    next: false,
  });
  return rows;
}

export async function benchLogQuery(options: { records?: number; runs?: number } = {}): Promise<Row[]> {
  const records = options.records ?? 1_000_000;
  const runs = options.runs ?? 9;
  const dir = await makeTempDir("bench-log-query-");
  const postgres = await startPostgresServer();
  const rows: Row[] = [];
  try {
    const sqlite = new SqliteStore({ path: join(dir.path, "audit.db"), sweepIntervalMs: 0 });
    try {
      rows.push(...(await benchOne("sqlite", sqlite, records, runs)));
    } finally {
      await sqlite.close();
    }
    const pg = await PostgresStore.open({ url: postgres.url, sweepIntervalMs: 0 });
    try {
      // What autovacuum does after a table grew this much: the planner then knows a subject is rarer than a partner.
      rows.push(
        ...(await benchOne("postgres", pg, records, runs, () => postgres.psql("ANALYZE authority_logs"))),
      );
    } finally {
      await pg.close();
    }
    // Redis holds every record in memory: no snapshot or AOF while filling.
    const redisServer = await startRedisServer({ args: ["--save", "", "--appendonly", "no"] });
    const redis = new RedisStore({ url: redisServer.url });
    try {
      rows.push(...(await benchOne("redis", redis, records, runs)));
    } finally {
      await redis.close();
      await redisServer.stop();
    }
  } finally {
    await postgres.stop();
    await dir.cleanup();
  }
  return rows;
}

if (import.meta.main) {
  const flag = process.argv.find((arg) => arg.startsWith("--records="));
  const records = flag === undefined ? undefined : Number(flag.slice("--records=".length));
  console.table(await benchLogQuery(records === undefined ? {} : { records }));
}
