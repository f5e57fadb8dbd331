/**
 * Retention of the audit, MCP audit and evidence logs and of the usage counters, enforced in
 * the background: every `intervalMs` each rule removes what it selects in batches of
 * `batchSize` (one short store call each, the event loop free between them), so decisions
 * are never held up by a large cleanup. Replicas may all run it: the stores' trims are safe
 * to run at once (a second trim of the same entries removes nothing).
 *
 * Usage is kept as rollups per period (usage.ts: one counter per hour and one per day for
 * each partner, subject, capability, permission and state), independent of the raw decision
 * records: trimming the audit log never changes a usage count, and the daily rollups can be
 * kept longer than the hourly ones.
 *
 * The evidence rule's age also removes the binding evidence documents (`binding_invocations`,
 * one per invoke, `<binding>/<evidence id>`: the same records as the evidence log, in full).
 * Within a binding their ids sort by time, so a pass reads each binding's oldest documents and
 * stops at its first one to keep; a cursor kept between passes lets a backlog spread over many
 * bindings be worked off across passes.
 */
import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import { positiveIntegerOption } from "../core/positive-integer.ts";
import { bindingCollections } from "../store/binding-model.ts";
import { checkLogTrim, logIndexValues, trimCount } from "../store/log-query.ts";
import { logs } from "../store/model.ts";
import type { LogTrim, Store } from "../store/store.ts";
import { periodOf, USAGE_COUNTERS, type UsageGranularity } from "./usage.ts";

export interface LogRetention {
  /** Entries older than this are removed (ms; absent: no age limit). */
  readonly maxAgeMs?: number;
  /** At most this many entries are kept (absent: no count limit). */
  readonly maxCount?: number;
}

export interface RetentionSettings {
  /** Per log name. A log without a rule (or with an empty one) keeps everything. */
  readonly logs: Readonly<Record<string, LogRetention>>;
  /** How long usage rollups of each granularity are kept (ms; absent: forever). */
  readonly usage: Readonly<Partial<Record<UsageGranularity, number>>>;
}

export interface RetentionOptions {
  readonly store: Store;
  readonly settings: RetentionSettings;
  /** Between two passes (default 300000 ms). */
  readonly intervalMs?: number;
  /** Most records one store call removes (default 500). */
  readonly batchSize?: number;
  /** Most batches per rule and pass (default 200): a backlog is worked off over several passes. */
  readonly maxBatchesPerPass?: number;
  readonly now?: () => Date;
  /** Told how many records a batch removed (`what`: a log name, or `usage_hour` / `usage_day`). */
  readonly onRemoved?: (what: string, count: number) => void;
  /**
   * Given the entries of a log a batch is about to remove, before it removes them (the decision
   * chains seal each stream's new start: checkpoints.ts sealTrimmed). The batch removes only
   * those entries.
   */
  readonly beforeTrim?: (log: string, entries: readonly { readonly value: unknown }[]) => Promise<void>;
  /** Told about a failed pass (the next pass tries again). */
  readonly onError?: (error: unknown) => void;
}

export interface RetentionWorker {
  /** Runs one pass now; resolves to what it removed per log / usage granularity. */
  runOnce(): Promise<Record<string, number>>;
  /** Stops the timer and waits for a pass under way. */
  stop(): Promise<void>;
}

const GRANULARITY_TOKEN: Record<UsageGranularity, string> = { day: "d", hour: "h" };

/** A binding evidence document's id: the binding, then `ev_` + its time in ms (base 36, 10 digits). */
const EVIDENCE_DOCUMENT = /^(.+)\/ev_([0-9a-z]{10})[0-9a-f]{16}$/;
/** Sorts after every evidence id of a binding (`<binding>/ev_…`): the cursor that skips the rest of it. */
const AFTER_BINDING = "/~";
/** Most documents one writeAll removes (the stores' batch bound). */
const DELETES_PER_BATCH = 100;

/** True when the settings select nothing (no timer is started then). */
export function retentionIsEmpty(settings: RetentionSettings): boolean {
  const logRules = Object.values(settings.logs).some(
    (r) => r.maxAgeMs !== undefined || r.maxCount !== undefined,
  );
  return !logRules && Object.values(settings.usage).every((ms) => ms === undefined);
}

