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
 *
 * The peer, same run, same request, same rate and connections: OPA's REST server (`opa run
 * --server`, bench/lib/opa.ts) with bench/opa/authorize.rego over the same catalog, policy
 * and IdP keys (it verifies the same token; the token travels in OPA's input, its REST API
 * reads no header). Before either is measured both answer bench/lib/opa.ts's decision set,
 * and the bench stops when a decision differs from the policy's. OPA keeps no audit record
 * and no usage count: it decides only, so its figures are a floor for the decision itself.
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
import { CAPABILITY, catalog, SUBJECT, seedAll } from "../test/servers/authority/runtime/seed.ts";
import {
  authorityRequest,
  type CallerTokens,
  compareDecisions,
  type DecisionComparison,
  forgedToken,
  INVOCATION_DECISIONS,
  OPA_VERSION,
  type OpaData,
  opaRequest,
  startOpa,
} from "./lib/opa.ts";
import { openLoopHttp } from "./lib/open-loop-http.ts";
import { statCpuMs } from "./lib/processes.ts";
import type { Table } from "./report.ts";

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

/** The seed's policy: what agent-7 may call of billing-api (the authority's and OPA's). */
const ALLOW = [
  ["GET", "/users/{id}"],
  ["POST", "/invoices"],
] as const;

/** Whose CPU a row counts. */
type Measured = "authority" | "opa";

/** The token's issuer as the authority verifies it: for OPA's data. */
interface IdpFacts {
  readonly jwks: string;
  readonly issuer: string;
  readonly audience: string;
}

type ChildMessage =
  | { type: "ready"; url: string; noopUrl: string; token: string; unassignedToken: string; idp: IdpFacts }
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
  await seedAll(service.context.store, service.context.protector, { allow: [...ALLOW] });
  const token = (await idp.issueToken({ subject: SUBJECT, lifetimeSec: 3600 })).accessToken;
  const unassignedToken = (await idp.issueToken({ subject: "agent-9", lifetimeSec: 3600 })).accessToken;
  const jwks = await (await fetch(config.jwksUrl)).text();
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
  send({
    type: "ready",
    url,
    noopUrl: `http://127.0.0.1:${(noop.address() as AddressInfo).port}`,
    token,
    unassignedToken,
    idp: { jwks, issuer: config.issuer, audience: config.audience },
  });
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
    const onExit = (code: number | null) => reject(new Error(`bench service exited (${code})`));
    const onMessage = (message: ChildMessage) => {
      if (message.type !== type) return;
      child.off("message", onMessage);
      child.off("exit", onExit);
      resolve(message as Extract<ChildMessage, { type: T }>);
    };
    child.on("message", onMessage);
    child.once("exit", onExit);
  });
}

/** The service in its own process (this file, `--serve`): its URLs, tokens, CPU samples, close. */
async function startService(options: AuthorizeBenchOptions) {
  const child = fork(import.meta.filename, ["--serve", options.logLevel ?? "warn"], {
    stdio: "inherit",
    execArgv: [...process.execArgv, ...(process.env.BENCH_SERVE_FLAGS ?? "").split(" ").filter(Boolean)],
  });
  const close = async () => {
    if (child.connected) {
      const closed = nextMessage(child, "closed");
      child.send({ type: "close" });
      await closed;
    }
    if (child.exitCode === null && child.signalCode === null) {
      // Let the child exit by itself first (a --cpu-prof run writes its profile on exit).
      const exited = once(child, "exit");
      if ((await Promise.race([exited, delay(5000)])) === undefined) {
        child.kill();
        await exited;
      }
    }
  };
  try {
    const ready = await nextMessage(child, "ready");
    const sample = async () => {
      const answer = nextMessage(child, "cpu");
      child.send({ type: "cpu" });
      return answer;
    };
    const tokens: CallerTokens = {
      subject: ready.token,
      "unassigned subject": ready.unassignedToken,
      "no token": undefined,
      forged: forgedToken(ready.token),
    };
    return { ready, tokens, sample, close };
  } catch (error) {
    await close().catch(() => undefined);
    throw error;
  }
}

