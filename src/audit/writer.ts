/**
 * The buffered writer behind every audit, usage and evidence record.
 *
 * - A `write(entry)` is accepted whole (its log record and its counter increments) or
 *   refused whole: nothing is half-recorded.
 * - While the store answers, `write` resolves once the log record is stored. When the
 *   store fails, the entry stays in a bounded in-memory queue, `write` resolves at once
 *   (the caller is not held up by an outage), and the queue is retried with exponential
 *   backoff until the store is back; records keep their order.
 * - A `deferred` record (one nobody waits for) waits up to `lingerMs` for the next record
 *   somebody waits for and is stored in its batch; a batch spanning logs is one store call
 *   where the store offers `appendAcross` (one SQLite transaction).
 * - With a `writeAhead` file (write-ahead.ts), a waited-for record that has an `id` is
 *   appended to it and `write` resolves then: the record outlives the process from that
 *   moment, and it is stored like a deferred one (with the next records, within `lingerMs`).
 *   When the append fails, the record waits for the store as without the file.
 * - Counter increments are summed per key and written every `counterFlushMs` (and by
 *   flush()), so a backlog is bounded by the number of distinct keys, not of decisions,
 *   and usage views trail the audit log by at most that interval.
 * - When the queue is full a write is refused with `AuditBufferFullError`
 *   (`upstream_unavailable`): callers answer 503 and never act on a decision that could
 *   not be recorded. `dropped()` counts these refusals; it stays 0 within the bound.
 * - `flush()` waits for the queue to drain (retrying at once); `close()` flushes with a
 *   deadline and reports what could not be written (`lost()`).
 *
 * The queue lives in memory: a process killed while the store is down loses what it
 * holds (at most `maxPending` entries). A write whose reply was lost (connection cut
 * after the store applied it) is retried, so a record can exceptionally land twice —
 * never zero times; records carry unique ids for that reason.
 */

import { positiveIntegerOption } from "../core/positive-integer.ts";
import type { Store } from "../store/store.ts";
import type { WriteAhead } from "./write-ahead.ts";

export interface CounterIncrement {
  readonly counters: string;
  readonly key: string;
  readonly by?: number;
}

export interface AuditEntry {
  readonly log?: { readonly name: string; readonly value: unknown };
  readonly counts?: readonly CounterIncrement[];
  /**
   * A log record nobody waits for (an MCP row, an evidence digest: queued after the answer):
   * it waits up to `lingerMs` for the next record that is waited for, so both are stored in
   * one transaction instead of a commit of its own each.
   */
  readonly deferred?: boolean;
}

export interface AuditWriterOptions {
  readonly store: Store;
  /** Most log entries (and most distinct pending counter keys) held (default 100000). */
  readonly maxPending?: number;
  /**
   * Most log entries written in one store call (default 256): entries queued while a write
   * is in flight go together in the next one (group commit), so a busy log costs one
   * store write per batch, not one per decision.
   */
  readonly batchSize?: number;
  /**
   * Counter increments are summed in memory and written at most this often (default
   * 250 ms), or at once by flush(); a hot key costs one store write per interval, not one
   * per decision.
   */
  readonly counterFlushMs?: number;
  /**
   * Longest wait of a `deferred` log record for a record that is waited for (default 20 ms);
   * after it, the deferred records are stored on their own. flush() and close() store them at once.
   */
  readonly lingerMs?: number;
  /** First retry delay after a failure, doubled up to maxDelayMs (defaults 50 / 5000 ms). */
  readonly retry?: { readonly initialDelayMs?: number; readonly maxDelayMs?: number };
  /**
   * Links log records into their hash chain (chain.ts) as they are accepted — in the order
   * they are stored — and is told each record's seq once stored.
   */
  readonly chain?: AuditChainHooks;
  /**
   * Where waited-for records are written ahead (decision 2931): a record is taken once
   * appended there, and emptied from it once stored. Only for a store on the same disk
   * (SQLite): the file lives and dies with the store's own.
   */
  readonly writeAhead?: WriteAhead;
  /** Told about outages and recoveries (for logs and metrics); never given record contents. */
  readonly onStateChange?: (event: { state: "failing" | "ok"; pending: number; error?: unknown }) => void;
}

export interface AuditChainHooks {
  link(log: string, value: unknown): unknown;
  stored(log: string, value: unknown, seq: number): void;
}

export type AuditWriterState = "ok" | "failing" | "closed";

export interface AuditWriterStats {
  readonly state: AuditWriterState;
  readonly pending: number;
  readonly pendingCounterKeys: number;
  readonly written: number;
  readonly dropped: number;
  readonly lost: number;
  readonly failures: number;
  /** Records taken on their write-ahead append (before they were stored). */
  readonly writtenAhead: number;
}

