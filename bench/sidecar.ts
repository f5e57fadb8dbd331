/**
 * Sidecar benchmark (`make bench ONLY=sidecar`): the real `authority sidecar` process (the
 * CLI, its own Node process, Redis-backed freshness, policy keys from the authority's store
 * under its KEK) beside the no-op grpc-js Check server (bench/noop-check-server.ts, also its
 * own process), measured in the same run by the same load generator (a worker thread):
 *
 * - Check at fixed rates (1,000 and 5,000 req/s, 5 s each after a 1 s warm-up): p50/p99
 *   latency from send to answer (hdr-histogram, µs) and the rate achieved;
 * - Check capacity: closed loop, 32 calls outstanding, 3 s: calls per second;
 * - forward proxy vs a direct call to the same upstream: sequential latency (p50/p99) and
 *   autocannon throughput (10 connections, 5 s);
 * - the sidecar's RSS (VmRSS) sampled during all of the above;
 * - revocation propagation: a policy is revoked on the authority while two sidecars are
 *   asked back to back; the time until both deny.
 *
 * The authority service, the IdP and the upstream run in this process; Redis is a real
 * redis-server. Targets are printed beside the numbers.
 */

import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { Agent, request as httpRequest } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";
import { Client, credentials, type ServiceError } from "@grpc/grpc-js";
import * as hdr from "hdr-histogram-js";
import { putAuthProfile } from "../src/authority/auth-profiles.ts";
import { importOpenApi } from "../src/authority/capabilities.ts";
import { createPartner } from "../src/authority/partners.ts";
import { assignCapability } from "../src/authority/policies.ts";
import { createSubject } from "../src/authority/subjects.ts";
import { Kek } from "../src/crypto/index.ts";
import { createJwtVerifier } from "../src/identity/jwt-verifier.ts";
import { createLogger } from "../src/observability/logger.ts";
import { createPolicyChangePublisher } from "../src/policy/cache/index.ts";
import { createLocalPolicyProtector } from "../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../src/policy/process-key-rings.ts";
import { createStoredKeyRings } from "../src/policy/stored-key-rings.ts";
import { createAuthorityApp } from "../src/servers/authority/app.ts";
import type { AuthorityContext } from "../src/servers/authority/context.ts";
import { createIdpServer } from "../src/servers/idp/server.ts";
import { loadProtos } from "../src/servers/sidecar/grpc/proto.ts";
import { openStore } from "../src/store/index.ts";
import { startRedisServer } from "../test/helpers/redis-server.ts";
import { makeTempDir } from "../test/helpers/temp-dir.ts";
import { ordersApi, startUpstream } from "../test/servers/sidecar/world.ts";

const RATES = [1000, 5000] as const;
const FIXED_RATE_MS = 5000;
const WARMUP_MS = 1000;
const CAPACITY_MS = 3000;
const CAPACITY_CONCURRENCY = 32;
const HTTP_SEQUENTIAL = 2000;
const HTTP_DURATION_S = 5;
const HTTP_CONNECTIONS = 10;
const MAX_OUTSTANDING = 1000;
/**
 * The sidecar runs with the flag recommended for its container (NODE_OPTIONS; docs/sidecar.md):
 * V8's young generation otherwise grows to 64 MB semi-spaces under allocation-heavy load.
 * BENCH_SIDECAR_NODE_FLAGS overrides it ("" for none; e.g. add --max-old-space-size=128).
 */
const SIDECAR_NODE_FLAGS = (process.env.BENCH_SIDECAR_NODE_FLAGS ?? "--max-semi-space-size=8")
  .split(" ")
  .filter((flag) => flag.length > 0);
const SETTLE_MS = 500;

// ---------------------------------------------------------------------------------------
// Load generator (worker thread): its own event loop, so it does not share a core with the
// servers' event loops.

type LoadTask =
  | { kind: "fixed"; port: number; rate: number; durationMs: number; warmupMs: number; request: Uint8Array }
  | { kind: "capacity"; port: number; concurrency: number; durationMs: number; request: Uint8Array }
  | { kind: "sequential"; port: number; path: string; headers: Record<string, string>; count: number }
  | {
      kind: "autocannon";
      url: string;
      path: string;
      headers: Record<string, string>;
      duration: number;
      connections: number;
    };

interface LoadResult {
  /** The first failure, for the table (e.g. a gRPC status). */
  readonly firstError?: string;
  readonly completed: number;
  readonly errors: number;
  readonly denied: number;
  readonly rps: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
}

const CHECK_PATH = "/envoy.service.auth.v3.Authorization/Check";
const identity = (bytes: Buffer): Buffer => bytes;

/** True when a serialized CheckResponse carries denied_response (field 2) at the top level. */
function isDenied(bytes: Buffer): boolean {
  let offset = 0;
  const varint = (): number => {
    let result = 0;
    let shift = 0;
    for (;;) {
      const byte = bytes[offset++] ?? 0;
      result += (byte & 0x7f) * 2 ** shift;
      if ((byte & 0x80) === 0) return result;
      shift += 7;
    }
  };
  while (offset < bytes.length) {
    const tag = varint();
    if (tag === 0x12) return true;
    if ((tag & 7) !== 2) return false;
    const length = varint();
    offset += length;
  }
  return false;
}

