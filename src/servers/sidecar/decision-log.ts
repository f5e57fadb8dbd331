import { MAX_DECISIONS_PER_BATCH } from "../../audit/shipped-decisions.ts";
import type { DecisionRecordWriter } from "../../pipeline/check-record.ts";
import type { DecisionJournal, JournalTicket } from "./decision-journal.ts";
import { positiveIntOption, SidecarConfigError } from "./errors.ts";
import { createRecordQueue } from "./record-queue.ts";

/**
 * Every sidecar decision becomes one `decision` record in the authority's audit log (the
 * spec: "every allow or deny decision … admin audit"), shipped in batches to
 * `POST /v1/sidecar/decisions`, where the authority's recorder writes it with its usage
 * counts.
 *
 * A decision is answered once its record is queued here, not once it is stored: waiting for
 * the authority on every Check would put a network round trip and a store commit on the
 * request path. The queue is bounded (`maxPending`); while it is full the sidecar evaluates
 * nothing and answers 503 `upstream_unavailable` (as the authority does when its own audit
 * buffer is full), so no decision goes unrecorded for longer than the authority is away.
 * With a journal (decision-journal.ts; `authority sidecar` always has one), every record is
 * written to it before its decision is answered, and an allow whose record cannot be written
 * is answered 503 instead: records queued when the process dies are shipped by the next
 * start (docs/decisions/2501-decision-records-written-ahead.md). Without one (tests), they
 * are lost. A batch whose reply was lost is sent again, so the log can hold twins with the
 * same `id`.
 */

export interface DecisionShipperOptions {
  /**
   * Delivers one batch: the records as the UTF-8 bytes of a JSON array. Rejects when the
   * authority did not take it (it is sent again).
   */
  readonly send: (records: Buffer) => Promise<void>;
  /** Records held before decisions are refused (default 10000). */
  readonly maxPending?: number;
  /** Records per request (default 500, the route's limit). */
  readonly batchSize?: number;
  /** How long a record may wait for companions before it is sent (default 100 ms). */
  readonly flushIntervalMs?: number;
  /** First retry delay after a failed send, doubled up to 2 s (default 100 ms). */
  readonly retryMs?: number;
  /** `failing` after a first failed send (with its error), `ok` once a send succeeds again. */
  readonly onStateChange?: (state: "ok" | "failing", pending: number, error?: unknown) => void;
  /** A record the authority refused on its own (400/413/422): it was set aside, not retried. */
  readonly onRefused?: (error: unknown) => void;
  /** `count` records the authority took. */
  readonly onDelivered?: (count: number) => void;
  /** Where records are written before they are queued; its recovered records are queued first. */
  readonly journal?: DecisionJournal;
}

/**
 * The record step's writer (src/pipeline/check-record.ts) over the journal and the queue to
 * the authority.
 */
export interface DecisionShipper extends DecisionRecordWriter {
  pending(): number;
  /** Sends what is queued; false when something is still queued after `timeoutMs`. */
  flush(timeoutMs: number): Promise<boolean>;
  /** Stops accepting, flushes for up to `timeoutMs`; `lost` records were never delivered. */
  close(timeoutMs: number): Promise<{ flushed: boolean; lost: number }>;
}

/** A FIFO of each queued record's journal tickets. */
function createTicketQueue() {
  let items: Array<ReadonlyArray<JournalTicket | undefined> | undefined> = [];
  let first = 0;
  return {
    push(lines: ReadonlyArray<JournalTicket | undefined> | undefined): void {
      items.push(lines);
    },
    /** The tickets of the first `count` records, removed. */
    shift(count: number): JournalTicket[] {
      const out: JournalTicket[] = [];
      const end = Math.min(items.length, first + count);
      for (let i = first; i < end; i++) for (const ticket of items[i] ?? []) if (ticket) out.push(ticket);
      first = end;
      if (first === items.length) {
        items = [];
        first = 0;
      } else if (first > 4096) {
        items = items.slice(first);
        first = 0;
      }
      return out;
    },
  };
}

/** Well under the authority's request body limit (1 MiB by default). */
const MAX_BATCH_BYTES = 512 * 1024;
const REFUSED_STATUSES: ReadonlySet<number> = new Set([400, 413, 422]);

/** An answer that sending the same records again cannot change (unlike 401/403/5xx/no answer). */
function isRefusal(error: unknown): boolean {
  const status = (error as { status?: unknown } | null)?.status;
  return typeof status === "number" && REFUSED_STATUSES.has(status);
}
const MAX_RETRY_MS = 2000;

