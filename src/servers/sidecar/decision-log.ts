import { receiptOf } from "../../audit/receipts.ts";
import { auditPath, boundedText, MAX_FIELD_CHARS, newRecordId } from "../../audit/records.ts";
import { MAX_DECISIONS_PER_BATCH, type ShippedDecision } from "../../audit/shipped-decisions.ts";
import { normalizeRequestPath } from "../../core/path-template.ts";
import type { ErrorCode } from "../../errors.ts";
import type { SidecarDecision, SidecarDeny, SidecarEngine, SidecarRequest } from "../../pipeline/check.ts";
import { denyOf } from "../../pipeline/check.ts";
import { logs } from "../../store/model.ts";
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

export interface DecisionShipper {
  /** False when a record would be refused now (queue full or closed). */
  accepting(): boolean;
  /**
   * Writes the record to the journal (when there is one) and returns its ticket; throws when
   * it could not be written. The record is not queued: `push` does that, with the tickets.
   */
  writeAhead(record: ShippedDecision): JournalTicket | undefined;
  /**
   * Undefined once the ticket's line is with the kernel; else when it will be (the journal
   * writes a turn's records together), rejected when it could not be.
   */
  written(ticket: JournalTicket | undefined): Promise<void> | undefined;
  /** Queues a record; its journal lines (`tickets`) are released once the authority has it. */
  push(record: ShippedDecision, tickets?: ReadonlyArray<JournalTicket | undefined>): void;
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

/** The audit record of one decision, from what the transport asked and what the engine answered. */
export function shippedDecision(
  request: SidecarRequest,
  decision: SidecarDecision,
  time: Date,
): ShippedDecision {
  const about = decision.allow ? decision : decision.context;
  // Every field within what the route's schema takes: a caller's over-long path or capability
  // header must not make the authority refuse a batch.
  const subject = text(about?.subjectId, MAX_FIELD_CHARS);
  return {
    id: newRecordId("dec"),
    // The token's subject called on its own behalf; unauthenticated calls have no actor.
    actor: subject,
    subject_id: subject,
    partner_id: text(about?.partnerId, MAX_FIELD_CHARS),
    capability_id: text(about?.capabilityId ?? request.capabilityId, MAX_FIELD_CHARS),
    method: text(request.method, 16),
    path: text(auditPath(normalizeRequestPath(request.path)?.path ?? request.path), MAX_FIELD_CHARS),
    permission_id: decision.allow ? text(decision.permissionId, 2048) : null,
    decision: decision.allow ? "allowed" : "denied",
    reason: decision.allow ? null : decision.reason,
    transport: request.transport,
    requestId: text(decision.requestId, 128) ?? "-",
    time: isoTime(time),
    ...about?.notes,
  };
}

/** A record field: null when absent or empty, else bounded like the authority's own records. */
function text(value: string | null | undefined, max: number): string | null {
  return value === undefined || value === null || value === "" ? null : boundedText(value, max);
}

let lastIsoMs = Number.NaN;
let lastIso = "";

/** toISOString, once per millisecond: thousands of decisions share each. */
function isoTime(time: Date): string {
  const ms = time.getTime();
  if (ms !== lastIsoMs) {
    lastIsoMs = ms;
    lastIso = time.toISOString();
  }
  return lastIso;
}

/** The 503 a transport sends when it stops waiting, about what the engine had found out. */
function answeredInstead(request: SidecarRequest, settled: SidecarDecision): SidecarDeny {
  const context = settled.allow
    ? { subjectId: settled.subjectId, partnerId: settled.partnerId, capabilityId: settled.capabilityId }
    : settled.context;
  const deny = denyOf("upstream_unavailable", request.requestId);
  return context === undefined ? deny : { ...deny, context };
}

/** The record of an allow the transport then refused (input, constraints, upstream, redaction…). */
export function refusedDecision(shipped: ShippedDecision, refusal: ErrorCode): ShippedDecision {
  return { ...shipped, decision: "denied", reason: refusal };
}

/**
 * The decision answered, carrying the receipt (audit/receipts.ts) that finds its record once
 * the authority stored it (a refusal later keeps the record's id and time).
 */
function receipted<D extends SidecarDecision>(decision: D, shipped: ShippedDecision): D {
  return { ...decision, receipt: receiptOf(logs.audit, shipped) };
}

/**
 * The engine with every decision recorded. While the shipper refuses records, nothing is
 * evaluated: the answer is 503 `upstream_unavailable` (unrecorded, like the authority's
 * answers when its audit buffer is full).
 *
 * Every record is written ahead (`shipper.writeAhead`, then `shipper.written`: the journal
 * writes the records of one event-loop turn together) before the decision is returned; an
 * allow whose record cannot be written becomes a 503 deny. An allow on the forward proxy is
 * queued once the proxy knows what became of it (the allow's `settle`, which the proxy calls
 * when the response ends): a refusal after the decision is the record's deny with its code,
 * whatever step refused — never an allow — written again under the same `id`.
 */
export function auditedEngine(
  engine: SidecarEngine,
  shipper: DecisionShipper,
  now: () => Date = () => new Date(),
  onJournalError: (error: Error) => void = () => undefined,
): SidecarEngine {
  /** The record's journal ticket (undefined without a journal), or the error that kept it out. */
  const writeAhead = (shipped: ShippedDecision): JournalTicket | undefined | Error => {
    try {
      return shipper.writeAhead(shipped);
    } catch (error) {
      return error instanceof Error ? error : new Error("journal write failed");
    }
  };
  /** The record could not be written ahead. */
  const unwritten = (
    request: SidecarRequest,
    decision: SidecarDecision,
    shipped: ShippedDecision,
    error: Error,
  ): SidecarDecision => {
    onJournalError(error);
    if (decision.allow) {
      // Nothing is let through without a record that outlives the process.
      const deny = answeredInstead(request, decision);
      const instead = shippedDecision(request, deny, now());
      shipper.push(instead);
      return receipted(deny, instead);
    }
    shipper.push(shipped);
    return receipted(decision, shipped);
  };
  const record = (
    request: SidecarRequest,
    decision: SidecarDecision,
  ): SidecarDecision | Promise<SidecarDecision> => {
    const shipped = shippedDecision(request, decision, now());
    const ahead = writeAhead(shipped);
    if (ahead instanceof Error) return unwritten(request, decision, shipped, ahead);
    const landing = shipper.written(ahead);
    if (landing === undefined) return written(request, decision, shipped, ahead);
    return landing.then(
      () => {
        if (!(decision.allow && request.signal?.aborted === true))
          return written(request, decision, shipped, ahead);
        // The transport stopped waiting during the write and answered 503: that is the record's last line.
        const refused = refusedDecision(shipped, "upstream_unavailable");
        const outcome = writeAhead(refused);
        shipper.push(refused, [ahead, outcome instanceof Error ? undefined : outcome]);
        return receipted(decision, refused);
      },
      (error: unknown) =>
        unwritten(
          request,
          decision,
          shipped,
          error instanceof Error ? error : new Error("journal write failed"),
        ),
    );
  };
  /** The record is in the journal: queued now, or (a proxy allow) once its outcome is known. */
  const written = (
    request: SidecarRequest,
    decision: SidecarDecision,
    shipped: ShippedDecision,
    ahead: JournalTicket | undefined,
  ): SidecarDecision => {
    if (decision.allow && request.transport === "proxy") {
      // Written ahead now; queued when the outcome is known, as what became of the request.
      let settled = false;
      const settle = (refusal: ErrorCode | null): void => {
        if (settled) return;
        settled = true;
        if (refusal === null) {
          shipper.push(shipped, [ahead]);
          return;
        }
        const refused = refusedDecision(shipped, refusal);
        const outcome = writeAhead(refused);
        shipper.push(refused, [ahead, outcome instanceof Error ? undefined : outcome]);
      };
      return { ...receipted(decision, shipped), settle };
    }
    shipper.push(shipped, [ahead]);
    return receipted(decision, shipped);
  };
  const decide = (request: SidecarRequest): SidecarDecision | Promise<SidecarDecision> => {
    if (!shipper.accepting()) return denyOf("upstream_unavailable", request.requestId);
    const decision = engine.decide(request);
    if (!(decision instanceof Promise)) return record(request, decision);
    return decision.then((settled) => {
      // Settled after the transport stopped waiting: what the caller got was a 503.
      if (request.signal?.aborted === true) {
        void record(request, answeredInstead(request, settled));
        return settled;
      }
      // The recorded decision: a 503 instead of an allow whose record could not be written.
      return record(request, settled);
    });
  };
  return {
    decide,
    authorize(request) {
      const decision = decide(request);
      return decision instanceof Promise ? decision : Promise.resolve(decision);
    },
  };
}