function newHistogram() {
  return hdr.build({
    lowestDiscernibleValue: 1,
    highestTrackableValue: 60_000_000,
    numberOfSignificantValueDigits: 3,
  });
}

function summary(
  histogram: ReturnType<typeof newHistogram>,
  completed: number,
  errors: number,
  denied: number,
  seconds: number,
): LoadResult {
  const ms = (us: number) => Number((us / 1000).toFixed(3));
  return {
    completed,
    errors,
    denied,
    rps: Math.round(completed / seconds),
    p50Ms: ms(histogram.getValueAtPercentile(50)),
    p99Ms: ms(histogram.getValueAtPercentile(99)),
    maxMs: ms(histogram.maxValue),
  };
}

function grpcClient(port: number): Promise<Client> {
  const client = new Client(`127.0.0.1:${port}`, credentials.createInsecure());
  return new Promise((resolve, reject) => {
    client.waitForReady(Date.now() + 5000, (error) =>
      error === undefined || error === null ? resolve(client) : reject(error),
    );
  });
}

async function fixedRate(task: Extract<LoadTask, { kind: "fixed" }>): Promise<LoadResult> {
  const client = await grpcClient(task.port);
  const request = Buffer.from(task.request);
  const histogram = newHistogram();
  let completed = 0;
  let errors = 0;
  let denied = 0;
  let outstanding = 0;
  let firstError: string | undefined;
  let dropped = 0;
  const send = (record: boolean): void => {
    const started = performance.now();
    outstanding++;
    const options = { deadline: Date.now() + 10_000 };
    client.makeUnaryRequest(
      CHECK_PATH,
      identity,
      identity,
      request,
      options,
      (error: ServiceError | null, response?: Buffer) => {
        outstanding--;
        if (!record) return;
        if (error !== null || response === undefined) {
          errors++;
          firstError ??= `${error?.code ?? "?"} ${error?.details ?? ""}`.trim();
          return;
        }
        if (isDenied(response)) denied++;
        completed++;
        histogram.recordValue(Math.max(1, Math.round((performance.now() - started) * 1000)));
      },
    );
  };
  const phase = (durationMs: number, record: boolean) =>
    new Promise<void>((resolve) => {
      const start = performance.now();
      let sent = 0;
      const tick = (): void => {
        const elapsed = performance.now() - start;
        const due = Math.min(
          Math.floor((elapsed * task.rate) / 1000),
          Math.floor((durationMs * task.rate) / 1000),
        );
        while (sent < due) {
          // A server that falls far behind must not drown the generator (and the next phase).
          if (outstanding < MAX_OUTSTANDING) send(record);
          else if (record) dropped++;
          sent++;
        }
        if (elapsed >= durationMs) resolve();
        else setTimeout(tick, 1);
      };
      tick();
    });
  await phase(task.warmupMs, false);
  await phase(task.durationMs, true);
  const drainUntil = Date.now() + 15_000;
  while (outstanding > 0 && Date.now() < drainUntil) await new Promise((resolve) => setTimeout(resolve, 5));
  client.close();
  await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
  const result = summary(histogram, completed, errors + dropped, denied, task.durationMs / 1000);
  const first =
    firstError ?? (dropped > 0 ? `${dropped} not sent (${MAX_OUTSTANDING} outstanding)` : undefined);
  return first === undefined ? result : { ...result, firstError: first };
}

async function capacity(task: Extract<LoadTask, { kind: "capacity" }>): Promise<LoadResult> {
  const client = await grpcClient(task.port);
  const request = Buffer.from(task.request);
  const histogram = newHistogram();
  let completed = 0;
  let errors = 0;
  let denied = 0;
  const deadline = performance.now() + task.durationMs;
  await new Promise<void>((resolve) => {
    let running = task.concurrency;
    const loop = (): void => {
      if (performance.now() >= deadline) {
        running--;
        if (running === 0) resolve();
        return;
      }
      const started = performance.now();
      client.makeUnaryRequest(
        CHECK_PATH,
        identity,
        identity,
        request,
        {},
        (error: ServiceError | null, response?: Buffer) => {
          if (error !== null || response === undefined) errors++;
          else {
            if (isDenied(response)) denied++;
            completed++;
            histogram.recordValue(Math.max(1, Math.round((performance.now() - started) * 1000)));
          }
          loop();
        },
      );
    };
    for (let i = 0; i < task.concurrency; i++) loop();
  });
  client.close();
  return summary(histogram, completed, errors, denied, task.durationMs / 1000);
}