export function createDecisionShipper(options: DecisionShipperOptions): DecisionShipper {
  if (typeof options?.send !== "function") throw new SidecarConfigError("send is required");
  const maxPending = positiveIntOption(options.maxPending, 10_000, "maxPending");
  const batchSize = positiveIntOption(
    options.batchSize,
    MAX_DECISIONS_PER_BATCH,
    "batchSize",
    MAX_DECISIONS_PER_BATCH,
  );
  const flushIntervalMs = positiveIntOption(options.flushIntervalMs, 100, "flushIntervalMs");
  const retryMs = positiveIntOption(options.retryMs, 100, "retryMs");
  // Records wait as UTF-8 JSON outside the JS heap (record-queue.ts).
  const queue = createRecordQueue();
  const { journal } = options;
  /** The journal lines of each queued record, in queue order (empty without a journal). */
  const tickets = createTicketQueue();
  const enqueue = (json: string, lines: ReadonlyArray<JournalTicket | undefined> | undefined): void => {
    queue.push(json);
    if (journal !== undefined) tickets.push(lines);
  };
  const dequeue = (count: number): void => {
    queue.drop(count);
    if (journal !== undefined) for (const ticket of tickets.shift(count)) journal.release(ticket);
  };
  for (const record of journal?.recovered ?? []) enqueue(record.json, [record.ticket]);
  /** Records per send: batchSize, smaller while a refused batch is being narrowed down. */
  let batchLimit = batchSize;
  let timer: NodeJS.Timeout | undefined;
  let sending: Promise<void> | undefined;
  let failures = 0;
  let closed = false;
  const idle = new Set<() => void>();

  const schedule = (delayMs: number): void => {
    if (timer !== undefined || sending !== undefined || queue.length === 0) return;
    // Unref: the servers keep the process alive; close() flushes explicitly.
    timer = setTimeout(sendBatch, delayMs).unref();
  };

  /** Calls a hook; a throwing hook must not stop the shipper. */
  const tell = (hook: () => void): void => {
    try {
      hook();
    } catch {
      // The hooks only log.
    }
  };

  const sendBatch = (): void => {
    timer = undefined;
    const count = queue.countWithin(Math.min(batchLimit, queue.length), MAX_BATCH_BYTES);
    sending = options.send(queue.peekArray(count)).then(
      () => {
        dequeue(count);
        batchLimit = batchSize;
        tell(() => options.onDelivered?.(count));
        if (failures > 0) tell(() => options.onStateChange?.("ok", queue.length));
        failures = 0;
      },
      (error: unknown) => {
        if (isRefusal(error)) {
          // The authority will never take this batch as it is: halve it until the one record it
          // refuses is found, and set that one aside, so it cannot block every record behind it.
          if (count > 1) batchLimit = Math.ceil(count / 2);
          else {
            dequeue(1);
            tell(() => options.onRefused?.(error));
          }
          return;
        }
        failures++;
        if (failures === 1) tell(() => options.onStateChange?.("failing", queue.length, error));
      },
    );
    void sending.then(() => {
      sending = undefined;
      if (queue.length === 0) {
        for (const resolve of idle) resolve();
        idle.clear();
        return;
      }
      if (failures > 0) schedule(Math.min(MAX_RETRY_MS, retryMs * 2 ** (failures - 1)));
      else schedule(queue.length >= batchLimit ? 0 : flushIntervalMs);
    });
  };

  schedule(0);

  const flush = async (timeoutMs: number): Promise<boolean> => {
    if (queue.length === 0) return true;
    if (timer !== undefined && failures === 0) {
      clearTimeout(timer);
      sendBatch();
    }
    let cancel: NodeJS.Timeout | undefined;
    let onIdle: (() => void) | undefined;
    const drained = await Promise.race([
      new Promise<boolean>((resolve) => {
        onIdle = () => resolve(true);
        idle.add(onIdle);
      }),
      new Promise<boolean>((resolve) => {
        cancel = setTimeout(() => resolve(false), timeoutMs);
      }),
    ]);
    clearTimeout(cancel);
    if (onIdle !== undefined) idle.delete(onIdle);
    return drained && queue.length === 0;
  };

  return {
    accepting: () => !closed && queue.length < maxPending,
    writeAhead: (record) => journal?.append(JSON.stringify(record)),
    written: (ticket) => (ticket === undefined ? undefined : journal?.written(ticket)),
    push(record, lines) {
      enqueue(JSON.stringify(record), lines);
      schedule(queue.length >= batchLimit ? 0 : flushIntervalMs);
    },
    pending: () => queue.length,
    flush,
    async close(timeoutMs) {
      closed = true;
      const flushed = await flush(timeoutMs);
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
      return { flushed, lost: queue.length };
    },
  };
}
