/**
 * POST /v1/authorize-invocation over HTTP on loopback with a warm policy: the real
 * service (SQLite store in a temp dir, stored key rings, audit + usage recording), tokens
 * from the real dev IdP. The service runs in a child process (this file, `--serve`) so
 * the load generators (in this process) never share its event loop or its CPU accounting.
 *
 * - fixed rate: 1,000 req/s for `durationSec`, open loop (bench/lib/open-loop-http.ts:
 *   evenly spaced; latency from dispatch, waits for a busy connection included) → p50 / p99
 *   (target p99 ≤ 5 ms), beside a bare node:http server in the same process at the same
 *   rate: the HTTP round-trip floor of the machine
 * - saturation: autocannon, as fast as `connections` connections go → req/s (target ≥ 5,000)
 *
 * Every request is an allow, so each runs the whole path: token, subject, capability,
 * policy record + cache, decide, audit record, usage counts. `serverCpuUsPerRequest` is
 * the service process's CPU time per request: the cost of the path itself, independent
 * of how busy the machine is.
 */
import { type ChildProcess, fork } from "node:child_process";
import { once } from "node:events";
import { createServer, type Server } from "node:http";
import { createRequire } from "node:module";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { setTimeout as delay } from "node:timers/promises";
import { resolveAuthorityConfig } from "../src/config/authority.ts";
import { buildAuthorityService } from "../src/servers/authority/build.ts";
import { createIdpServer } from "../src/servers/idp/index.ts";
import { makeTempDir } from "../test/helpers/temp-dir.ts";
import { seedAll } from "../test/servers/authority/runtime/seed.ts";
import { openLoopHttp } from "./lib/open-loop-http.ts";

export interface AuthorizeBenchRow {
  name: string;
  requests: number;
  reqPerSec: number;
  p50Ms: number;
  p99Ms: number;
  errors: number;
  non2xx: number;
  /** CPU time of the service process per request (µs). */
  serverCpuUsPerRequest: number;
  target: string;
  /** p99 of how late the open-loop generator dispatched after the due time (its timer). */
  generatorLateP99Ms?: number;
  /**
   * The service's own event-loop delay during the run (p99 / max, ms): a stall of the service
   * (GC, a checkpoint, a synchronous write) shows here; a tail without one is the machine's.
   */
  serverLoopDelayMs?: string;
}