async function sequential(task: Extract<LoadTask, { kind: "sequential" }>): Promise<LoadResult> {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const histogram = newHistogram();
  let completed = 0;
  let errors = 0;
  let denied = 0;
  const once = () =>
    new Promise<number>((resolve) => {
      const req = httpRequest(
        { host: "127.0.0.1", port: task.port, path: task.path, headers: task.headers, agent },
        (res) => {
          res.resume();
          res.on("end", () => resolve(res.statusCode ?? 0));
        },
      );
      req.on("error", () => resolve(0));
      req.end();
    });
  for (let i = 0; i < 200; i++) await once();
  const started = performance.now();
  for (let i = 0; i < task.count; i++) {
    const t0 = performance.now();
    const status = await once();
    if (status === 0) errors++;
    else if (status !== 200) denied++;
    else {
      completed++;
      histogram.recordValue(Math.max(1, Math.round((performance.now() - t0) * 1000)));
    }
  }
  agent.destroy();
  return summary(histogram, completed, errors, denied, (performance.now() - started) / 1000);
}

interface AutocannonResult {
  readonly requests: { readonly average: number };
  readonly latency: { readonly p50: number; readonly p99: number; readonly max: number };
  readonly non2xx: number;
  readonly errors: number;
  readonly timeouts: number;
}

/**
 * autocannon in its own process: inside a worker thread it would talk to our parentPort
 * (it uses worker_threads itself), and in this process it would share a core with the servers.
 */
function cannon(task: Extract<LoadTask, { kind: "autocannon" }>): Promise<LoadResult> {
  const code = `
    const { createRequire } = await import("node:module");
    const autocannon = createRequire(${JSON.stringify(import.meta.url)})("autocannon");
    const options = JSON.parse(process.argv[1]);
    const result = await autocannon(options);
    process.stdout.write(JSON.stringify(result));
  `;
  const options = {
    url: task.url,
    connections: task.connections,
    duration: task.duration,
    requests: [{ method: "GET", path: task.path, headers: task.headers }],
  };
  return new Promise((resolve, reject) => {
    const child = track(
      spawn(process.execPath, ["--input-type=module", "-e", code, JSON.stringify(options)], {
        stdio: ["ignore", "pipe", "inherit"],
      }),
    );
    let output = "";
    child.stdout?.on("data", (chunk: Buffer) => {
      output += chunk.toString("utf8");
    });
    child.once("error", reject);
    child.once("exit", (code) => {
      try {
        const result = JSON.parse(output) as AutocannonResult;
        resolve({
          completed: Math.round(result.requests.average * task.duration),
          errors: result.errors + result.timeouts,
          denied: result.non2xx,
          rps: Math.round(result.requests.average),
          p50Ms: result.latency.p50,
          p99Ms: result.latency.p99,
          maxMs: result.latency.max,
        });
      } catch (error) {
        reject(new Error(`autocannon exited with ${code}`, { cause: error }));
      }
    });
  });
}

function runLoadWorker(): void {
  parentPort?.on("message", (task: LoadTask) => {
    const run =
      task.kind === "fixed"
        ? fixedRate(task)
        : task.kind === "capacity"
          ? capacity(task)
          : task.kind === "sequential"
            ? sequential(task)
            : cannon(task);
    run.then(
      (result) => parentPort?.postMessage({ ok: true, result }),
      (error: unknown) => parentPort?.postMessage({ ok: false, error: String(error) }),
    );
  });
}

if (!isMainThread && (workerData as { role?: string } | null)?.role === "sidecar-load") runLoadWorker();

// ---------------------------------------------------------------------------------------
// Orchestration (main thread)

export interface SidecarBenchRow {
  readonly measure: string;
  readonly sidecar: string;
  readonly baseline: string;
  readonly result: string;
  readonly target: string;
  readonly met: string;
}

interface Loader {
  run(task: LoadTask): Promise<LoadResult>;
  close(): Promise<void>;
}

function startLoader(): Loader {
  const worker = new Worker(new URL(import.meta.url), { workerData: { role: "sidecar-load" } });
  let queue = Promise.resolve();
  return {
    run(task) {
      const next = queue.then(
        () =>
          new Promise<LoadResult>((resolve, reject) => {
            worker.once("message", (message: { ok: boolean; result?: LoadResult; error?: string }) => {
              if (message.ok && message.result !== undefined) resolve(message.result);
              else reject(new Error(message.error ?? "load worker failed"));
            });
            worker.postMessage(task);
          }),
      );
      queue = next.then(
        () => undefined,
        () => undefined,
      );
      return next;
    },
    async close() {
      await worker.terminate();
    },
  };
}

interface ChildServer {
  readonly child: ChildProcess;
  readonly ports: { grpc: number; proxy: number; metrics: number };
  stop(): Promise<void>;
}

