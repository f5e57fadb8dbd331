/**
 * authorize-invocation and binding invoke at saturation on PostgreSQL beside SQLite (issue 31:
 * PostgreSQL ≥ 0.8× SQLite's saturation throughput). The world of bench/invoke.ts (the
 * authority's composition root, in-process key rings, a local upstream, a binding) on each
 * store, served from a child process (this file, `--serve <store-url>`) so the load generator
 * never shares its event loop; autocannon as fast as `connections` connections go. Every
 * request is an allow; every invoke carries a fresh Idempotency-Key (claim, execute, kept
 * result + evidence in one transaction). PostgreSQL is a throwaway local server
 * (test/helpers/postgres-server.ts: fsync off, as the suite runs it). Both services run at once
 * and are measured in alternating rounds, the best of each kept (measureAlternating), with the
 * CPU each request cost the service and its database (PostgreSQL's processes; SQLite runs in the
 * service): on a shared machine throughput swings run to run, CPU per request much less.
 */
import { type ChildProcess, fork } from "node:child_process";
import { once } from "node:events";
import { readdir, readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { join } from "node:path";
import { openStore } from "../src/store/index.ts";
import type { Store } from "../src/store/store.ts";
import { startPostgresServer } from "../test/helpers/postgres-server.ts";
import { makeTempDir } from "../test/helpers/temp-dir.ts";
import { startInvokeWorld } from "./invoke.ts";

interface Ready {
  readonly type: "ready";
  readonly authority: string;
  readonly workloadToken: string;
  readonly assertion: string;
  readonly agentToken: string;
}

interface CannonResult {
  requests: { total: number; average: number };
  latency: { p50: number; p99: number };
  errors: number;
  timeouts: number;
  non2xx: number;
}
type Autocannon = (
  options: Record<string, unknown>,
  done: (error: unknown, result: CannonResult) => void,
) => void;
const autocannon = createRequire(import.meta.url)("autocannon") as Autocannon;
const cannon = (options: Record<string, unknown>): Promise<CannonResult> =>
  new Promise((resolve, reject) =>
    autocannon(options, (error, result) => (error ? reject(error) : resolve(result))),
  );

export interface StoreBackendRow {
  readonly name: string;
  readonly reqPerSec: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly errors: number;
  readonly non2xx: number;
  /** CPU of the service and its database per request, µs (median of the rounds). */
  readonly cpuUsPerRequest: number;
  /** This store's throughput over SQLite's for the same route. */
  readonly ofSqlite?: number;
  /** This store's CPU per request over SQLite's for the same route. */
  readonly cpuOfSqlite?: number;
  readonly target?: string;
}

async function serve(storeUrl: string): Promise<void> {
  const store = await openStore(storeUrl);
  const world = await startInvokeWorld(store);
  const { authority, workloadToken, assertion, agentToken } = world;
  process.on("message", () => {
    void world
      .close()
      .then(() => store.close())
      .then(() => process.disconnect());
  });
  process.send?.({ type: "ready", authority, workloadToken, assertion, agentToken } satisfies Ready);
}

type Request = Record<string, unknown>;

/** µs of CPU (user + system) used so far by these processes and their children. */
async function cpuMicros(pids: readonly number[]): Promise<number> {
  const roots = new Set(pids);
  const ticksPerSecond = 100; // USER_HZ: /proc reports CPU in 1/100 s on Linux
  let ticks = 0;
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, "utf8").catch(() => "");
    // Fields after the command's closing parenthesis: state, ppid, … utime (12th), stime (13th).
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (!roots.has(Number(entry)) && !roots.has(Number(fields[1]))) continue;
    ticks += Number(fields[11]) + Number(fields[12]);
  }
  return (ticks / ticksPerSecond) * 1e6;
}

