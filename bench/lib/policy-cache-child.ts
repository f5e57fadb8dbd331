/**
 * The sidecar's policy path in a process of its own, for bench/policy-scale.ts: the real
 * verified-policy cache (src/policy/cache) with a real redis-server, the real signed-policy
 * verifier (public keys only), and `decide()` on every Check — as `authority sidecar` runs
 * them, without gRPC. Policy records and signer keys come from the parent over IPC as the
 * authority's sidecar routes answer them (status and body bytes), read by the sidecar's own
 * authority client, so this process's CPU and RSS are the sidecar's share alone. The freshness
 * lease is always current and reports no change (the steady state between policy changes).
 *
 * Messages from the parent: { type: "run", ... } → { type: "result", ... }; the parent answers
 * { type: "reply", id, value } to this process's { type: "fetch" | "keys", id, ... }.
 */
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import type { Capability } from "../../src/core/capability.ts";
import { decide } from "../../src/core/decision.ts";
import type { JsonFetch } from "../../src/core/json-fetch.ts";
import {
  createRedisPolicyStore,
  createVerifiedPolicyCache,
  deriveCacheKeys,
  type FreshnessLease,
  type VerifiedPolicyCacheOptions,
} from "../../src/policy/cache/index.ts";
import { createSignedPolicyVerifier } from "../../src/policy/signed-policy.ts";
import { createAuthorityClient } from "../../src/servers/sidecar/authority-client.ts";
import { answerOf } from "../../src/servers/sidecar/node-json-fetch.ts";
import { POLICY_CACHE_SETTINGS } from "../../test/helpers/policy-cache-settings.ts";

export interface ScaleRunMessage {
  readonly type: "run";
  readonly subjects: number;
  readonly capability: Capability;
  /** Request paths, one per allowed operation: Check i asks for paths[i % paths.length]. */
  readonly paths: readonly string[];
  /** Warm-up passes over every subject before measuring. */
  readonly warmupPasses: number;
  /** The measured phase ends after this many Checks or `maxMs`, whichever is first. */
  readonly checks: number;
  readonly maxMs: number;
  /** How many new subjects ask at once in the burst measurement (0: none). */
  readonly burst: number;
  readonly cacheOptions: Partial<VerifiedPolicyCacheOptions>;
}

export interface ScaleResult {
  readonly type: "result";
  readonly checks: number;
  readonly cpuUsPerCheck: number;
  /** Checks answered from this process's memory (peek) vs. those that had to load. */
  readonly loads: number;
  readonly allowed: number;
  /** Checks that failed (a 503 in the sidecar), with the first reason. */
  readonly errors: number;
  readonly firstError: string;
  readonly cacheSize: number;
  readonly heapUsedBytes: number;
  readonly rssBytes: number;
  readonly heapUsedBeforeBytes: number;
  /** Burst of first Checks of new subjects at once: slowest completion and how many took > 200 ms. */
  readonly burstMaxMs: number;
  readonly burstOver200ms: number;
  readonly burstCpuMsPerSubject: number;
  /** CPU of the burst's write-backs to Redis, run after its Checks were answered, and how many were dropped. */
  readonly burstWriteBackCpuMsPerSubject: number;
  readonly burstWriteBacksDropped: number;
}

const redisUrl = process.env.BENCH_REDIS_URL ?? "";
let nextId = 0;
const pending = new Map<number, (value: unknown) => void>();

function ask<T>(message: Record<string, unknown>): Promise<T> {
  const id = nextId++;
  return new Promise<T>((resolve) => {
    pending.set(id, resolve as (value: unknown) => void);
    process.send?.({ ...message, id });
  });
}

const gc = (globalThis as { gc?: () => void }).gc ?? (() => undefined);

const lease: FreshnessLease = {
  current: () => true,
  onChanges: () => () => undefined,
  onReset: () => () => undefined,
  whenCurrent: async () => true,
};

/** An answer of the authority's sidecar routes as the parent sends it: its status and body bytes. */
export interface BenchAnswer {
  readonly status: number;
  readonly body?: Uint8Array;
}

/**
 * The burst's answers, handed over before it starts (after the warm figures are taken), by
 * subject id (its policy) or owner (its keys). The sidecar's authority client reads them as it
 * reads its transport's answers (the bytes of a body read whole), so a first Check pays what
 * a sidecar's does for the body; the 0.5 MB of a 500-operation answer crossing the IPC channel
 * is not the sidecar's CPU (decision 3031).
 */
const bodies = new Map<string, BenchAnswer>();

/** The sidecar's authority client over the parent: held answers first, otherwise asked for. */
function authorityClient() {
  const fetch: JsonFetch = async (url, init) => {
    const path = decodeURIComponent(new URL(url).pathname);
    const policy = path.match(/^\/v1\/sidecar\/policies\/(.+)$/)?.[1];
    const owner = path.match(/^\/v1\/sidecar\/policy-keys\/(.+)$/)?.[1];
    const knownHead = init.headers["if-none-match"]?.replaceAll('"', "");
    const key = policy ?? owner ?? "";
    const held = knownHead === undefined ? bodies.get(key) : undefined;
    const answer =
      held ??
      (await ask<BenchAnswer>(
        policy === undefined
          ? { type: "keys", owner }
          : {
              type: "fetch",
              subjectId: policy,
              knownHead: knownHead === undefined ? undefined : Number(knownHead),
            },
      ));
    const body = answer.body ?? new Uint8Array();
    return answerOf(answer.status, Buffer.from(body.buffer, body.byteOffset, body.byteLength));
  };
  return createAuthorityClient({
    baseUrl: "http://authority.bench",
    token: { token: async () => "bench-token", invalidate: () => undefined },
    fetch,
  });
}

