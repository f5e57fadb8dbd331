/**
 * Managed crypto API throughput: the four operations with 1 KB payloads at concurrency 16,
 * end to end (HTTPS managed API → token cache → upstream crypto service → ML-KEM / ML-DSA),
 * everything in this process on ephemeral ports: both servers share one event loop (in a
 * deployment they are two processes), the crypto service's sign-encrypt and decrypt-verify
 * run on its worker threads, the load generator on a thread of its own. Targets: ≥ 500
 * sign-encrypt/s and ≥ 2,000 decrypt-verify/s.
 */

import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { Kek } from "../src/crypto/index.ts";
import { createJwtVerifier } from "../src/identity/jwt-verifier.ts";
import { createCryptoServer } from "../src/servers/crypto/server.ts";
import { createIdpServer } from "../src/servers/idp/index.ts";
import { createDevCertificate } from "../src/servers/managed/dev-certificate.ts";
import { createManagedServer } from "../src/servers/managed/server.ts";
import { openStore } from "../src/store/index.ts";

export interface ManagedBenchRow {
  name: string;
  reqPerSec: number;
  p50Ms: number;
  p99Ms: number;
  errors: number;
  /** Share of the wall time the main thread was busy, and process CPU time over wall time. */
  loopBusyPct: number;
  cpuPct: number;
  /**
   * Process CPU (all threads, load generator included) per completed request: unlike req/s,
   * it barely moves when other processes compete for the cores.
   */
  cpuMsPerReq: number;
  /**
   * CPU of the event loop's thread per completed request (both servers' HTTP, TLS and JSON
   * work; not the load generator, not the crypto worker threads). The event loop is the
   * bottleneck at this concurrency, so this bounds req/s on a quiet machine.
   */
  loopCpuMsPerReq: number;
  target: string;
}

/** The slice of autocannon's programmatic API used here (the package ships no types). */
interface AutocannonResult {
  readonly requests: { readonly average: number; readonly total: number };
  readonly latency: { readonly p50: number; readonly p99: number };
  readonly non2xx: number;
  readonly errors: number;
  readonly timeouts: number;
}
type Autocannon = (options: {
  url: string;
  method: "POST";
  headers: Record<string, string>;
  body: string;
  connections: number;
  duration: number;
  workers?: number;
}) => Promise<AutocannonResult>;

const autocannon = createRequire(import.meta.url)("autocannon") as Autocannon;

const targets: Readonly<Record<string, string>> = {
  "sign-encrypt": "≥ 500 req/s",
  "decrypt-verify": "≥ 2000 req/s",
};

export async function benchManaged(
  options: { durationSec?: number; connections?: number; only?: readonly string[] } = {},
): Promise<ManagedBenchRow[]> {
  const durationSec = options.durationSec ?? 8;
  const connections = options.connections ?? 16;
  const dir = await mkdtemp(join(tmpdir(), "bench-managed-"));
  // Closed in reverse order whatever happens, so a failed setup leaves nothing running.
  const closers: Array<() => Promise<unknown>> = [() => rm(dir, { recursive: true, force: true })];
  try {
    return await run(dir, closers, durationSec, connections, options.only);
  } finally {
    for (const close of closers.reverse()) await close().catch(() => undefined);
  }
}

