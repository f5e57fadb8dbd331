/**
 * Mixed load with nothing lost, shared by test/reliability/load.test.ts (CI size) and
 * bench/load.ts (full size): authorize-invocation decisions of every kind (allowed, denied
 * by the allowlist, unknown operation, no token, subject mismatch, a second subject) under
 * concurrency, plus binding invokes of a non-idempotent operation where every
 * Idempotency-Key is sent several times at once. Then it counts what the system kept:
 * audit decision records, usage counters, evidence records and upstream hits.
 */
import { performance } from "node:perf_hooks";
import type { DecisionAuditRecord } from "../../src/audit/records.ts";
import { parseUsageKey, USAGE_COUNTERS } from "../../src/audit/usage.ts";
import { logs } from "../../src/store/model.ts";
import type { HttpReply } from "./http-client.ts";
import { CAPABILITY, SECOND_AGENT, type System } from "./system.ts";

export interface LoadOptions {
  /** authorize-invocation requests. */
  readonly decisions: number;
  /** Distinct Idempotency-Keys of binding invokes (POST /items). */
  readonly invokeKeys: number;
  /** How often each key is sent, concurrently. */
  readonly duplicatesPerKey: number;
  /** Requests in flight at once. */
  readonly concurrency: number;
  /** How long the audit buffer may take to drain afterwards (default 60 s). */
  readonly flushTimeoutMs?: number;
}

export interface LoadResult {
  readonly decisions: number;
  readonly allowed: number;
  readonly denied: number;
  /** Answers that were neither a decision nor a documented refusal (must be 0). */
  readonly unexpected: number;
  readonly auditDecisionRecords: number;
  readonly auditRecordsForRequests: number;
  readonly recordsLost: number;
  readonly duplicatedRecords: number;
  readonly usageCounted: number;
  readonly usageAllowed: number;
  readonly invokes: number;
  readonly invokeKeys: number;
  readonly invokesExecutedUpstream: number;
  readonly invokeReplays: number;
  /** Keys whose duplicates did not all get the same answer (must be 0). */
  readonly inconsistentKeys: number;
  readonly evidenceRecords: number;
  readonly droppedByRecorder: number;
  readonly durationMs: number;
  readonly requestsPerSecond: number;
}

