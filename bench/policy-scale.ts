/**
 * Flat with the number of agents (issue 30): the sidecar's policy path — verified-policy cache
 * with a real redis-server, signed-policy verification with public keys, `decide()` — in a
 * process of its own (bench/lib/policy-cache-child.ts, the servers' Node flags), with Checks
 * round-robin over 10, 1,000 and 10,000 subjects holding 5- or 500-operation policies (v1:
 * each subject its own signer, as `authority serve` assigns them). This process plays the
 * authority: it signs each subject's policy when asked (nothing is kept but the keys) and
 * answers over IPC with the body its sidecar route sends, so the child's CPU and RSS are the
 * sidecar's share alone (BENCH_BURST_CPU_PROFILE=<file>: a CPU profile of a row's burst). Per
 * row: the child's RSS and heap after the run, the warm CPU per Check (gRPC and token checks
 * are not in it: bench/sidecar.ts measures those), how many Checks had to load a policy, and a
 * burst of 100 new subjects' first Checks at once (slowest, and how many took over 200 ms).
 * Targets: CPU per Check at 10,000 subjects within 1.5× of 10 subjects; every first Check of
 * the burst within the 200 ms deadline (`burstMet`, every row).
 *
 *   node bench/policy-scale.ts     (or through bench/run.ts: benchPolicyScale())
 */