/** OPA's data: the seed's catalog and policy, and the IdP the authority trusts. */
function opaData(idp: IdpFacts): OpaData {
  return {
    idp,
    catalog: { [CAPABILITY]: catalog.map(({ method, path }) => ({ method, path })) },
    policies: {
      [SUBJECT]: {
        [CAPABILITY]: ALLOW.map(([method, path]) => `${CAPABILITY}:${method.toLowerCase()}:${path}`),
      },
    },
  };
}

/** The service and OPA beside it, both deciding the decision set; `run` gets them once they agree. */
async function withOpaPeer<T>(
  options: AuthorizeBenchOptions,
  run: (
    service: Awaited<ReturnType<typeof startService>>,
    opa: { url: string; pid: number },
    decisions: DecisionComparison,
  ) => Promise<T>,
): Promise<T> {
  const service = await startService(options);
  const dir = await makeTempDir("bench-opa-");
  try {
    const opa = await startOpa(opaData(service.ready.idp), dir.path);
    try {
      return await run(service, opa, await compareDecisions(service.ready.url, opa.url, service.tokens));
    } finally {
      await opa.stop();
    }
  } finally {
    await service.close();
    await dir.cleanup();
  }
}

export async function benchAuthorize(options: AuthorizeBenchOptions = {}): Promise<Table[]> {
  const durationSec = options.durationSec ?? 10;
  const rate = options.rate ?? 1000;
  const connections = options.connections ?? 50;
  return withOpaPeer(options, async (service, opa, decisions) => {
    /** CPU µs of the server so far: the service's own count, or OPA's from /proc. */
    const cpu = async (server: Measured) =>
      server === "authority" ? (await service.sample()).micros : statCpuMs(opa.pid) * 1000;
    const measuredCase = INVOCATION_DECISIONS[0];
    if (measuredCase === undefined) throw new Error("the decision set is empty");
    const request = { method: "POST", ...authorityRequest(service.ready.url, service.tokens, measuredCase) };
    const opaQuestion = { method: "POST", ...opaRequest(opa.url, service.tokens, measuredCase) };
    // Warm: JIT, token cache, policy cache, key rings; OPA's compiled query.
    await cannon({ ...request, connections: 4, amount: 3000 });
    await cannon({ ...opaQuestion, connections: 4, amount: 3000 });
    const saturate = async (
      name: string,
      target: { url: string; headers: Record<string, string>; body: string; method: string },
      server: Measured,
      goal: string,
    ): Promise<AuthorizeBenchRow> => {
      const before = await cpu(server);
      const result = await cannon({ ...target, connections, duration: durationSec });
      const micros = (await cpu(server)) - before;
      return {
        name,
        requests: result.requests.total,
        reqPerSec: Math.round(result.requests.average),
        p50Ms: result.latency.p50,
        p99Ms: result.latency.p99,
        errors: result.errors + result.timeouts,
        non2xx: result.non2xx,
        serverCpuUsPerRequest: Math.round(micros / Math.max(1, result.requests.total)),
        target: goal,
      };
    };
    // Fixed rate: open loop, evenly spaced; the no-op server first, then the real route, then OPA.
    const paced = async (
      name: string,
      target: { url: string; headers: Record<string, string>; body: string },
      server: Measured,
      goal: string,
    ): Promise<AuthorizeBenchRow> => {
      // The service's sample also starts its loop-delay window.
      const serviceBefore = await service.sample();
      const opaBefore = statCpuMs(opa.pid);
      const result = await openLoopHttp({
        ...target,
        method: "POST",
        rate,
        durationMs: durationSec * 1000,
        warmupMs: 1000,
        connections: 16,
      });
      const loop = await service.sample();
      const micros =
        server === "authority" ? loop.micros - serviceBefore.micros : (statCpuMs(opa.pid) - opaBefore) * 1000;
      return {
        name,
        requests: result.requests,
        reqPerSec: result.reqPerSec,
        p50Ms: result.p50Ms,
        p99Ms: result.p99Ms,
        errors: result.errors,
        non2xx: result.non2xx,
        serverCpuUsPerRequest: Math.round(micros / Math.max(1, result.requests)),
        target: goal,
        generatorLateP99Ms: result.lateP99Ms,
        ...(server === "authority" ? { serverLoopDelayMs: `${loop.loopP99Ms} / ${loop.loopMaxMs}` } : {}),
      };
    };
    const noop = { ...request, url: service.ready.noopUrl };
    const baseline = await paced(`no-op node:http server @ ${rate} req/s (baseline)`, noop, "authority", "");
    const fixed = await paced(
      `authorize-invocation @ ${rate} req/s (open loop)`,
      request,
      "authority",
      "p99 ≤ 5 ms",
    );
    const opaFixed = await paced(`OPA REST server @ ${rate} req/s (open loop)`, opaQuestion, "opa", "");
    const saturated = await saturate("authorize-invocation saturation", request, "authority", "≥ 5000 req/s");
    const opaSaturated = await saturate("OPA REST server saturation", opaQuestion, "opa", "");
    return [
      {
        title: `Same request (${measuredCase.body.method} ${measuredCase.body.path}, an allow), same rate and connections; OPA ${OPA_VERSION} REST server (opa run --server) with bench/opa/authorize.rego: it verifies the same token against the same JWKS and decides the same policy, but keeps no audit record or usage count. OPA's CPU is read from /proc (10 ms ticks).`,
        rows: [baseline, fixed, opaFixed, saturated, opaSaturated],
      },
      {
        title: "authorize-invocation over OPA, same run (below 1: ours is lower):",
        rows: ratios(rate, fixed, opaFixed, saturated, opaSaturated),
      },
      {
        title: `Same decisions: both servers' answers to the ${decisions.requests.length} requests of the decision set (bench/lib/opa.ts), checked before anything is measured; a decision that differs from the policy stops the bench.`,
        rows: decisions.requests.map((request, i) => ({
          request: describeCase(request),
          policy: request.allowed ? "allow" : "deny",
          authority: decisions.authority[i] === true ? "allow" : "deny",
          opa: decisions.opa[i] === true ? "allow" : "deny",
        })),
      },
    ];
  });
}