const median = (values: readonly number[]): number =>
  [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? 0;

/** One store's service (a child process) and its two requests. */
interface Service {
  readonly name: string;
  readonly child: ChildProcess;
  /** The service's process and its database's (whose children are counted too). */
  readonly pids: readonly number[];
  readonly requests: ReadonlyArray<readonly [string, Request]>;
}

async function startService(storeName: string, storeUrl: string, databasePid?: number): Promise<Service> {
  const child: ChildProcess = fork(import.meta.filename, ["--serve", storeUrl], { stdio: "inherit" });
  const [ready] = (await Promise.race([
    once(child, "message"),
    once(child, "exit").then(([code]) => Promise.reject(new Error(`bench service exited (${code})`))),
  ])) as [Ready];
  const authorize = {
    url: `${ready.authority}/v1/authorize-invocation`,
    method: "POST",
    headers: { authorization: `Bearer ${ready.agentToken}`, "content-type": "application/json" },
    body: JSON.stringify({ capability_id: "items", method: "GET", path: "/items/item-1" }),
  };
  let key = 0;
  const invoke = {
    url: `${ready.authority}/v1/bindings/bench-app/invoke`,
    method: "POST",
    headers: {
      authorization: `Bearer ${ready.workloadToken}`,
      "x-authority-user-assertion": ready.assertion,
      "content-type": "application/json",
    },
    body: JSON.stringify({ capability_id: "items", method: "GET", path: "/items/item-1" }),
    setupClient: (client: { setHeaders(headers: Record<string, string>): void }) => {
      const base = invoke.headers;
      const next = () => client.setHeaders({ ...base, "idempotency-key": `k-${storeName}-${++key}` });
      next();
      (client as unknown as { on(event: string, fn: () => void): void }).on("response", next);
    },
  };
  return {
    name: storeName,
    child,
    pids: [child.pid ?? 0, ...(databasePid === undefined ? [] : [databasePid])],
    requests: [
      ["authorize-invocation", authorize],
      ["binding invoke", invoke],
    ],
  };
}

async function stopService(service: Service): Promise<void> {
  const { child } = service;
  if (child.connected) child.send({ type: "close" });
  const exited = once(child, "exit");
  const timer = setTimeout(() => child.kill(), 10_000);
  await exited;
  clearTimeout(timer);
}

/**
 * Each route on each store in alternating rounds (SQLite, PostgreSQL, SQLite, PostgreSQL…), the
 * best round of each kept: on a shared, loaded machine two runs seconds apart differ by more
 * than the stores do, and alternating exposes both to the same load.
 */
async function measureAlternating(
  services: readonly Service[],
  durationSec: number,
  connections: number,
  rounds: number,
): Promise<StoreBackendRow[][]> {
  const rows: StoreBackendRow[][] = services.map(() => []);
  const cpu: number[][][] = services.map((service) => service.requests.map(() => []));
  for (const service of services) {
    for (const [, request] of service.requests) await cannon({ ...request, connections: 4, amount: 1000 }); // warm: JIT, caches, pool
  }
  const routes = services[0]?.requests.map(([route]) => route) ?? [];
  for (const [r, route] of routes.entries()) {
    for (let round = 0; round < rounds; round++) {
      for (const [s, service] of services.entries()) {
        const request = service.requests[r]?.[1] ?? {};
        const cpuBefore = await cpuMicros(service.pids);
        const result = await cannon({ ...request, connections, duration: durationSec });
        const used = (await cpuMicros(service.pids)) - cpuBefore;
        const samples = cpu[s]?.[r] ?? [];
        samples.push(used / Math.max(1, result.requests.total));
        const row: StoreBackendRow = {
          name: `${route} (${service.name})`,
          reqPerSec: Math.round(result.requests.average),
          p50Ms: result.latency.p50,
          p99Ms: result.latency.p99,
          errors: result.errors + result.timeouts,
          non2xx: result.non2xx,
          cpuUsPerRequest: Math.round(median(samples)),
        };
        const best = rows[s]?.[r];
        if (best === undefined || row.reqPerSec > best.reqPerSec) (rows[s] as StoreBackendRow[])[r] = row;
        else (rows[s] as StoreBackendRow[])[r] = { ...best, cpuUsPerRequest: row.cpuUsPerRequest };
      }
    }
  }
  return rows;
}

export interface AppendCostRow {
  readonly name: string;
  readonly records: number;
  /** Store time per record, batches of APPEND_BATCH (µs). */
  readonly usPerRecord: number;
}

const APPEND_BATCH = 256;

/** A decision record as the audit writer stores it (about 400 bytes). */
const decisionLike = (i: number, id: boolean) => ({
  kind: "decision",
  ...(id ? { id: `dec_${i.toString(36)}-${"0".repeat(20)}` } : {}),
  actor: "agent-7",
  subject_id: `agent-${i % 50}`,
  partner_id: "acme",
  capability_id: "items",
  method: "GET",
  path: `/items/item-${i}`,
  permission_id: "items:get:/items/{id}",
  decision: "allowed",
  reason: null,
  transport: "http",
  requestId: `req-${i}`,
  time: new Date(1_700_000_000_000 + i).toISOString(),
  chain: { stream: "bench", n: i + 1, prev: `sha256:${"0".repeat(64)}` },
});

/**
 * The audit writer's store call (appendMany, batches of APPEND_BATCH) per record: entries with
 * an id (checked against the log's ids: decision 2751), without one (not checked), and a
 * batch re-sent whole (every id held: nothing written).
 */
async function appendCost(storeName: string, store: Store, records: number): Promise<AppendCostRow[]> {
  const timed = async (label: string, log: string, id: boolean, offset = 0): Promise<AppendCostRow> => {
    const start = performance.now();
    for (let at = 0; at < records; at += APPEND_BATCH) {
      const batch = Array.from({ length: Math.min(APPEND_BATCH, records - at) }, (_, i) =>
        decisionLike(offset + at + i, id),
      );
      await store.appendMany(log, batch);
    }
    const usPerRecord = ((performance.now() - start) * 1000) / records;
    return { name: `append, ${label} (${storeName})`, records, usPerRecord: Number(usPerRecord.toFixed(1)) };
  };
  await timed("warm-up", "bench-warm", true); // JIT, statement caches, the files' first pages
  return [
    await timed("no id", "bench-plain", false),
    await timed("with id", "bench-ids", true),
    await timed("with id, all held (a batch re-sent)", "bench-ids", true),
  ];
}

export async function benchAppendCost(records = 10_000): Promise<AppendCostRow[]> {
  const dir = await makeTempDir("bench-append-cost-");
  const postgres = await startPostgresServer();
  const rows: AppendCostRow[] = [];
  try {
    for (const [name, url] of [
      ["SQLite", `sqlite:${join(dir.path, "append.db")}`],
      ["PostgreSQL", postgres.url],
    ] as const) {
      const store = await openStore(url);
      try {
        rows.push(...(await appendCost(name, store, records)));
      } finally {
        await store.close();
      }
    }
    return rows;
  } finally {
    await postgres.stop();
    await dir.cleanup();
  }
}

export async function benchStoreBackends(
  options: { durationSec?: number; connections?: number; rounds?: number } = {},
): Promise<StoreBackendRow[]> {
  const durationSec = options.durationSec ?? 8;
  const connections = options.connections ?? 32;
  const dir = await makeTempDir("bench-store-backends-");
  const postgres = await startPostgresServer();
  const services: Service[] = [];
  try {
    services.push(await startService("SQLite", `sqlite:${join(dir.path, "authority.db")}`));
    services.push(await startService("PostgreSQL", postgres.url, await postgres.pid));
    const [sqlite = [], pg = []] = await measureAlternating(
      services,
      durationSec,
      connections,
      options.rounds ?? 3,
    );
    return [
      ...sqlite,
      ...pg.map((row, i) => ({
        ...row,
        ofSqlite: Number((row.reqPerSec / Math.max(1, sqlite[i]?.reqPerSec ?? 1)).toFixed(2)),
        cpuOfSqlite: Number((row.cpuUsPerRequest / Math.max(1, sqlite[i]?.cpuUsPerRequest ?? 1)).toFixed(2)),
        target: "≥ 0.8× SQLite",
      })),
    ];
  } finally {
    for (const service of services) await stopService(service);
    await postgres.stop();
    await dir.cleanup();
  }
}

if (import.meta.main) {
  const serveAt = process.argv.indexOf("--serve");
  if (serveAt !== -1) await serve(process.argv[serveAt + 1] ?? "");
  else console.table(await benchStoreBackends());
}