export function startRetention(options: RetentionOptions): RetentionWorker {
  const { store, settings } = options;
  const intervalMs = positiveIntegerOption(options.intervalMs, 300_000, "intervalMs");
  const batchSize = positiveIntegerOption(options.batchSize, 500, "batchSize");
  const maxBatches = positiveIntegerOption(options.maxBatchesPerPass, 200, "maxBatchesPerPass");
  const now = options.now ?? (() => new Date());

  /** One batch of a log: the entries the rule selects are handed to `beforeTrim`, then removed. */
  async function trimBatch(log: string, trim: LogTrim): Promise<number> {
    const beforeTrim = options.beforeTrim;
    if (beforeTrim === undefined) return store.trimLog(log, trim);
    const oldest = await store.readLog(log, { limit: Math.min(batchSize, 1000) });
    const first = oldest[0];
    if (first === undefined) return 0;
    const total = (await store.logLength(log)) - first.seq + 1;
    const count = trimCount(
      oldest.map((entry) => logIndexValues(entry.value).time),
      total,
      checkLogTrim(trim),
    );
    if (count === 0) return 0;
    await beforeTrim(log, oldest.slice(0, count));
    return store.trimLog(log, { ...trim, max: count });
  }

  /** Calls `batch` until it removes less than a full batch or the pass's cap is reached. */
  async function drain(what: string, batch: () => Promise<number>): Promise<number> {
    let total = 0;
    for (let i = 0; i < maxBatches; i++) {
      const removed = await batch();
      total += removed;
      if (removed > 0) options.onRemoved?.(what, removed);
      if (removed < batchSize) break;
      await yieldToEventLoop();
    }
    return total;
  }

  /** Where the evidence documents' walk resumes (undefined: from the first binding). */
  let evidenceCursor: string | undefined;

  /**
   * One page of evidence documents from the cursor: the ones older than `olderThan` are removed;
   * a binding's first one to keep ends that binding for this pass. `done`: the walk reached the
   * last binding (the next pass starts over).
   */
  async function evidenceDocumentsBatch(olderThan: number): Promise<{ removed: number; done: boolean }> {
    const page = await store.list(bindingCollections.invocations, {
      limit: Math.min(batchSize, 1000),
      ...(evidenceCursor === undefined ? {} : { after: evidenceCursor }),
    });
    const doomed: string[] = [];
    let kept: string | undefined;
    let lastBinding: string | undefined;
    for (const { id } of page.items) {
      const match = EVIDENCE_DOCUMENT.exec(id);
      const binding = match?.[1];
      if (binding === undefined || binding === kept) continue;
      lastBinding = binding;
      if (Number.parseInt(match?.[2] ?? "", 36) < olderThan) doomed.push(id);
      else kept = binding;
    }
    for (let i = 0; i < doomed.length; i += DELETES_PER_BATCH) {
      const ids = doomed.slice(i, i + DELETES_PER_BATCH);
      await store.writeAll(
        ids.map((id) => ({ op: "delete" as const, collection: bindingCollections.invocations, id })),
      );
    }
    const done = page.next === undefined;
    // The last binding of the page is kept: its later documents are newer, skip them.
    evidenceCursor = done
      ? undefined
      : kept !== undefined && kept === lastBinding
        ? `${kept}${AFTER_BINDING}`
        : page.next;
    return { removed: doomed.length, done };
  }

  async function trimEvidenceDocuments(olderThan: number): Promise<number> {
    let total = 0;
    for (let i = 0; i < maxBatches; i++) {
      const { removed, done } = await evidenceDocumentsBatch(olderThan);
      total += removed;
      if (removed > 0) options.onRemoved?.("evidence_documents", removed);
      if (done) break;
      await yieldToEventLoop();
    }
    return total;
  }

  async function pass(): Promise<Record<string, number>> {
    const removed: Record<string, number> = {};
    const at = now().getTime();
    for (const [log, rule] of Object.entries(settings.logs)) {
      if (rule.maxAgeMs === undefined && rule.maxCount === undefined) continue;
      removed[log] = await drain(log, () =>
        trimBatch(log, {
          ...(rule.maxAgeMs === undefined ? {} : { olderThan: at - rule.maxAgeMs }),
          ...(rule.maxCount === undefined ? {} : { keepLast: rule.maxCount }),
          max: batchSize,
        }),
      );
    }
    const evidenceAge = settings.logs[logs.evidence]?.maxAgeMs;
    if (evidenceAge !== undefined) {
      removed.evidence_documents = await trimEvidenceDocuments(at - evidenceAge);
    }
    for (const granularity of ["hour", "day"] as const) {
      const maxAgeMs = settings.usage[granularity];
      if (maxAgeMs === undefined) continue;
      // Periods strictly before the one the cutoff falls in go; keys sort by period.
      const prefix = `${GRANULARITY_TOKEN[granularity]}|`;
      const before = `${prefix}${periodOf(new Date(at - maxAgeMs), granularity)}`;
      removed[`usage_${granularity}`] = await drain(`usage_${granularity}`, () =>
        store.deleteCounters(USAGE_COUNTERS, prefix, before, batchSize),
      );
    }
    return removed;
  }

  let running: Promise<Record<string, number>> | undefined;
  const runOnce = (): Promise<Record<string, number>> => {
    running ??= pass().finally(() => {
      running = undefined;
    });
    return running;
  };
  const timer = setInterval(() => {
    runOnce().catch((error: unknown) => options.onError?.(error));
  }, intervalMs);
  timer.unref();
  return {
    runOnce,
    async stop() {
      clearInterval(timer);
      await running?.catch(() => undefined);
    },
  };
}
