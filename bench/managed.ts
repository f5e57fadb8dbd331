/**
 * Managed crypto API throughput: the four operations with 1 KB payloads at concurrency 16,
 * end to end (HTTPS managed API → token cache → upstream crypto service → ML-KEM / ML-DSA),
 * everything in this process on ephemeral ports: both servers share one event loop (in a
 * deployment they are two processes), the crypto service's sign-encrypt and decrypt-verify
 * run on its worker threads. The load generator (bench/lib/http-caller.ts: kept-alive TLS
 * sockets, prebuilt requests, only the status and length read) runs in a process of its own, so
 * its CPU per request is reported apart: on this two-core machine it takes from the servers.
 * Rounds of every operation in turn (4 s each by default); the median is the figure, the spread
 * beside it. Targets: ≥ 500 sign-encrypt/s and ≥ 2,000 decrypt-verify/s.
 */

import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
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
import { type CallTarget, type HttpCaller, startHttpCaller } from "./lib/http-caller.ts";
import { medianOf, spreadText } from "./lib/rounds.ts";

export interface ManagedBenchRow {
  name: string;
  rounds: number;
  /** Median over the rounds, and the spread (lowest–highest). */
  reqPerSec: number;
  reqPerSecSpread: string;
  p50Ms: number;
  p99Ms: number;
  errors: number;
  /** Share of the wall time the main thread was busy, and this process's CPU time over wall time. */
  loopBusyPct: number;
  cpuPct: number;
  /**
   * CPU per completed request of this process (both servers, all threads; the load generator
   * runs in a process of its own): unlike req/s, it barely moves when other processes compete
   * for the cores.
   */
  serverCpuMsPerReq: number;
  /**
   * CPU of the event loop's thread per completed request (both servers' HTTP, TLS and JSON
   * work; not the crypto worker threads).
   */
  loopCpuMsPerReq: number;
  /** CPU of the load generator per completed request: it runs on the same two cores. */
  generatorCpuMsPerReq: number;
  target: string;
}

/** One round's figures: a row's, before the rounds are summarized. */
type RoundFigures = Omit<ManagedBenchRow, "name" | "rounds" | "reqPerSecSpread" | "target">;

const targets: Readonly<Record<string, string>> = {
  "sign-encrypt": "≥ 500 req/s",
  "decrypt-verify": "≥ 2000 req/s",
};

export async function benchManaged(
  options: { durationSec?: number; rounds?: number; connections?: number; only?: readonly string[] } = {},
): Promise<ManagedBenchRow[]> {
  const durationSec = options.durationSec ?? 4;
  const roundCount = options.rounds ?? 3;
  const connections = options.connections ?? 16;
  const dir = await mkdtemp(join(tmpdir(), "bench-managed-"));
  // Closed in reverse order whatever happens, so a failed setup leaves nothing running.
  const closers: Array<() => Promise<unknown>> = [() => rm(dir, { recursive: true, force: true })];
  try {
    return await run(dir, closers, { durationSec, roundCount, connections, only: options.only });
  } finally {
    for (const close of closers.reverse()) await close().catch(() => undefined);
  }
}

async function run(
  dir: string,
  closers: Array<() => Promise<unknown>>,
  settings: {
    durationSec: number;
    roundCount: number;
    connections: number;
    only: readonly string[] | undefined;
  },
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
  const chosen = cases.filter(([name]) => settings.only === undefined || settings.only.includes(name));
  const caller = startHttpCaller();
  closers.push(() => caller.close());
  const measured = new Map<string, RoundFigures[]>(chosen.map(([name]) => [name, []]));
  // Rounds of every case in turn: each figure's windows are spread over the whole run.
  for (let round = 0; round < settings.roundCount; round++) {
    for (const [name, body] of chosen) {
      const target = { url: `${managedUrl}/v1/${name}`, method: "POST", headers, body: JSON.stringify(body) };
      measured.get(name)?.push(await measureRound(caller, target, settings));
    }
  }
  return chosen.map(([name]) => summarizeRounds(name, measured.get(name) ?? []));
}

async function measureRound(
  caller: HttpCaller,
  target: CallTarget,
  settings: { durationSec: number; connections: number },
): Promise<RoundFigures> {
  // Warm-up (JIT, connections, caches), not measured.
  await caller.closedLoop(target, { connections: settings.connections, durationMs: 1000 });
  const loopBefore = performance.eventLoopUtilization();
  const cpuBefore = process.cpuUsage();
  const loopCpuBefore = process.threadCpuUsage();
  const wallBefore = performance.now();
  const result = await caller.closedLoop(target, {
    connections: settings.connections,
    durationMs: settings.durationSec * 1000,
  });
  const loop = performance.eventLoopUtilization(loopBefore);
  const cpu = process.cpuUsage(cpuBefore);
  const loopCpu = process.threadCpuUsage(loopCpuBefore);
  const wallMs = performance.now() - wallBefore;
  const requests = Math.max(1, result.requests);
  return {
    reqPerSec: result.reqPerSec,
    p50Ms: result.p50Ms,
    p99Ms: result.p99Ms,
    errors: result.errors,
    loopBusyPct: loop.utilization * 100,
    cpuPct: ((cpu.user + cpu.system) / 1000 / wallMs) * 100,
    serverCpuMsPerReq: (cpu.user + cpu.system) / 1000 / requests,
    loopCpuMsPerReq: (loopCpu.user + loopCpu.system) / 1000 / requests,
    generatorCpuMsPerReq: result.cpuUs / 1000 / requests,
  };
}

function summarizeRounds(name: string, rounds: readonly RoundFigures[]): ManagedBenchRow {
  const median = (pick: (round: RoundFigures) => number, digits: number) =>
    medianOf(rounds.map(pick), digits);
  return {
    name,
    rounds: rounds.length,
    reqPerSec: median((r) => r.reqPerSec, 0),
    reqPerSecSpread: spreadText(
      rounds.map((r) => r.reqPerSec),
      0,
    ),
    p50Ms: median((r) => r.p50Ms, 2),
    p99Ms: median((r) => r.p99Ms, 2),
    errors: rounds.reduce((sum, r) => sum + r.errors, 0),
    loopBusyPct: median((r) => r.loopBusyPct, 0),
    cpuPct: median((r) => r.cpuPct, 0),
    serverCpuMsPerReq: median((r) => r.serverCpuMsPerReq, 3),
    loopCpuMsPerReq: median((r) => r.loopCpuMsPerReq, 3),
    generatorCpuMsPerReq: median((r) => r.generatorCpuMsPerReq, 3),
    target: targets[name] ?? "",
  };
}

if (import.meta.main) {
  console.table(await benchManaged());
}