function waitForLine(
  child: ChildProcess,
  match: (line: string) => boolean,
  timeoutMs = 20_000,
): Promise<string> {
  return new Promise((resolve, reject) => {
    let buffer = "";
    let errors = "";
    const timer = setTimeout(
      () => reject(new Error(`child did not start: ${errors.slice(-2000)}`)),
      timeoutMs,
    );
    child.stderr?.on("data", (chunk: Buffer) => {
      errors += chunk.toString("utf8");
    });
    child.stdout?.on("data", (chunk: Buffer) => {
      buffer += chunk.toString("utf8");
      let newline = buffer.indexOf("\n");
      while (newline !== -1) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        if (match(line)) {
          clearTimeout(timer);
          resolve(line);
        }
        newline = buffer.indexOf("\n");
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`child exited with ${code}: ${errors.slice(-2000)}`));
    });
  });
}

/** Children still running when this process exits (even on an uncaught error) are killed. */
const liveChildren = new Set<ChildProcess>();
let exitHookInstalled = false;

function track(child: ChildProcess): ChildProcess {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once("exit", () => {
      for (const running of liveChildren) running.kill("SIGKILL");
    });
  }
  liveChildren.add(child);
  child.once("exit", () => liveChildren.delete(child));
  return child;
}

function stopChild(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) {
      resolve();
      return;
    }
    const guard = setTimeout(() => child.kill("SIGKILL"), 15_000);
    child.once("exit", () => {
      clearTimeout(guard);
      resolve();
    });
    child.kill("SIGTERM");
  });
}

/**
 * `cli`: `node bin/authority.ts sidecar`, exactly as deployed. `command`: the same
 * `authority sidecar` command (src/cli/commands/sidecar.ts: same flags, same run()) registered
 * alone, without the modules of every other subcommand that src/cli/main.ts imports at start.
 */
async function startSidecarProcess(
  env: Record<string, string>,
  entry: "cli" | "command",
): Promise<ChildServer> {
  const bin = fileURLToPath(new URL("../bin/authority.ts", import.meta.url));
  const command = new URL("../src/cli/commands/sidecar.ts", import.meta.url).href;
  const code = `
    const { Command } = await import("commander");
    const { register } = await import(${JSON.stringify(command)});
    const program = new Command("authority");
    register(program);
    await program.parseAsync(["node", "authority", "sidecar"]);
  `;
  const args = entry === "cli" ? [bin, "sidecar"] : ["--input-type=module", "-e", code];
  const child = track(
    spawn(process.execPath, [...SIDECAR_NODE_FLAGS, ...args], {
      env: { ...process.env, ...env, AUTHORITY_LOG_LEVEL: "info" },
      stdio: ["ignore", "pipe", "pipe"],
    }),
  );
  const line = await waitForLine(child, (text) => text.includes('"sidecar listening"'));
  const parsed = JSON.parse(line) as { grpcPort: number; proxyPort: number; metricsPort: number };
  child.stdout?.resume();
  return {
    child,
    ports: { grpc: parsed.grpcPort, proxy: parsed.proxyPort, metrics: parsed.metricsPort },
    stop: () => stopChild(child),
  };
}

/** Reference: http-proxy alone (keep-alive agent, no decision, no redaction) in its own process. */
async function startBareProxyProcess(upstreamUrl: string): Promise<ChildServer> {
  const code = `
    const http = await import("node:http");
    const { createRequire } = await import("node:module");
    const httpProxy = createRequire(${JSON.stringify(import.meta.url)})("http-proxy");
    const target = new URL(${JSON.stringify(upstreamUrl)});
    const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });
    const proxy = httpProxy.createProxyServer({});
    const server = http.createServer((req, res) => {
      const path = req.url.startsWith("/") ? req.url : new URL(req.url).pathname;
      proxy.web(req, res, {
        target: { protocol: "http:", host: target.hostname, hostname: target.hostname, port: Number(target.port), path },
        toProxy: true, ignorePath: true, agent, headers: { host: target.host },
      });
    }).listen(0, "127.0.0.1", () => console.log("bare-port " + server.address().port));
    process.on("SIGTERM", () => process.exit(0));
  `;
  const child = track(
    spawn(process.execPath, [...SIDECAR_NODE_FLAGS, "--input-type=module", "-e", code], {
      stdio: ["ignore", "pipe", "pipe"],
    }),
  );
  const line = await waitForLine(child, (text) => text.startsWith("bare-port "));
  const port = Number(line.split(" ")[1]);
  return { child, ports: { grpc: 0, proxy: port, metrics: 0 }, stop: () => stopChild(child) };
}

async function startNoopProcess(): Promise<ChildServer> {
  const module = new URL("./noop-check-server.ts", import.meta.url).href;
  const code = `const { startNoopCheckServer } = await import(${JSON.stringify(module)}); const s = await startNoopCheckServer(); console.log("noop-port " + s.port); process.on("SIGTERM", () => s.close().then(() => process.exit(0)));`;
  const child = track(
    spawn(process.execPath, ["--input-type=module", "-e", code], {
      stdio: ["ignore", "pipe", "pipe"],
    }),
  );
  const line = await waitForLine(child, (text) => text.startsWith("noop-port "));
  const port = Number(line.split(" ")[1]);
  return { child, ports: { grpc: port, proxy: 0, metrics: 0 }, stop: () => stopChild(child) };
}