/** Runs `tasks` with at most `concurrency` in flight; results in task order. */
export async function pool<T>(
  count: number,
  concurrency: number,
  task: (index: number) => Promise<T>,
): Promise<T[]> {
  const results: T[] = new Array(count);
  let next = 0;
  const worker = async () => {
    for (;;) {
      const index = next++;
      if (index >= count) return;
      results[index] = await task(index);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
  return results;
}

export async function runMixedLoad(system: System, options: LoadOptions): Promise<LoadResult> {
  const agent = await system.agentToken();
  const second = await system.agentToken(SECOND_AGENT);
  await system.recorder.flush(10_000);
  const auditBefore = await system.store.logLength(logs.audit);
  const evidenceBefore = await system.store.logLength(logs.evidence);
  const usageBefore = await usageTotals(system);
  const upstreamBefore = system.upstream.count("/items", "POST");

  type Expect = { readonly statuses: readonly number[]; readonly allowed: boolean };
  const kinds: Array<{ run: () => Promise<HttpReply>; expect: Expect }> = [
    {
      run: () => system.authorize({ capability_id: CAPABILITY, method: "GET", path: "/items/42" }, agent),
      expect: { statuses: [200], allowed: true },
    },
    {
      run: () => system.authorize({ capability_id: CAPABILITY, method: "GET", path: "/items" }, agent),
      expect: { statuses: [403], allowed: false },
    },
    {
      run: () => system.authorize({ capability_id: CAPABILITY, method: "DELETE", path: "/nowhere" }, agent),
      expect: { statuses: [403], allowed: false },
    },
    {
      run: () => system.authorize({ capability_id: CAPABILITY, method: "GET", path: "/items/42" }),
      expect: { statuses: [401], allowed: false },
    },
    {
      run: () =>
        system.authorize(
          {
            subject: { subject_id: SECOND_AGENT },
            capability_id: CAPABILITY,
            method: "GET",
            path: "/items/1",
          },
          agent,
        ),
      expect: { statuses: [403], allowed: false },
    },
    {
      run: () => system.authorize({ capability_id: CAPABILITY, method: "POST", path: "/items" }, second),
      expect: { statuses: [200], allowed: true },
    },
  ];

  const started = performance.now();
  const invokeToken = await system.workloadToken(undefined, "authority/bindings.invoke");
  const assertion = await system.userAssertion();
  const invokeTotal = options.invokeKeys * options.duplicatesPerKey;
  const total = options.decisions + invokeTotal;
  // Interleave: every key's duplicates are consecutive, so they are in flight together.
  const invokeEvery =
    invokeTotal === 0 ? Number.POSITIVE_INFINITY : Math.max(1, Math.floor(total / invokeTotal));
  const plan: Array<{ kind: "decision"; index: number } | { kind: "invoke"; key: number }> = [];
  let decisionIndex = 0;
  let invokeIndex = 0;
  for (let i = 0; i < total; i++) {
    const invokeTurn =
      invokeIndex < invokeTotal && (i % invokeEvery === 0 || decisionIndex >= options.decisions);
    if (invokeTurn) plan.push({ kind: "invoke", key: Math.floor(invokeIndex++ / options.duplicatesPerKey) });
    else plan.push({ kind: "decision", index: decisionIndex++ });
  }
  const run = `${Date.now().toString(36)}`;
  const replies = await pool(plan.length, options.concurrency, async (i) => {
    const step = plan[i];
    if (step === undefined) throw new Error("plan");
    if (step.kind === "invoke") {
      const reply = await system.invoke(
        {
          capability_id: CAPABILITY,
          method: "POST",
          path: "/items",
          arguments: { body: { name: `load-${step.key}` } },
        },
        { token: invokeToken, assertion, key: `load-${run}-${step.key}`, timeoutMs: 60_000 },
      );
      return { step, reply, expect: { statuses: [200], allowed: true } as Expect };
    }
    const kind = kinds[step.index % kinds.length];
    if (kind === undefined) throw new Error("kind");
    const reply = await kind.run();
    return { step, reply, expect: kind.expect };
  });
  const durationMs = performance.now() - started;

  let allowed = 0;
  let denied = 0;
  let unexpected = 0;
  const decisionIds: string[] = [];
  const byKey = new Map<number, HttpReply[]>();
  for (const { step, reply, expect } of replies) {
    if (!expect.statuses.includes(reply.status)) unexpected++;
    if (step.kind === "invoke") {
      const list = byKey.get(step.key) ?? [];
      list.push(reply);
      byKey.set(step.key, list);
      continue;
    }
    decisionIds.push(reply.json?.requestId);
    if (reply.json?.status === "allowed") allowed++;
    else if (reply.json?.status === "denied") denied++;
  }
  let inconsistentKeys = 0;
  let invokeReplays = 0;
  for (const list of byKey.values()) {
    const bodies = new Set(
      list.map((reply) => `${reply.status} ${JSON.stringify(reply.json?.result?.body)}`),
    );
    if (bodies.size !== 1) inconsistentKeys++;
    invokeReplays += list.filter((reply) => reply.headers["idempotent-replayed"] === "true").length;
  }

  const flushed = await system.recorder.flush(options.flushTimeoutMs ?? 60_000);
  if (!flushed) throw new Error("the audit buffer did not drain");
  // Usage counts are summed in memory for up to 250 ms before they are written.
  await new Promise((resolve) => setTimeout(resolve, 400));
  await system.recorder.flush(options.flushTimeoutMs ?? 60_000);
  const entries = await readAll(system, auditBefore);
  const records = entries.filter((value) => value.kind === "decision");
  const httpRecords = records.filter((record) => record.transport === "http");
  const recordedIds = new Map<string, number>();
  for (const record of httpRecords)
    recordedIds.set(record.requestId, (recordedIds.get(record.requestId) ?? 0) + 1);
  const recordsLost = decisionIds.filter((id) => !recordedIds.has(id)).length;
  const duplicatedRecords = [...recordedIds.values()].filter((n) => n > 1).length;
  const usageAfter = await usageTotals(system);
  const evidenceAfter = await system.store.logLength(logs.evidence);
  return {
    decisions: options.decisions,
    allowed,
    denied,
    unexpected,
    auditDecisionRecords: records.length,
    auditRecordsForRequests: httpRecords.length,
    recordsLost,
    duplicatedRecords,
    usageCounted: usageAfter.total - usageBefore.total,
    usageAllowed: usageAfter.allowed - usageBefore.allowed,
    invokes: invokeTotal,
    invokeKeys: options.invokeKeys,
    invokesExecutedUpstream: system.upstream.count("/items", "POST") - upstreamBefore,
    invokeReplays,
    inconsistentKeys,
    evidenceRecords: evidenceAfter - evidenceBefore,
    droppedByRecorder: system.recorder.dropped(),
    durationMs,
    requestsPerSecond: (total / durationMs) * 1000,
  };
}

async function readAll(system: System, afterSeq: number): Promise<DecisionAuditRecord[]> {
  const out: DecisionAuditRecord[] = [];
  let cursor = afterSeq;
  for (;;) {
    // Stores may cap a page below the limit asked for: read until a page is empty.
    const page = await system.store.readLog<DecisionAuditRecord>(logs.audit, {
      afterSeq: cursor,
      limit: 1000,
    });
    const last = page.at(-1);
    if (last === undefined) return out;
    for (const entry of page) out.push(entry.value);
    cursor = last.seq;
  }
}

/** Day-granularity usage counts (each decision is counted once per granularity). */
async function usageTotals(system: System): Promise<{ total: number; allowed: number }> {
  const counters = await system.store.readCounters(USAGE_COUNTERS, "d|");
  let total = 0;
  let allowed = 0;
  for (const [key, count] of Object.entries(counters)) {
    total += count;
    if (parseUsageKey(key)?.state === "allowed") allowed += count;
  }
  return { total, allowed };
}