export interface AuthorizeBenchOptions {
  readonly durationSec?: number;
  readonly rate?: number;
  readonly connections?: number;
  /** Log level of the service under test (default "warn": no per-request log line). */
  readonly logLevel?: string;
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
// autocannon ships no types; this is the one call used.
const autocannon = createRequire(import.meta.url)("autocannon") as Autocannon;

function cannon(options: Record<string, unknown>): Promise<CannonResult> {
  return new Promise((resolve, reject) => {
    autocannon(options, (error, result) => (error ? reject(error) : resolve(result)));
  });
}

type ChildMessage =
  | { type: "ready"; url: string; noopUrl: string; token: string }
  | { type: "cpu"; micros: number; loopP99Ms: number; loopMaxMs: number }
  | { type: "closed" };

/** The service side: IdP + authority service + seed, then answers "cpu" and "close" requests. */
async function serve(logLevel: string): Promise<void> {
  const dir = await makeTempDir("bench-authorize-");
  const idp = await createIdpServer({ tokenLifetimeSec: 3600 });
  await idp.listen({ host: "127.0.0.1", port: 0 });
  const config = resolveAuthorityConfig({
    flags: {
      listen: "127.0.0.1:0",
      issuer: idp.issuer,
      "state-dir": dir.path,
      store: `sqlite:${join(dir.path, "authority.db")}`,
      "log-level": logLevel,
      // A fresh embedded install, chosen explicitly: the KEK file is created on first start.
      "policy-protection": "embedded",
      "init-kek": "true",
    },
    env: {},
  });
  const service = await buildAuthorityService(config);
  const url = await service.listen();
  const noop = await listenNoop();
  await seedAll(service.context.store, service.context.protector);
  const token = (await idp.issueToken({ subject: "agent-7", lifetimeSec: 3600 })).accessToken;
  const send = (message: ChildMessage) => process.send?.(message);
  const loop = monitorEventLoopDelay({ resolution: 1 });
  loop.enable();
  process.on("message", (message: { type: string }) => {
    if (message.type === "cpu") {
      // Each answer covers the loop delay since the previous one.
      const usage = process.cpuUsage();
      const ms = (ns: number) => Number((ns / 1e6).toFixed(1));
      send({
        type: "cpu",
        micros: usage.user + usage.system,
        loopP99Ms: ms(loop.percentile(99)),
        loopMaxMs: ms(loop.max),
      });
      loop.reset();
    } else if (message.type === "close") {
      void (async () => {
        await service.recorder.flush(30_000);
        await service.close();
        noop.close();
        await idp.close();
        await dir.cleanup();
        send({ type: "closed" });
        process.disconnect();
      })();
    }
  });
  send({ type: "ready", url, noopUrl: `http://127.0.0.1:${(noop.address() as AddressInfo).port}`, token });
}

/**
 * The baseline, in the same process: a bare node:http server that reads the body and
 * answers `{}`. What it shows at 1,000 req/s is the floor of an HTTP round trip on this
 * machine; the difference to authorize-invocation is the cost of deciding.
 */
async function listenNoop(): Promise<Server> {
  const server = createServer((request, response) => {
    request.resume();
    request.on("end", () => {
      response.writeHead(200, { "content-type": "application/json", "content-length": "2" });
      response.end("{}");
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return server;
}

function nextMessage<T extends ChildMessage["type"]>(
  child: ChildProcess,
  type: T,
): Promise<Extract<ChildMessage, { type: T }>> {
  return new Promise((resolve, reject) => {
    const onMessage = (message: ChildMessage) => {
      if (message.type !== type) return;
      child.off("message", onMessage);
      resolve(message as Extract<ChildMessage, { type: T }>);
    };
    child.on("message", onMessage);
    child.once("exit", (code) => reject(new Error(`bench service exited (${code})`)));
  });
}

export async function benchAuthorize(options: AuthorizeBenchOptions = {}): Promise<AuthorizeBenchRow[]> {
  const durationSec = options.durationSec ?? 10;
  const child = fork(import.meta.filename, ["--serve", options.logLevel ?? "warn"], {
    stdio: "inherit",
    execArgv: [...process.execArgv, ...(process.env.BENCH_SERVE_FLAGS ?? "").split(" ").filter(Boolean)],
  });
  try {
    const { url, noopUrl, token } = await nextMessage(child, "ready");
    const sample = async () => {
      const answer = nextMessage(child, "cpu");
      child.send({ type: "cpu" });
      return answer;
    };
    const cpu = async () => (await sample()).micros;
    const request = {
      url: `${url}/v1/authorize-invocation`,
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({
        subject: { subject_id: "agent-7" },
        capability_id: "billing-api",
        method: "GET",
        path: "/users/42",
      }),
    };
    // Warm: JIT, token cache, policy cache, key rings.
    await cannon({ ...request, connections: 4, amount: 3000 });
    const measured = async (name: string, run: Record<string, unknown>, target: string) => {
      const before = await cpu();
      const result = await cannon({ ...request, ...run, duration: durationSec });
      const micros = (await cpu()) - before;
      return {
        name,
        requests: result.requests.total,
        reqPerSec: Math.round(result.requests.average),
        p50Ms: result.latency.p50,
        p99Ms: result.latency.p99,
        errors: result.errors + result.timeouts,
        non2xx: result.non2xx,
        serverCpuUsPerRequest: Math.round(micros / Math.max(1, result.requests.total)),
        target,
      } satisfies AuthorizeBenchRow;
    };
    const rate = options.rate ?? 1000;
    // Fixed rate: open loop, evenly spaced; the no-op server first, then the real route.
    const paced = async (name: string, url: string, target: string): Promise<AuthorizeBenchRow> => {
      const before = await cpu();
      const result = await openLoopHttp({
        url,
        method: request.method,
        headers: request.headers,
        body: request.body,
        rate,
        durationMs: durationSec * 1000,
        warmupMs: 1000,
        connections: 16,
      });
      const after = await sample();
      return {
        name,
        requests: result.requests,
        reqPerSec: result.reqPerSec,
        p50Ms: result.p50Ms,
        p99Ms: result.p99Ms,
        errors: result.errors,
        non2xx: result.non2xx,
        serverCpuUsPerRequest: Math.round((after.micros - before) / Math.max(1, result.requests)),
        target,
        generatorLateP99Ms: result.lateP99Ms,
        serverLoopDelayMs: `${after.loopP99Ms} / ${after.loopMaxMs}`,
      };
    };
    const baseline = await paced(`no-op node:http server @ ${rate} req/s (baseline)`, noopUrl, "");
    const fixed = await paced(`authorize-invocation @ ${rate} req/s (open loop)`, request.url, "p99 ≤ 5 ms");
    const saturated = await measured(
      "authorize-invocation saturation",
      { connections: options.connections ?? 50 },
      "≥ 5000 req/s",
    );
    const closed = nextMessage(child, "closed");
    child.send({ type: "close" });
    await closed;
    return [baseline, fixed, saturated];
  } finally {
    if (child.exitCode === null && child.signalCode === null) {
      // Let the child exit by itself first (a --cpu-prof run writes its profile on exit).
      const exited = once(child, "exit");
      if ((await Promise.race([exited, delay(5000)])) === undefined) {
        child.kill();
        await exited;
      }
    }
  }
}

if (import.meta.main) {
  const serveAt = process.argv.indexOf("--serve");
  if (serveAt !== -1) await serve(process.argv[serveAt + 1] ?? "warn");
  else console.table(await benchAuthorize());
}