export interface AuditWriter {
  write(entry: AuditEntry): Promise<void>;
  /** True when an entry would be accepted now. */
  accepting(): boolean;
  /** How many more entries would be accepted now (0 while closing), out of `capacity`. */
  room(): number;
  /** The most entries held at once (`maxPending`). */
  readonly capacity: number;
  /** Log entries not yet stored. */
  pending(): number;
  dropped(): number;
  lost(): number;
  stats(): AuditWriterStats;
  /** Resolves true once everything is stored, false if `timeoutMs` passes first. */
  flush(timeoutMs?: number): Promise<boolean>;
  /** Refuses further writes, flushes within `timeoutMs` (default 10000), counts the rest as lost. */
  close(timeoutMs?: number): Promise<{ flushed: boolean; lost: number }>;
}

export class AuditBufferFullError extends Error {
  readonly code = "audit_buffer_full";
  readonly authorityCode = "upstream_unavailable" as const;

  constructor() {
    super("the audit buffer is full: the store has been unavailable too long");
    this.name = "AuditBufferFullError";
  }
}

export class AuditClosedError extends Error {
  readonly code = "audit_closed";
  readonly authorityCode = "upstream_unavailable" as const;

  constructor() {
    super("the audit writer is closed");
    this.name = "AuditClosedError";
  }
}

interface QueuedLog {
  readonly name: string;
  readonly value: unknown;
  settle: (() => void) | undefined;
}

/** Counter keys written at once (one increment each, in parallel). */
const COUNTER_BATCH = 128;

const counterId = (counters: string, key: string): string => `${counters}\u0000${key}`;