/** VmRSS of a process in bytes (Linux), sampled every 100 ms while `sampling` runs. */
function rssSampler(pid: number | undefined) {
  let max = 0;
  const read = (): void => {
    if (pid === undefined) return;
    try {
      const status = readFileSync(`/proc/${pid}/status`, "utf8");
      const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
      max = Math.max(max, kb * 1024);
    } catch {
      // The process is gone or /proc is unavailable: no sample.
    }
  };
  const timer = setInterval(read, 100);
  read();
  return {
    stop(): number {
      clearInterval(timer);
      read();
      return max;
    },
  };
}

function checkRequestBytes(token: string, path: string): Uint8Array {
  const method = loadProtos().authorization.Check as unknown as { requestSerialize(value: object): Buffer };
  return method.requestSerialize({
    attributes: {
      request: {
        http: {
          id: "bench-request",
          method: "GET",
          path,
          host: "orders.internal",
          scheme: "http",
          protocol: "HTTP/1.1",
          headers: {
            ":method": "GET",
            ":path": path,
            ":authority": "orders.internal",
            authorization: `Bearer ${token}`,
          },
        },
      },
      context_extensions: { capability_id: "orders" },
    },
  });
}

const fmt = (n: number, digits = 3) => Number(n.toFixed(digits)).toString();

/** BENCH_SIDECAR_PARTS=check,capacity,proxy,revocation runs a subset (default: all). */
function partEnabled(part: string): boolean {
  const parts = (process.env.BENCH_SIDECAR_PARTS ?? "").split(",").filter((p) => p.length > 0);
  return parts.length === 0 || parts.includes(part);
}

function failures(result: LoadResult): string {
  if (result.errors + result.denied === 0) return "";
  const first = result.firstError === undefined ? "" : `; first: ${result.firstError}`;
  return `, ${result.errors} errors, ${result.denied} denied${first}`;
}

/** With BENCH_PROGRESS=1, rows are printed to stderr as they are measured. */
function progress(rows: readonly SidecarBenchRow[]): void {
  if (process.env.BENCH_PROGRESS === "1") process.stderr.write(`${JSON.stringify(rows.at(-1))}\n`);
}