async function run(
  dir: string,
  closers: Array<() => Promise<unknown>>,
  durationSec: number,
  connections: number,
  only: readonly string[] | undefined,
): Promise<ManagedBenchRow[]> {
  const logger = () => pino({ level: "silent" });
  const store = await openStore(`sqlite:${join(dir, "authority.db")}`);
  closers.push(() => store.close());
  const idp = await createIdpServer({ logger: logger(), failureLimit: false });
  closers.push(() => idp.close());
  const idpUrl = await idp.listen({ host: "127.0.0.1", port: 0 });
  const account = { username: "svc-bench", password: randomBytes(16).toString("base64url") };
  await idp.directory.addServiceAccount({ ...account, scopes: ["crypto"] });
  const verifier = createJwtVerifier({ issuer: idp.issuer, audience: "authority", jwks: idp.jwksUri });
  const crypto = await createCryptoServer({ store, kek: Kek.generate().kek, verifier, logger: logger() });
  closers.push(() => crypto.close());
  const cryptoUrl = await crypto.listen({ host: "127.0.0.1", port: 0 });
  const owner = await crypto.provisionOwner({ id: "bench-partner" });
  const certificate = await createDevCertificate();
  const managed = await createManagedServer({
    idpTokenUrl: `${idpUrl}/oauth2/token`,
    cryptoUrl,
    https: { key: certificate.key, cert: certificate.cert },
    rateLimit: { perUserPerMinute: 1e9, burst: 1e9 },
    logger: logger(),
  });
  closers.push(() => managed.close());
  const managedUrl = await managed.listen({ host: "127.0.0.1", port: 0 });
  const headers = {
    "content-type": "application/json",
    username: account.username,
    password: account.password,
    api_key: owner.apiKey,
    access_key: owner.accessKey,
    secret_key: owner.secretKey,
  };
  const data = randomBytes(768).toString("base64"); // 1024 characters of text

  const once = async (operation: string, body: unknown): Promise<Record<string, string>> => {
    const response = await fetch(`${cryptoUrl}/v1/actions`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        authorization: `Bearer ${(await idp.issueToken({ subject: "svc-bench" })).accessToken}`,
        api_key: owner.apiKey,
        access_key: owner.accessKey,
        secret_key: owner.secretKey,
      },
      body: JSON.stringify(body),
    });
    if (!response.ok) throw new Error(`bench setup: ${operation} answered ${response.status}`);
    return (await response.json()) as Record<string, string>;
  };
  const encrypted = (await once("encrypt", { actions: ["e"], data })).encrypted_data;
  const signed = (await once("sign-encrypt", { actions: ["s", "e"], data })).encrypted_data;

  const cases: Array<[string, unknown]> = [
    ["encrypt", { data }],
    ["decrypt", { encrypted_data: encrypted }],
    ["sign-encrypt", { data }],
    ["decrypt-verify", { encrypted_data: signed }],
  ];
  const rows: ManagedBenchRow[] = [];
  for (const [name, body] of cases) {
    if (only !== undefined && !only.includes(name)) continue;
    const request = {
      url: `${managedUrl}/v1/${name}`,
      method: "POST" as const,
      headers,
      body: JSON.stringify(body),
      connections,
      // The load generator runs on its own thread, so the servers' event loop is measured alone.
      workers: 1,
    };
    // Warm-up (JIT, connection pools, caches), not measured.
    await autocannon({ ...request, duration: 1 });
    const loopBefore = performance.eventLoopUtilization();
    const cpuBefore = process.cpuUsage();
    const loopCpuBefore = process.threadCpuUsage();
    const wallBefore = performance.now();
    const result = await autocannon({ ...request, duration: durationSec });
    const loop = performance.eventLoopUtilization(loopBefore);
    const cpu = process.cpuUsage(cpuBefore);
    const loopCpu = process.threadCpuUsage(loopCpuBefore);
    const wallMs = performance.now() - wallBefore;
    rows.push({
      name,
      reqPerSec: Math.round(result.requests.average),
      p50Ms: result.latency.p50,
      p99Ms: result.latency.p99,
      errors: result.non2xx + result.errors + result.timeouts,
      loopBusyPct: Math.round(loop.utilization * 100),
      cpuPct: Math.round(((cpu.user + cpu.system) / 1000 / wallMs) * 100),
      cpuMsPerReq: Number(((cpu.user + cpu.system) / 1000 / Math.max(1, result.requests.total)).toFixed(2)),
      loopCpuMsPerReq: Number(
        ((loopCpu.user + loopCpu.system) / 1000 / Math.max(1, result.requests.total)).toFixed(3),
      ),
      target: targets[name] ?? "",
    });
  }
  return rows;
}

if (import.meta.main) {
  console.table(await benchManaged());
}