export function createAuditWriter(options: AuditWriterOptions): AuditWriter {
  if (options?.store === undefined) throw new TypeError("store is required");
  const store = options.store;
  const maxPending = positiveIntegerOption(options.maxPending, 100_000, "maxPending");
  const batchSize = positiveIntegerOption(options.batchSize, 256, "batchSize");
  const initialDelay = positiveIntegerOption(options.retry?.initialDelayMs, 50, "retry.initialDelayMs");
  const maxDelay = positiveIntegerOption(options.retry?.maxDelayMs, 5000, "retry.maxDelayMs");
  const counterFlushMs = positiveIntegerOption(options.counterFlushMs, 250, "counterFlushMs");
  const lingerMs = positiveIntegerOption(options.lingerMs, 20, "lingerMs");
  if (maxDelay < initialDelay) throw new TypeError("retry.maxDelayMs must be at least retry.initialDelayMs");

  let queue: QueuedLog[] = [];
  /** counterId → { counters, key, by } summed while waiting. */
  const deltas = new Map<string, { counters: string; key: string; by: number }>();
  let state: AuditWriterState = "ok";
  let running = false;
  let retryTimer: NodeJS.Timeout | undefined;
  let delay = initialDelay;
  let written = 0;
  let dropped = 0;
  let lost = 0;
  let failures = 0;
  let writtenAhead = 0;
  /** Records were written ahead since the file was last emptied: empty it once all are stored. */
  let aheadPending = false;
  /**
   * A waited-for record was queued without being written ahead (its append failed, it has no
   * id): later ones wait for the store too until the queue is stored, so the file never holds
   * a record whose predecessor in its chain a kill would lose.
   */
  let aheadBlocked = false;
  let closing = false;
  /** Set by the counter timer and by flush(): pending counters are written in this run. */
  let countersDue = false;
  let counterTimer: NodeJS.Timeout | undefined;
  let lingerTimer: NodeJS.Timeout | undefined;
  const idleWaiters = new Set<() => void>();

  const empty = (): boolean => queue.length === 0 && deltas.size === 0;

  function notifyIdle(): void {
    if (!empty()) return;
    for (const wake of idleWaiters) wake();
    idleWaiters.clear();
  }

  function parkAll(): void {
    for (const item of queue) {
      item.settle?.();
      item.settle = undefined;
    }
  }

  /** One batch's entries per log, in queue order. */
  function byLog(batch: readonly QueuedLog[]): Map<string, QueuedLog[]> {
    const groups = new Map<string, QueuedLog[]>();
    for (const item of batch) {
      const group = groups.get(item.name);
      if (group === undefined) groups.set(item.name, [item]);
      else group.push(item);
    }
    return groups;
  }

  /** Stores one batch: every log in one transaction where the store offers it, else log by log. */
  async function appendBatch(batch: readonly QueuedLog[]): Promise<PromiseSettledResult<number[]>[]> {
    const groups = [...byLog(batch)];
    if (store.appendAcross === undefined || groups.length === 1) {
      return Promise.allSettled(
        groups.map(([name, items]) =>
          store.appendMany(
            name,
            items.map((item) => item.value),
          ),
        ),
      );
    }
    // Entries grouped by log, so the seqs come back per group as appendMany's would.
    const grouped = groups.flatMap(([name, items]) =>
      items.map((item) => ({ log: name, value: item.value })),
    );
    try {
      const seqs = await store.appendAcross(grouped);
      let at = 0;
      return groups.map(([, items]) => {
        const part = seqs.slice(at, at + items.length);
        at += items.length;
        return { status: "fulfilled", value: part };
      });
    } catch (reason) {
      return groups.map(() => ({ status: "rejected", reason }));
    }
  }

  async function drainLogs(): Promise<boolean> {
    while (queue.length > 0) {
      const batch = queue.splice(0, batchSize);
      const groups = [...byLog(batch)];
      const results = await appendBatch(batch);
      const failed = new Set<QueuedLog>();
      let firstError: unknown;
      results.forEach((result, i) => {
        const items = groups[i]?.[1] ?? [];
        if (result.status === "rejected") {
          for (const item of items) failed.add(item);
          firstError ??= result.reason;
          return;
        }
        items.forEach((item, at) => {
          written++;
          const seq = result.value[at];
          if (seq !== undefined) options.chain?.stored(item.name, item.value, seq);
          item.settle?.();
          item.settle = undefined;
        });
      });
      if (failed.size > 0) {
        // Back at the front, in their original order.
        queue = batch.filter((item) => failed.has(item)).concat(queue);
        failures++;
        enterFailing(firstError);
        return false;
      }
    }
    // The queue is empty: every record written ahead is stored.
    aheadBlocked = false;
    if (aheadPending) {
      try {
        options.writeAhead?.settled();
        aheadPending = false;
      } catch {
        // Emptied after a later drain; until then a restart stores its records again (ids: once).
      }
    }
    return true;
  }

  /** Appends a waited-for record to the write-ahead file; false when it has none, or failed. */
  function writeAhead(name: string, value: unknown): boolean {
    const file = options.writeAhead;
    if (file === undefined) return false;
    // Only a record with an id can be replayed without being stored twice (decision 2751).
    if (aheadBlocked || typeof (value as { id?: unknown } | null)?.id !== "string") {
      aheadBlocked = true;
      return false;
    }
    try {
      file.append(name, value);
    } catch {
      // Disk full, I/O error: this record waits for the store instead.
      aheadBlocked = true;
      return false;
    }
    writtenAhead++;
    aheadPending = true;
    return true;
  }

  async function drainCounters(): Promise<boolean> {
    const batch = [...deltas.entries()].slice(0, COUNTER_BATCH);
    // Snapshot the amounts sent: the map may grow while the increments are in flight.
    const sent = batch.map(([id, delta]) => ({ id, counters: delta.counters, key: delta.key, by: delta.by }));
    const results = await Promise.allSettled(sent.map((d) => store.increment(d.counters, d.key, d.by)));
    let firstError: unknown;
    results.forEach((result, i) => {
      const d = sent[i];
      if (d === undefined) return;
      if (result.status === "rejected") {
        firstError ??= result.reason;
        return;
      }
      // Increments added while this one was in flight stay pending.
      const current = deltas.get(d.id);
      if (current === undefined) return;
      current.by -= d.by;
      if (current.by === 0) deltas.delete(d.id);
    });
    if (firstError !== undefined) {
      failures++;
      enterFailing(firstError);
      return false;
    }
    return true;
  }

  function enterFailing(error: unknown): void {
    parkAll();
    if (state === "ok") {
      state = "failing";
      options.onStateChange?.({ state: "failing", pending: queue.length, error });
    }
  }

  function scheduleRetry(): void {
    if (retryTimer !== undefined) return;
    retryTimer = setTimeout(() => {
      retryTimer = undefined;
      kick();
    }, delay);
    // A pending retry must not keep a finished process alive; close() flushes explicitly.
    retryTimer.unref();
    delay = Math.min(delay * 2, maxDelay);
  }

  /** A deferred record is stored with the next one waited for, or after `lingerMs` at the latest. */
  function scheduleLinger(): void {
    if (lingerTimer !== undefined) return;
    // Not unref'd: a process that ends on its own still stores what it queued.
    lingerTimer = setTimeout(() => {
      lingerTimer = undefined;
      kick();
    }, lingerMs);
  }

  function scheduleCounters(): void {
    if (counterTimer !== undefined || countersDue) return;
    counterTimer = setTimeout(() => {
      counterTimer = undefined;
      countersDue = true;
      kick();
    }, counterFlushMs);
    counterTimer.unref();
  }

  const work = (): boolean => queue.length > 0 || (countersDue && deltas.size > 0);

  async function run(): Promise<void> {
    running = true;
    try {
      while (work()) {
        const ok = (await drainLogs()) && (!countersDue || (await drainCounters()));
        if (!ok) {
          scheduleRetry();
          return;
        }
        delay = initialDelay;
        if (state === "failing") {
          state = "ok";
          options.onStateChange?.({ state: "ok", pending: queue.length });
        }
      }
      if (deltas.size === 0) countersDue = false;
      notifyIdle();
    } finally {
      running = false;
    }
  }

  let scheduled = false;
  /**
   * Starts a drain after the current event-loop turn, so every record written during the
   * turn (all the requests that arrived together) goes to the store in one batch.
   */
  function kick(): void {
    if (running || scheduled || retryTimer !== undefined) return;
    scheduled = true;
    setImmediate(() => {
      scheduled = false;
      if (!running && retryTimer === undefined) void run();
    });
  }

  /** Skips the backoff wait (flush and close want an answer now). */
  function retryNow(): void {
    if (retryTimer !== undefined) {
      clearTimeout(retryTimer);
      retryTimer = undefined;
    }
    kick();
  }

  function accepting(): boolean {
    return !closing && queue.length < maxPending && deltas.size < maxPending;
  }

  function write(entry: AuditEntry): Promise<void> {
    if (closing) {
      dropped++;
      return Promise.reject(new AuditClosedError());
    }
    if (!accepting()) {
      dropped++;
      return Promise.reject(new AuditBufferFullError());
    }
    for (const count of entry.counts ?? []) {
      const by = count.by ?? 1;
      const id = counterId(count.counters, count.key);
      const current = deltas.get(id);
      if (current === undefined) deltas.set(id, { counters: count.counters, key: count.key, by });
      else current.by += by;
    }
    if (deltas.size > 0) scheduleCounters();
    const log = entry.log;
    if (log === undefined) {
      kick();
      return Promise.resolve();
    }
    // Linked only once accepted: a refused write leaves no hole in the chain.
    const value = options.chain === undefined ? log.value : options.chain.link(log.name, log.value);
    const item: QueuedLog = { name: log.name, value, settle: undefined };
    const ahead = entry.deferred !== true && writeAhead(log.name, value);
    // In an outage the caller does not wait: the record is safe in the queue (or written ahead).
    const done =
      state === "failing" || ahead
        ? Promise.resolve()
        : new Promise<void>((resolve) => {
            item.settle = resolve;
          });
    queue.push(item);
    if ((entry.deferred === true || ahead) && state === "ok" && queue.length < batchSize) scheduleLinger();
    else kick();
    return done;
  }

  function flush(timeoutMs?: number): Promise<boolean> {
    if (empty()) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const wake = (): void => {
        if (timer !== undefined) clearTimeout(timer);
        resolve(true);
      };
      idleWaiters.add(wake);
      countersDue = true;
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => {
          idleWaiters.delete(wake);
          resolve(empty());
        }, timeoutMs);
      }
      retryNow();
    });
  }

  async function close(timeoutMs = 10_000): Promise<{ flushed: boolean; lost: number }> {
    closing = true;
    const deadline = Date.now() + timeoutMs;
    // Retry at the backoff pace until the deadline; each attempt is immediate on success.
    while (!empty() && Date.now() < deadline) {
      const flushed = await flush(Math.max(1, Math.min(delay, deadline - Date.now())));
      if (flushed) break;
    }
    if (retryTimer !== undefined) clearTimeout(retryTimer);
    retryTimer = undefined;
    if (counterTimer !== undefined) clearTimeout(counterTimer);
    counterTimer = undefined;
    if (lingerTimer !== undefined) clearTimeout(lingerTimer);
    lingerTimer = undefined;
    const flushed = empty();
    if (!flushed) {
      lost += queue.length;
      parkAll();
    }
    state = "closed";
    return { flushed, lost };
  }

  return {
    write,
    accepting,
    room: () => (closing ? 0 : Math.max(0, maxPending - Math.max(queue.length, deltas.size))),
    capacity: maxPending,
    pending: () => queue.length,
    dropped: () => dropped,
    lost: () => lost,
    stats: () => ({
      state,
      pending: queue.length,
      pendingCounterKeys: deltas.size,
      written,
      dropped,
      lost,
      failures,
      writtenAhead,
    }),
    flush,
    close,
  };
}