/**
 * BENCH_BURST_CPU_PROFILE=<file>: a CPU profile (100 µs sampling) of the burst alone, from its
 * first Check to its last answer, written to the file (the write-backs after it are not in it).
 */
async function startBurstProfile(): Promise<{ stop(): Promise<void> } | undefined> {
  const file = process.env.BENCH_BURST_CPU_PROFILE;
  if (file === undefined || file === "") return undefined;
  const session = new Session();
  session.connect();
  await session.post("Profiler.enable");
  await session.post("Profiler.setSamplingInterval", { interval: 100 });
  await session.post("Profiler.start");
  return {
    async stop() {
      const { profile } = await session.post("Profiler.stop");
      writeFileSync(file, JSON.stringify(profile));
      session.disconnect();
    },
  };
}

async function run(message: ScaleRunMessage): Promise<ScaleResult> {
  const store = createRedisPolicyStore({ url: redisUrl });
  await store.waitReady(5000);
  gc();
  const heapUsedBeforeBytes = process.memoryUsage().heapUsed;
  const client = authorityClient();
  const cache = createVerifiedPolicyCache({
    ...POLICY_CACHE_SETTINGS,
    ...message.cacheOptions,
    source: client,
    opener: createSignedPolicyVerifier({ serviceIdentity: "bench", source: client }),
    redis: { store, keys: deriveCacheKeys(new Uint8Array(randomBytes(32))) },
    freshness: lease,
    events: { writeBack: (result) => (writeBacks[result] += 1) },
  });
  const writeBacks = { written: 0, dropped: 0, failed: 0 };
  const now = new Date();
  let loads = 0;
  let allowed = 0;
  let errors = 0;
  let firstError = "";
  const check = async (subject: number, index: number): Promise<void> => {
    const subjectId = `scale-agent-${subject}`;
    let lookup = cache.peek(subjectId);
    if (lookup === undefined) {
      loads++;
      try {
        lookup = await cache.get(subjectId);
      } catch (error) {
        errors++;
        firstError ||= String(error);
        return;
      }
    }
    const decision = decide({
      subjectId,
      capabilityId: message.capability.capability_id,
      capability: message.capability,
      policy: lookup.policy.load,
      method: "GET",
      path: message.paths[index % message.paths.length] ?? "/",
      now,
    });
    if (decision.status === "allowed") allowed++;
  };
  for (let pass = 0; pass < message.warmupPasses; pass++) {
    for (let subject = 0; subject < message.subjects; subject++) await check(subject, subject);
  }
  loads = 0;
  allowed = 0;
  errors = 0;
  firstError = "";
  const started = performance.now();
  const cpu = process.cpuUsage();
  let checks = 0;
  while (checks < message.checks && (checks % 100 !== 0 || performance.now() - started < message.maxMs)) {
    await check(checks % message.subjects, checks);
    checks++;
  }
  const used = process.cpuUsage(cpu);
  gc();
  const memory = process.memoryUsage();
  const result = {
    checks,
    cpuUsPerCheck: (used.user + used.system) / Math.max(1, checks),
    loads,
    allowed,
    errors,
    firstError,
    cacheSize: cache.size,
    heapUsedBytes: memory.heapUsed,
    rssBytes: memory.rss,
    heapUsedBeforeBytes,
  };
  // New subjects all at once: each one's first Check, concurrently.
  let burstMaxMs = 0;
  let burstOver200ms = 0;
  let burstCpuMsPerSubject = 0;
  let burstWriteBackCpuMsPerSubject = 0;
  let burstWriteBacksDropped = 0;
  if (message.burst > 0) {
    // The warm phase's write-backs are long done in a sidecar that served a while.
    await cache.writtenBack();
    const handed = await ask<Record<string, BenchAnswer>>({ type: "bodies" });
    for (const [key, body] of Object.entries(handed)) bodies.set(key, body);
    const dropped = writeBacks.dropped;
    const profile = await startBurstProfile();
    const burstCpu = process.cpuUsage();
    const burstStart = performance.now();
    await Promise.all(
      Array.from({ length: message.burst }, async (_, i) => {
        await check(message.subjects + i, i);
        const took = performance.now() - burstStart;
        burstMaxMs = Math.max(burstMaxMs, took);
        if (took > 200) burstOver200ms++;
      }),
    );
    const spent = process.cpuUsage(burstCpu);
    await profile?.stop();
    burstCpuMsPerSubject = (spent.user + spent.system) / 1000 / message.burst;
    // What the burst's sealed entries cost after the Checks were answered (off their path).
    const writeBackCpu = process.cpuUsage();
    await cache.writtenBack();
    const writing = process.cpuUsage(writeBackCpu);
    burstWriteBackCpuMsPerSubject = (writing.user + writing.system) / 1000 / message.burst;
    burstWriteBacksDropped = writeBacks.dropped - dropped;
  }
  cache.close();
  await store.close();
  return {
    type: "result",
    ...result,
    burstMaxMs,
    burstOver200ms,
    burstCpuMsPerSubject,
    burstWriteBackCpuMsPerSubject,
    burstWriteBacksDropped,
  };
}

process.on("message", (message: { type: string; id?: number; value?: unknown }) => {
  if (message.type === "reply" && message.id !== undefined) {
    pending.get(message.id)?.(message.value);
    pending.delete(message.id);
  } else if (message.type === "run") {
    run(message as unknown as ScaleRunMessage).then(
      (result) => process.send?.(result),
      (error: unknown) => process.send?.({ type: "error", message: String(error) }),
    );
  }
});
