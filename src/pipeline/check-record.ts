/**
 * The record step of a sidecar decision ("record after the outcome", docs/decisions/2701),
 * run around the Check pipeline (check.ts) for ext_authz and the forward proxy: every
 * decision becomes one `decision` record for the authority's audit log, made here with its
 * receipt, written ahead through the transport's writer (the sidecar's journal and its queue
 * to the authority, src/servers/sidecar/decision-log.ts) before the decision is answered.
 */
import { receiptOf } from "../audit/receipts.ts";
import { auditPath, boundedText, MAX_FIELD_CHARS, newRecordId } from "../audit/records.ts";
import type { ShippedDecision } from "../audit/shipped-decisions.ts";
import { normalizeRequestPath } from "../core/path-template.ts";
import type { ErrorCode } from "../errors.ts";
import { logs } from "../store/model.ts";
import {
  denyOf,
  type SidecarDecision,
  type SidecarDeny,
  type SidecarEngine,
  type SidecarRequest,
} from "./check.ts";

/** A written-ahead record's handle: what `written` waits on and `push` releases once delivered. */
export interface RecordTicket {
  readonly segment: object;
}

/** Where the record step writes: the sidecar's journal and its queue to the authority. */
export interface DecisionRecordWriter {
  /** False when a record would be refused now (queue full or closed). */
  accepting(): boolean;
  /**
   * Writes the record to the journal (when there is one) and returns its ticket; throws when
   * it could not be written. The record is not queued: `push` does that, with the tickets.
   */
  writeAhead(record: ShippedDecision): RecordTicket | undefined;
  /**
   * Undefined once the ticket's line is with the kernel; else when it will be (the journal
   * writes a turn's records together), rejected when it could not be.
   */
  written(ticket: RecordTicket | undefined): Promise<void> | undefined;
  /** Queues a record; its journal lines (`tickets`) are released once the authority has it. */
  push(record: ShippedDecision, tickets?: ReadonlyArray<RecordTicket | undefined>): void;
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
 * the authority stored it (a refusal later keeps the record's id and time, so its receipt).
 */
function receipted<D extends SidecarDecision>(decision: D, receipt: string): D {
  return { ...decision, receipt };
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
  shipper: DecisionRecordWriter,
  now: () => Date = () => new Date(),
  onJournalError: (error: Error) => void = () => undefined,
): SidecarEngine {
  /** The record's journal ticket (undefined without a journal), or the error that kept it out. */
  const writeAhead = (shipped: ShippedDecision): RecordTicket | undefined | Error => {
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
    receipt: string,
    error: Error,
  ): SidecarDecision => {
    onJournalError(error);
    if (decision.allow) {
      // Nothing is let through without a record that outlives the process.
      const deny = answeredInstead(request, decision);
      const instead = shippedDecision(request, deny, now());
      shipper.push(instead);
      return receipted(deny, receiptOf(logs.audit, instead));
    }
    shipper.push(shipped);
    return receipted(decision, receipt);
  };
  const record = (
    request: SidecarRequest,
    decision: SidecarDecision,
  ): SidecarDecision | Promise<SidecarDecision> => {
    const shipped = shippedDecision(request, decision, now());
    // The record and its receipt are made together, then written ahead by the transport's writer.
    const receipt = receiptOf(logs.audit, shipped);
    const ahead = writeAhead(shipped);
    if (ahead instanceof Error) return unwritten(request, decision, shipped, receipt, ahead);
    const landing = shipper.written(ahead);
    if (landing === undefined) return written(request, decision, shipped, receipt, ahead);
    return landing.then(
      () => {
        if (!(decision.allow && request.signal?.aborted === true))
          return written(request, decision, shipped, receipt, ahead);
        // The transport stopped waiting during the write and answered 503: that is the record's last line.
        const refused = refusedDecision(shipped, "upstream_unavailable");
        const outcome = writeAhead(refused);
        shipper.push(refused, [ahead, outcome instanceof Error ? undefined : outcome]);
        return receipted(decision, receipt);
      },
      (error: unknown) =>
        unwritten(
          request,
          decision,
          shipped,
          receipt,
          error instanceof Error ? error : new Error("journal write failed"),
        ),
    );
  };
  /** The record is in the journal: queued now, or (a proxy allow) once its outcome is known. */
  const written = (
    request: SidecarRequest,
    decision: SidecarDecision,
    shipped: ShippedDecision,
    receipt: string,
    ahead: RecordTicket | undefined,
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
      return { ...receipted(decision, receipt), settle };
    }
    shipper.push(shipped, [ahead]);
    return receipted(decision, receipt);
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