export async function benchSidecar(): Promise<SidecarBenchRow[]> {
  const dir = await makeTempDir("bench-sidecar-");
  const cleanups: Array<() => Promise<void>> = [() => dir.cleanup()];
  const rows: SidecarBenchRow[] = [];
  try {
    const dbFile = join(dir.path, "authority.db");
    const kekFile = join(dir.path, "kek");
    const { kek, base64 } = Kek.generate();
    await writeFile(kekFile, `${base64}\n`, { mode: 0o600 });
    const store = await openStore(`sqlite:${dbFile}`);
    cleanups.unshift(() => store.close());
    const idp = await createIdpServer({ audience: "authority" });
    const issuer = await idp.listen();
    cleanups.unshift(() => idp.close());
    const upstream = await startUpstream();
    cleanups.unshift(() => upstream.close());
    const redis = await startRedisServer();
    cleanups.unshift(() => redis.stop());
    const publisher = createPolicyChangePublisher({ url: redis.url });
    cleanups.unshift(() => publisher.close());

    const logger = createLogger("bench", "silent");
    const context: AuthorityContext = {
      config: {
        publicUrl: "http://127.0.0.1:8080",
        issuer,
        audience: "authority",
        bodyLimitBytes: 1024 * 1024,
        serviceIdentity: "bench",
        parameterScoping: { enabled: false, partnerAllowlist: [] },
      },
      store,
      verifier: createJwtVerifier({ issuer, audience: "authority", jwks: `${issuer}/.well-known/jwks.json` }),
      protector: createLocalPolicyProtector({
        keyRings: createStoredKeyRings({ store, kek }),
        serviceIdentity: "bench",
      }),
      logger,
      now: () => new Date(),
      secretKeyRings: createProcessKeyRings(),
      onPolicyChange: async (subjectId, head) => {
        await publisher.publish(subjectId, head);
      },
    };
    const app = await createAuthorityApp(context);
    await app.listen({ host: "127.0.0.1", port: 0 });
    cleanups.unshift(() => app.close());
    const authorityUrl = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;

    const actor = { subject: "bench", requestId: "bench" };
    await createPartner(context, { partner_id: "acme", name: "Acme" });
    await putAuthProfile(context, "acme", "orders-key", {
      type: "static",
      kind: "api_key",
      in: "header",
      name: "x-api-key",
      secret: "upstream-secret-0123456789",
    });
    await importOpenApi(context, actor, "acme", {
      capability_id: "orders",
      name: "Orders",
      document: ordersApi(),
      upstream_base_url: upstream.url,
      auth_profile_ref: "orders-key",
    });
    const allowed = ["orders:get:/orders/{orderId}", "orders:get:/orders"];
    for (const subjectId of ["bench-agent", "bench-revoked"]) {
      await createSubject(context, "acme", {
        subject_id: subjectId,
        subject_type: "agent",
        display_name: subjectId,
      });
      await assignCapability(context, actor, "acme", subjectId, "orders", {
        allowed_permission_ids: allowed,
        ttl_seconds: 3600,
      });
    }
    const agentToken = (await idp.issueToken({ subject: "bench-agent", lifetimeSec: 3600 })).accessToken;
    const revokedToken = (await idp.issueToken({ subject: "bench-revoked", lifetimeSec: 3600 })).accessToken;
    const sidecarToken = (
      await idp.issueToken({ subject: "bench-sidecar", roles: ["sidecar"], lifetimeSec: 3600 })
    ).accessToken;
    const tokenFile = join(dir.path, "sidecar-token");
    const cacheKeyFile = join(dir.path, "cache-key");
    await writeFile(tokenFile, sidecarToken, { mode: 0o600 });
    await writeFile(cacheKeyFile, randomBytes(32).toString("base64"), { mode: 0o600 });
    const sidecarEnv = {
      AUTHORITY_URL: authorityUrl,
      AUTHORITY_ISSUER: issuer,
      AUTHORITY_AUDIENCE: "authority",
      AUTHORITY_STORE_URL: `sqlite:${dbFile}`,
      AUTHORITY_KEK_FILE: kekFile,
      AUTHORITY_SERVICE_IDENTITY: "bench",
      AUTHORITY_REDIS_URL: redis.url,
      AUTHORITY_SIDECAR_CACHE_KEY_FILE: cacheKeyFile,
      AUTHORITY_SIDECAR_TOKEN_FILE: tokenFile,
      AUTHORITY_SIDECAR_GRPC_LISTEN: "127.0.0.1:0",
      AUTHORITY_SIDECAR_PROXY_LISTEN: "127.0.0.1:0",
      AUTHORITY_SIDECAR_METRICS_LISTEN: "127.0.0.1:0",
      AUTHORITY_SIDECAR_CAPABILITY_MAP: JSON.stringify({ "orders.internal": "orders" }),
    };
    const sidecar = await startSidecarProcess(sidecarEnv, "command");
    cleanups.unshift(() => sidecar.stop());
    const second = await startSidecarProcess(sidecarEnv, "cli");
    cleanups.unshift(() => second.stop());
    const noop = await startNoopProcess();
    cleanups.unshift(() => noop.stop());
    const loader = startLoader();
    cleanups.unshift(() => loader.close());

    // Idle RSS of both entries, before any load.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const idleCommand = rssSampler(sidecar.child.pid).stop();
    const idleCli = rssSampler(second.child.pid).stop();
    const setup: BenchSetup = { loader, sidecar, noop, agentToken, upstreamUrl: upstream.url };
    const rss = rssSampler(sidecar.child.pid);
    if (partEnabled("check")) rows.push(...(await checkRates(setup)));
    if (partEnabled("capacity")) rows.push(await checkCapacity(setup));
    if (partEnabled("proxy")) rows.push(...(await proxyVersusDirect(setup)));
    const maxRss = rss.stop();
    if (process.env.BENCH_DEBUG === "1") {
      const text = await (await fetch(`http://127.0.0.1:${sidecar.ports.metrics}/metrics`)).text();
      process.stderr.write(
        `${text
          .split("\n")
          .filter((l) =>
            /^(process_resident|nodejs_gc_duration_seconds_(sum|count)|authority_sidecar_(check_duration_seconds_(bucket|count)|policy_head_reads|decisions|token_checks|cache_(hits|misses)))/.test(
              l,
            ),
          )
          .join("\n")}\n`,
      );
    }
    rows.push({
      measure: `Sidecar RSS under load (max VmRSS; ${SIDECAR_NODE_FLAGS.join(" ") || "no flags"})`,
      sidecar: `${fmt(maxRss / (1024 * 1024), 1)} MB`,
      baseline: "",
      result: "",
      target: "≤ 150 MB",
      met: String(maxRss > 0 && maxRss <= 150 * 1024 * 1024),
    });
    rows.push({
      measure: "Sidecar RSS idle: command alone / `authority sidecar` CLI",
      sidecar: `${fmt(idleCommand / (1024 * 1024), 1)} MB / ${fmt(idleCli / (1024 * 1024), 1)} MB`,
      baseline: "",
      result: "the CLI loads every subcommand's modules",
      target: "",
      met: "",
    });
    if (process.env.BENCH_PROGRESS === "1") process.stderr.write(`${JSON.stringify(rows.at(-2))}\n`);
    progress(rows);
    if (partEnabled("revocation")) {
      rows.push(await revocationPropagation(authorityUrl, revokedToken, [sidecar, second], idp));
      progress(rows);
    }
    return rows;
  } finally {
    for (const cleanup of cleanups) await cleanup().catch(() => undefined);
  }
}

