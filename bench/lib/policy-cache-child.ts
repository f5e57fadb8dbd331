/**
 * The sidecar's policy path in a process of its own, for bench/policy-scale.ts: the real
 * verified-policy cache (src/policy/cache) with a real redis-server, the real signed-policy
 * verifier (public keys only), and `decide()` on every Check — as `authority sidecar` runs
 * them, without gRPC. Policy records and signer keys come from the parent over IPC (the
 * authority's sidecar route, in effect: JSON in, parsed here), so this process's CPU and RSS
 * are the sidecar's share alone. The freshness lease is always current and reports no change
 * (the steady state between policy changes).
 *
 * Messages from the parent: { type: "run", ... } → { type: "result", ... }; the parent answers
 * { type: "reply", id, value } to this process's { type: "fetch" | "keys", id, ... }.
 */
import { randomBytes } from "node:crypto";
import type { Capability } from "../../src/core/capability.ts";
import { decide } from "../../src/core/decision.ts";
import type { PublicKeyRingJson } from "../../src/crypto/index.ts";
import {
  createRedisPolicyStore,
  createVerifiedPolicyCache,
  deriveCacheKeys,
  type FreshnessLease,
  type PolicyFetchResult,
  type VerifiedPolicyCacheOptions,
} from "../../src/policy/cache/index.ts";
import { createSignedPolicyVerifier } from "../../src/policy/signed-policy.ts";
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

/**
 * The burst's answers, handed over before it starts (after the warm figures are taken): the
 * bytes of the authority's response bodies, by subject id (its policy) or owner (its keys).
 * A fetch of one decodes and parses it, as a sidecar does a response body; the 0.5 MB of a
 * 500-operation record crossing the IPC channel is not the sidecar's CPU (decision 3031).
 */
const bodies = new Map<string, Uint8Array>();

function held(key: string): string | undefined {
  const body = bodies.get(key);
  return body === undefined
    ? undefined
    : Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString("utf8");
}

async function run(message: ScaleRunMessage): Promise<ScaleResult> {
  const store = createRedisPolicyStore({ url: redisUrl });
  await store.waitReady(5000);
  gc();
  const heapUsedBeforeBytes = process.memoryUsage().heapUsed;
  const cache = createVerifiedPolicyCache({
    ...POLICY_CACHE_SETTINGS,
    ...message.cacheOptions,
    source: {
      fetchPolicy: async (subjectId, options) =>
        JSON.parse(
          (options.knownHead === undefined ? held(subjectId) : undefined) ??
            (await ask<string>({ type: "fetch", subjectId, knownHead: options.knownHead })),
        ) as PolicyFetchResult,
    },
    opener: createSignedPolicyVerifier({
      serviceIdentity: "bench",
      source: {
        fetchPolicyKeys: async (owner) =>
          JSON.parse(held(owner) ?? (await ask<string>({ type: "keys", owner }))) as
            | PublicKeyRingJson
            | undefined,
      },
    }),
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
    const handed = await ask<Record<string, Uint8Array>>({ type: "bodies" });
    for (const [key, body] of Object.entries(handed)) bodies.set(key, body);
    const dropped = writeBacks.dropped;
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