/** "GET /users/42 of billing-api, body subject agent-7, token: subject". */
function describeCase({ body, caller }: (typeof INVOCATION_DECISIONS)[number]): string {
  return `${body.method} ${body.path} of ${body.capability_id}, body subject ${body.subject?.subject_id ?? "none"}, token: ${caller}`;
}

function ratios(
  rate: number,
  fixed: AuthorizeBenchRow,
  opaFixed: AuthorizeBenchRow,
  saturated: AuthorizeBenchRow,
  opaSaturated: AuthorizeBenchRow,
): object[] {
  const ratio = (a: number, b: number) => (b > 0 ? Number((a / b).toFixed(2)) : Number.NaN);
  return [
    {
      figure: `p50 @ ${rate} req/s`,
      authority: fixed.p50Ms,
      opa: opaFixed.p50Ms,
      ratio: ratio(fixed.p50Ms, opaFixed.p50Ms),
    },
    {
      figure: `p99 @ ${rate} req/s`,
      authority: fixed.p99Ms,
      opa: opaFixed.p99Ms,
      ratio: ratio(fixed.p99Ms, opaFixed.p99Ms),
    },
    {
      figure: "server CPU per request (µs), fixed rate",
      authority: fixed.serverCpuUsPerRequest,
      opa: opaFixed.serverCpuUsPerRequest,
      ratio: ratio(fixed.serverCpuUsPerRequest, opaFixed.serverCpuUsPerRequest),
    },
    {
      figure: "server CPU per request (µs), saturated",
      authority: saturated.serverCpuUsPerRequest,
      opa: opaSaturated.serverCpuUsPerRequest,
      ratio: ratio(saturated.serverCpuUsPerRequest, opaSaturated.serverCpuUsPerRequest),
    },
    {
      figure: "saturation (req/s; above 1: ours serves more)",
      authority: saturated.reqPerSec,
      opa: opaSaturated.reqPerSec,
      ratio: ratio(saturated.reqPerSec, opaSaturated.reqPerSec),
    },
  ];
}

if (import.meta.main) {
  const serveAt = process.argv.indexOf("--serve");
  if (serveAt !== -1) await serve(process.argv[serveAt + 1] ?? "warn");
  else for (const table of await benchAuthorize()) console.table(table.rows);
}