interface BenchSetup {
  readonly loader: Loader;
  readonly sidecar: ChildServer;
  readonly noop: ChildServer;
  readonly agentToken: string;
  readonly upstreamUrl: string;
}

async function checkRates(setup: BenchSetup): Promise<SidecarBenchRow[]> {
  const rows: SidecarBenchRow[] = [];
  const request = checkRequestBytes(setup.agentToken, "/orders/42");
  // Cold caches (JWKS, policy decrypt-verify, catalog, credentials) are not the steady state:
  // one call at a time for a second first, so no queue from the first decisions leaks in.
  for (const server of [setup.sidecar, setup.noop]) {
    await setup.loader.run({
      kind: "capacity",
      concurrency: 1,
      durationMs: WARMUP_MS,
      request,
      port: server.ports.grpc,
    });
  }
  for (const rate of RATES) {
    const task = { kind: "fixed" as const, rate, durationMs: FIXED_RATE_MS, warmupMs: WARMUP_MS, request };
    const real = await setup.loader.run({ ...task, port: setup.sidecar.ports.grpc });
    const base = await setup.loader.run({ ...task, port: setup.noop.ports.grpc });
    rows.push({
      measure: `Check @${rate}/s p50 / p99 ms (achieved req/s)`,
      sidecar: `${fmt(real.p50Ms)} / ${fmt(real.p99Ms)} (${real.rps}${failures(real)})`,
      baseline: `${fmt(base.p50Ms)} / ${fmt(base.p99Ms)} (${base.rps}${failures(base)})`,
      result: `throughput ${fmt(real.rps / Math.max(1, base.rps), 2)}×`,
      target: rate === 1000 ? "p99 ≤ 1 ms; ≥ 0.8× no-op" : "≥ 0.8× no-op",
      met: String(
        real.rps >= 0.8 * base.rps &&
          real.denied === 0 &&
          real.errors === 0 &&
          (rate !== 1000 || real.p99Ms <= 1),
      ),
    });
    progress(rows);
  }
  return rows;
}

async function checkCapacity(setup: BenchSetup): Promise<SidecarBenchRow> {
  const task = {
    kind: "capacity" as const,
    concurrency: CAPACITY_CONCURRENCY,
    durationMs: CAPACITY_MS,
    request: checkRequestBytes(setup.agentToken, "/orders/42"),
  };
  // Warm both (caches, JIT) with an unrecorded second first.
  await setup.loader.run({ ...task, durationMs: WARMUP_MS, port: setup.sidecar.ports.grpc });
  await setup.loader.run({ ...task, durationMs: WARMUP_MS, port: setup.noop.ports.grpc });
  const real = await setup.loader.run({ ...task, port: setup.sidecar.ports.grpc });
  const base = await setup.loader.run({ ...task, port: setup.noop.ports.grpc });
  const ratio = real.rps / Math.max(1, base.rps);
  const row = {
    measure: `Check capacity req/s (${CAPACITY_CONCURRENCY} outstanding; p50 ms)`,
    sidecar: `${real.rps} (${fmt(real.p50Ms)})${failures(real)}`,
    baseline: `${base.rps} (${fmt(base.p50Ms)})`,
    result: `${fmt(ratio, 2)}×`,
    target: "≥ 0.8× no-op",
    met: String(ratio >= 0.8 && real.denied === 0),
  };
  progress([row]);
  return row;
}