import { type ChildProcess, fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import { Redis } from "ioredis";
import type { Capability } from "../src/core/capability.ts";
import { protectPolicy } from "../src/policy/artifact.ts";
import { compilePolicyDocument } from "../src/policy/compile.ts";
import { createLocalPolicyProtector } from "../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../src/policy/process-key-rings.ts";
import type { SidecarPolicyResponse } from "../src/servers/authority/routes/sidecar.ts";
import { startRedisServer } from "../test/helpers/redis-server.ts";
import type { BenchAnswer, ScaleResult, ScaleRunMessage } from "./lib/policy-cache-child.ts";
import { policyRecordFields } from "./lib/policy-records.ts";
import { SERVER_NODE_FLAGS, stopChild, track } from "./lib/processes.ts";
import { benchAssignment } from "./policy.ts";

const PARTNER = "bench-partner";
const CAPABILITY = "bench-api";
/** The ratio the target allows between 10,000 and 10 subjects. */
const FLAT_RATIO = 1.5;

export interface PolicyScaleRow {
  readonly subjects: number;
  readonly operations: number;
  readonly rssMb: number;
  readonly heapMb: number;
  readonly cpuUsPerCheck: number;
  readonly checks: number;
  /** Checks refused (503) in the measured phase, with the first reason. */
  readonly errors: string;
  readonly loads: number;
  readonly cached: number;
  readonly burst100MaxMs: number;
  readonly burst100Over200ms: number;
  readonly firstCheckCpuMs: number;
  /** Per burst subject: CPU of its sealed entry's write-back to Redis, after its Check was answered. */
  readonly writeBackCpuMs: number;
  /** The burst's write-backs dropped (the queue was full): another sidecar fetches those. */
  readonly writeBacksDropped: number;
  readonly vs10Subjects?: string;
  readonly target?: string;
  readonly met?: string;
  /** Every first Check of the burst within the deadline. */
  readonly burstMet: string;
}

export interface PolicyScaleOptions {
  readonly subjects?: readonly number[];
  readonly operations?: readonly number[];
  readonly checks?: number;
  readonly maxMs?: number;
  readonly burst?: number;
  /** Passed to the cache (e.g. localMaxBytes) in every row. */
  readonly cacheOptions?: Record<string, unknown>;
}

/**
 * The authority's side: signs subject i's policy of `operations` operations on request, and
 * answers as its sidecar route does (`/v1/sidecar/policies/:subject`): a 304 for a known head,
 * otherwise the subject, the record's facts and the signed blob, as JSON bytes.
 */
function authorityFor(operations: number) {
  const protector = createLocalPolicyProtector({
    keyRings: createProcessKeyRings(),
    serviceIdentity: "bench",
  });
  const assignment = benchAssignment(operations);
  const policyAnswer = async (subjectId: string, knownHead: number | undefined): Promise<BenchAnswer> => {
    if (knownHead === 1) return { status: 304 };
    const document = compilePolicyDocument({
      subject: { subject_id: subjectId, subject_type: "agent", display_name: subjectId },
      cryptoVersion: "subject_credentials_v1",
      assignments: [{ ...assignment, subject_id: subjectId, capability_id: CAPABILITY }],
      expiresAt: "2099-01-01T00:00:00.000Z",
      revokedAt: null,
      now: new Date("2026-01-01T00:00:00.000Z"),
    });
    const context = { cryptoVersion: "subject_credentials_v1" as const, subjectId, partnerId: PARTNER };
    const { artifact, documentHash } = await protectPolicy(document, protector, PARTNER);
    const opened = await protector.open(artifact, context);
    const body: SidecarPolicyResponse = {
      subject: { subject_id: subjectId, partner_id: PARTNER, identity: "platform_vouched" },
      policy: {
        ...policyRecordFields(document, PARTNER, documentHash),
        updated_at: "2026-01-01T00:00:00.000Z",
      },
      signed_policy: opened.signedBlob ?? null,
    };
    return { status: 200, body: Buffer.from(JSON.stringify(body)) };
  };
  const keysAnswer = async (owner: string): Promise<BenchAnswer> => {
    const ring = await protector.signerKeys?.(owner);
    return ring === undefined ? { status: 404 } : { status: 200, body: Buffer.from(JSON.stringify(ring)) };
  };
  const capability: Capability = {
    capability_id: CAPABILITY,
    partner_id: PARTNER,
    name: "Bench",
    catalog_version: "1",
    operations: assignment.operations,
  };
  const paths = assignment.operations.slice(0, 50).map((op) => op.path.replace("{id}", "42"));
  return { policyAnswer, keysAnswer, capability, paths };
}

async function runChild(
  redisUrl: string,
  operations: number,
  message: Omit<ScaleRunMessage, "type" | "capability" | "paths">,
): Promise<ScaleResult> {
  const authority = authorityFor(operations);
  // The burst's subjects are signed beforehand and their answers handed to the child before
  // the burst, as response bodies (bytes): the burst measures the sidecar, not this process.
  const bodies: Record<string, BenchAnswer> = {};
  for (let i = 0; i < message.burst; i++) {
    const subjectId = `scale-agent-${message.subjects + i}`;
    bodies[subjectId] = await authority.policyAnswer(subjectId, undefined);
    bodies[`subject:${subjectId}`] = await authority.keysAnswer(`subject:${subjectId}`);
  }
  const child: ChildProcess = track(
    fork(fileURLToPath(new URL("./lib/policy-cache-child.ts", import.meta.url)), [], {
      execArgv: [...SERVER_NODE_FLAGS, "--expose-gc"],
      env: { ...process.env, BENCH_REDIS_URL: redisUrl },
      stdio: ["ignore", "inherit", "inherit", "ipc"],
      // A record arrives as one string the child JSON.parses, as a sidecar parses the
      // authority's response body; the "json" channel would escape, split and parse the
      // 0.5 MB string again, in the sidecar's CPU and heap (decision 3031).
      serialization: "advanced",
    }),
  );
  try {
    return await new Promise<ScaleResult>((resolve, reject) => {
      child.on("exit", (code) => reject(new Error(`policy-cache child exited with ${code}`)));
      child.on("message", (raw) => {
        const m = raw as { type: string; id: number; subjectId?: string; knownHead?: number; owner?: string };
        if (m.type === "bodies") {
          child.send({ type: "reply", id: m.id, value: bodies });
        } else if (m.type === "fetch") {
          authority.policyAnswer(m.subjectId ?? "", m.knownHead).then(
            (value) => child.send({ type: "reply", id: m.id, value }),
            (error: unknown) => reject(error),
          );
        } else if (m.type === "keys") {
          authority.keysAnswer(m.owner ?? "").then(
            (value) => child.send({ type: "reply", id: m.id, value }),
            (error: unknown) => reject(error),
          );
        } else if (m.type === "result") resolve(raw as ScaleResult);
        else if (m.type === "error") reject(new Error(String((raw as { message?: string }).message)));
      });
      child.send({ type: "run", ...message, capability: authority.capability, paths: authority.paths });
    });
  } finally {
    await stopChild(child);
  }
}

/** Each row starts from an empty Redis: no row takes what another sealed. */
async function flushRedis(url: string): Promise<void> {
  const client = new Redis(url);
  try {
    await client.flushall();
  } finally {
    client.disconnect();
  }
}

/**
 * 10 / 1,000 / 10,000 subjects; with 500-operation policies 10 / 1,000 only: this process signs
 * each 1.6 MB policy on demand, so 10,000 of them would take the bench tens of minutes.
 */
function defaultSubjectCounts(operations: number): readonly number[] {
  return operations > 100 ? [10, 1_000] : [10, 1_000, 10_000];
}

const mb = (bytes: number) => Number((bytes / (1024 * 1024)).toFixed(1));

export async function benchPolicyScale(options: PolicyScaleOptions = {}): Promise<PolicyScaleRow[]> {
  const operationCounts = options.operations ?? [5, 500];
  const redis = await startRedisServer();
  const rows: PolicyScaleRow[] = [];
  try {
    for (const operations of operationCounts) {
      const subjectCounts = options.subjects ?? defaultSubjectCounts(operations);
      let base: number | undefined;
      for (const subjects of subjectCounts) {
        const result = await runChild(redis.url, operations, {
          subjects,
          warmupPasses: 2,
          checks: options.checks ?? Math.max(20_000, 2 * subjects),
          maxMs: options.maxMs ?? 20_000,
          burst: options.burst ?? 100,
          // This process signs every policy on demand (v1: a key pair per subject), so a pass
          // over 10,000 subjects takes minutes, longer than policy-max-age-ms: the warm figure
          // would count reloads no real authority would cause. Revalidation is kept out of it.
          cacheOptions: { maxAgeMs: 3_600_000, ...options.cacheOptions },
        });
        await flushRedis(redis.url);
        base ??= result.cpuUsPerCheck;
        const ratio = result.cpuUsPerCheck / base;
        const last = subjects === subjectCounts.at(-1) && subjects !== subjectCounts[0];
        rows.push({
          subjects,
          operations,
          rssMb: mb(result.rssBytes),
          heapMb: mb(result.heapUsedBytes),
          cpuUsPerCheck: Number(result.cpuUsPerCheck.toFixed(1)),
          checks: result.checks,
          errors: result.errors === 0 ? "0" : `${result.errors} (${result.firstError})`,
          loads: result.loads,
          cached: result.cacheSize,
          burst100MaxMs: Number(result.burstMaxMs.toFixed(1)),
          burst100Over200ms: result.burstOver200ms,
          firstCheckCpuMs: Number(result.burstCpuMsPerSubject.toFixed(2)),
          writeBackCpuMs: Number(result.burstWriteBackCpuMsPerSubject.toFixed(2)),
          writeBacksDropped: result.burstWriteBacksDropped,
          vs10Subjects: `${ratio.toFixed(2)}×`,
          burstMet: String(result.burstOver200ms === 0),
          ...(last
            ? { target: `≤ ${FLAT_RATIO}× of ${subjectCounts[0]} subjects`, met: String(ratio <= FLAT_RATIO) }
            : {}),
        });
        if (process.env.BENCH_PROGRESS === "1") process.stderr.write(`${JSON.stringify(rows.at(-1))}\n`);
      }
    }
    return rows;
  } finally {
    await redis.stop();
  }
}

if (import.meta.main) console.table(await benchPolicyScale());
