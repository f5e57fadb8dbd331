/**
 * The recorder every runtime path uses: one decision → exactly one `decision` record in
 * log `audit` and one count in each usage view (see usage.ts); MCP tool calls → one row
 * in `mcp_audit`; binding invokes → one `evidence` record. All writes go through the
 * buffered writer (writer.ts): an outage delays them, never loses them within the bound.
 */
import { logs } from "../store/model.ts";
import type { Store } from "../store/store.ts";
import { type EvidenceInput, evidenceRecord, type McpCallInput, mcpAuditRecord } from "./mcp-records.ts";
import { type DecisionAuditRecord, type DecisionInput, decisionRecord } from "./records.ts";
import { USAGE_COUNTERS, usageKeysFor } from "./usage.ts";
import {
  type AuditWriter,
  type AuditWriterOptions,
  type AuditWriterStats,
  createAuditWriter,
} from "./writer.ts";

export interface AuditRecorderOptions extends AuditWriterOptions {
  /** Size limit of MCP request/response representations (default 4096 characters). */
  readonly reprLimit?: number;
}

export interface RecordOptions {
  /**
   * The sidecar that shipped the record exported it itself (its batch said so): the
   * authority's decision-log export skips it, so each record is exported once (decision 2797).
   */
  readonly exported?: boolean;
}

export interface AuditRecorder {
  /**
   * Records one decision. Resolves once stored (or safely queued during an outage);
   * rejects with AuditBufferFullError / AuditClosedError (`upstream_unavailable`) when it
   * cannot be kept — the caller must then not act on the decision (answer a 503 deny).
   */
  record(input: DecisionInput, id?: string, options?: RecordOptions): Promise<DecisionAuditRecord>;
  recordMcpCall(input: McpCallInput): Promise<void>;
  recordEvidence(input: EvidenceInput): Promise<void>;
  /** How many more records would be accepted now, out of `capacity`. */
  room(): number;
  readonly capacity: number;
  /** False when a record would be refused now (buffer full or closing). */
  accepting(): boolean;
  pending(): number;
  dropped(): number;
  lost(): number;
  stats(): AuditWriterStats;
  flush(timeoutMs?: number): Promise<boolean>;
  close(timeoutMs?: number): Promise<{ flushed: boolean; lost: number }>;
}

function isStore(value: Store | AuditRecorderOptions): value is Store {
  return typeof (value as Partial<Store>).append === "function";
}

/** `createAuditRecorder(store)` or `createAuditRecorder({ store, maxPending, … })`. */
export function createAuditRecorder(storeOrOptions: Store | AuditRecorderOptions): AuditRecorder {
  const options: AuditRecorderOptions = isStore(storeOrOptions) ? { store: storeOrOptions } : storeOrOptions;
  const writer: AuditWriter = createAuditWriter(options);
  const reprLimit = options.reprLimit;
  if (reprLimit !== undefined && (!Number.isSafeInteger(reprLimit) || reprLimit < 16)) {
    throw new TypeError("reprLimit must be an integer of at least 16");
  }
  return {
    async record(input, id) {
      // An undefined id takes decisionRecord's default (a fresh one).
      const record = decisionRecord(input, id);
      const time = new Date(record.time);
      const keys = Number.isNaN(time.getTime())
        ? []
        : usageKeysFor(time, {
            partner_id: record.partner_id,
            subject_id: record.subject_id,
            capability_id: record.capability_id,
            permission_id: record.permission_id,
            state: record.decision,
          });
      await writer.write({
        log: { name: logs.audit, value: record },
        counts: keys.map((key) => ({ counters: USAGE_COUNTERS, key })),
      });
      return record;
    },
    // Queued after the answer (nobody waits): stored with the next decision record.
    recordMcpCall: (input) =>
      writer.write({ log: { name: logs.mcpAudit, value: mcpAuditRecord(input, reprLimit) }, deferred: true }),
    recordEvidence: (input) =>
      writer.write({ log: { name: logs.evidence, value: evidenceRecord(input) }, deferred: true }),
    accepting: writer.accepting,
    room: writer.room,
    capacity: writer.capacity,
    pending: writer.pending,
    dropped: writer.dropped,
    lost: writer.lost,
    stats: writer.stats,
    flush: writer.flush,
    close: writer.close,
  };
}

/** The name the runtime paths know it by. */
export const createDecisionRecorder = createAuditRecorder;