async function proxyVersusDirect(setup: BenchSetup): Promise<SidecarBenchRow[]> {
  const rows: SidecarBenchRow[] = [];
  const proxyHeaders = { "proxy-authorization": `Bearer ${setup.agentToken}`, host: "orders.internal" };
  const upstreamPort = Number(new URL(setup.upstreamUrl).port);
  const direct = await setup.loader.run({
    kind: "sequential",
    port: upstreamPort,
    path: "/orders/42",
    headers: { "x-api-key": "k" },
    count: HTTP_SEQUENTIAL,
  });
  const proxied = await setup.loader.run({
    kind: "sequential",
    port: setup.sidecar.ports.proxy,
    path: "http://orders.internal/orders/42",
    headers: proxyHeaders,
    count: HTTP_SEQUENTIAL,
  });
  const added = proxied.p50Ms - direct.p50Ms;
  rows.push({
    measure: "Proxy latency p50 / p99 ms (sequential, JSON redacted)",
    sidecar: `${fmt(proxied.p50Ms)} / ${fmt(proxied.p99Ms)}${failures(proxied)}`,
    baseline: `${fmt(direct.p50Ms)} / ${fmt(direct.p99Ms)} (direct)`,
    result: `+${fmt(added)} ms p50`,
    target: "adds ≤ 1 ms p50",
    met: String(added <= 1 && proxied.denied === 0),
  });
  progress(rows);
  const cannonDirect = await setup.loader.run({
    kind: "autocannon",
    url: setup.upstreamUrl,
    path: "/orders/42",
    headers: {},
    duration: HTTP_DURATION_S,
    connections: HTTP_CONNECTIONS,
  });
  const cannonProxy = await setup.loader.run({
    kind: "autocannon",
    url: `http://127.0.0.1:${setup.sidecar.ports.proxy}`,
    path: "http://orders.internal/orders/42",
    headers: proxyHeaders,
    duration: HTTP_DURATION_S,
    connections: HTTP_CONNECTIONS,
  });
  const bare = await startBareProxyProcess(setup.upstreamUrl);
  const cannonBare = await setup.loader.run({
    kind: "autocannon",
    url: `http://127.0.0.1:${bare.ports.proxy}`,
    path: "http://orders.internal/orders/42",
    headers: {},
    duration: HTTP_DURATION_S,
    connections: HTTP_CONNECTIONS,
  });
  await bare.stop();
  const ratio = cannonProxy.rps / Math.max(1, cannonDirect.rps);
  rows.push({
    measure: `Proxy throughput req/s (autocannon, ${HTTP_CONNECTIONS} connections; p50 ms)`,
    sidecar: `${cannonProxy.rps} (${fmt(cannonProxy.p50Ms)})${cannonProxy.denied > 0 ? ` ${cannonProxy.denied} non-2xx` : ""}`,
    baseline: `${cannonDirect.rps} (${fmt(cannonDirect.p50Ms)}) direct`,
    result: `${fmt(ratio, 2)}×`,
    target: "≥ 0.5× direct",
    met: String(ratio >= 0.5 && cannonProxy.denied === 0),
  });
  progress(rows);
  rows.push({
    measure: "Reference: bare http-proxy (no decision, no redaction) req/s (p50 ms)",
    sidecar: `${cannonProxy.rps}`,
    baseline: `${cannonBare.rps} (${fmt(cannonBare.p50Ms)})`,
    result: `sidecar ${fmt(cannonProxy.rps / Math.max(1, cannonBare.rps), 2)}× bare; bare ${fmt(cannonBare.rps / Math.max(1, cannonDirect.rps), 2)}× direct`,
    target: "",
    met: "",
  });
  progress(rows);
  return rows;
}

/** Revokes through the admin HTTP route while both sidecars are asked back to back; time until both deny. */
async function revocationPropagation(
  authorityUrl: string,
  token: string,
  sidecars: readonly ChildServer[],
  idp: Awaited<ReturnType<typeof createIdpServer>>,
): Promise<SidecarBenchRow> {
  const admin = (await idp.issueToken({ subject: "bench-admin", roles: ["admin"] })).accessToken;
  const request = checkRequestBytes(token, "/orders/7");
  const clients = await Promise.all(sidecars.map((s) => grpcClient(s.ports.grpc)));
  const decode = (
    loadProtos().authorization.Check as unknown as { responseDeserialize(bytes: Buffer): unknown }
  ).responseDeserialize;
  /** "allow", or the deny reason (google.rpc status message), or "error". */
  const ask = (client: Client) =>
    new Promise<string>((resolve) => {
      client.makeUnaryRequest(
        CHECK_PATH,
        identity,
        identity,
        Buffer.from(request),
        {},
        (error: ServiceError | null, response?: Buffer) => {
          if (error !== null || response === undefined) {
            resolve("error");
            return;
          }
          const decoded = decode(response) as { status?: { code?: number; message?: string } };
          resolve(decoded.status?.code === 0 ? "allow" : (decoded.status?.message ?? "deny"));
        },
      );
    });
  // Warm: every sidecar has verified the policy and allows.
  for (const client of clients) {
    const until = performance.now() + 10_000;
    while ((await ask(client)) !== "allow" && performance.now() < until) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
  const started = performance.now();
  const revoke = fetch(`${authorityUrl}/partners/acme/caab/subjects/bench-revoked/policy/revoke`, {
    method: "POST",
    headers: { authorization: `Bearer ${admin}` },
  }).then(async (response) => {
    await response.arrayBuffer();
    return { status: response.status, ms: performance.now() - started };
  });
  const deniedAt = await Promise.all(
    clients.map(async (client) => {
      for (;;) {
        if ((await ask(client)) === "policy_revoked") return performance.now() - started;
        if (performance.now() - started > 10_000) return Number.POSITIVE_INFINITY;
      }
    }),
  );
  const answered = await revoke;
  for (const client of clients) client.close();
  const worst = Math.max(...deniedAt);
  return {
    measure: "Revocation → denied by both sidecars (ms from the revoke call)",
    sidecar: deniedAt.map((ms) => fmt(ms, 1)).join(" / "),
    baseline: `admin call ${answered.status} in ${fmt(answered.ms, 1)} ms`,
    result: `${fmt(worst, 1)} ms`,
    target: "≤ 1000 ms",
    met: String(worst <= 1000 && answered.status === 200),
  };
}

if (isMainThread && process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  const rows = await benchSidecar();
  console.table(rows);
  process.exit(0);
}
