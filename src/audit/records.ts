/**
 * The records written to the audit logs (pure: shapes and builders, no I/O).
 *
 * Log `audit` holds two kinds: `decision` (every runtime allow or deny, written here) and
 * `policy_change` (written by the admin API). Log `mcp_audit` holds `mcp_call` rows, log
 * `evidence` the binding-invoke evidence. Every record carries a random `id`: writes are
 * retried after a store failure, and a write whose reply was lost may land twice — the
 * id tells such a twin apart from a second decision.
 */
import { randomUUID } from "node:crypto";
import type { ErrorCode } from "../errors.ts";
import type { PolicyChangeAuditRecord } from "../store/model.ts";

export type { PolicyChangeAuditRecord };

export const transports = ["http", "mcp", "invoke", "broker", "grpc", "proxy"] as const;
export type Transport = (typeof transports)[number];

export type DecisionOutcome = "allowed" | "denied";

/** What the subject's shadow policy decided beside the enforced decision (decision 2761). */
export interface ShadowNote {
  /** `invalid`: the shadow policy failed verification and was not evaluated. */
  readonly decision: "allowed" | "denied" | "invalid";
  readonly reason: ErrorCode | null;
  /** Same outcome, permission and reason as the enforced policy (a log-only allow compared as its deny). */
  readonly agrees: boolean;
}

/** An allow made by the capability's log-only mode: the deny the enforced policy gave. */
export interface LogOnlyNote {
  readonly reason: ErrorCode;
}

const shadowDecisions: ReadonlySet<string> = new Set(["allowed", "denied", "invalid"]);

/** The notes as they may be stored: only the known shapes, never a caller's free text. */
function notesOf(input: Pick<DecisionInput, "shadow" | "log_only" | "decision">): {
  shadow?: ShadowNote;
  log_only?: LogOnlyNote;
} {
  const notes: { shadow?: ShadowNote; log_only?: LogOnlyNote } = {};
  const shadow = input.shadow;
  if (shadow !== undefined && shadowDecisions.has(shadow.decision)) {
    notes.shadow = {
      decision: shadow.decision,
      reason: shadow.decision === "allowed" ? null : boundedText(shadow.reason, 64),
      agrees: shadow.agrees === true,
    } as ShadowNote;
  }
  if (input.log_only !== undefined && input.decision === "allowed")
    notes.log_only = { reason: boundedText(input.log_only.reason, 64) } as LogOnlyNote;
  return notes;
}

/** What a runtime path tells the recorder about one decision. */
export interface DecisionInput {
  /** Who called (token subject or workload client); null when nobody authenticated. */
  readonly actor: string | null;
  /** The subject the decision is about. */
  readonly subject_id: string | null;
  readonly partner_id: string | null;
  readonly capability_id: string | null;
  readonly method: string | null;
  /** The request path; stored without query or fragment and bounded in length. */
  readonly path: string | null;
  /** The path is the operation's template (invoke by template, broker, MCP): what-if replay decides it as such. */
  readonly path_is_template?: boolean;
  readonly permission_id?: string | null;
  readonly decision: DecisionOutcome;
  /** One of the spec's deny reasons; the sidecar also records its transport codes (e.g. invalid_token). */
  readonly reason?: ErrorCode | null;
  readonly transport: Transport;
  readonly requestId: string;
  readonly time: Date | string;
  /** The shadow policy's outcome, when the subject has one for the capability. */
  readonly shadow?: ShadowNote;
  /** Present on an allow the capability's log-only mode made of a deny. */
  readonly log_only?: LogOnlyNote;
  /**
   * Set by the authority only: the id a sidecar shipped this record with, when another
   * sidecar's record held that id already (the record is stored under a new id, never dropped).
   */
  readonly shipped_id?: string;
}

export interface DecisionAuditRecord {
  readonly kind: "decision";
  readonly id: string;
  readonly actor: string | null;
  readonly subject_id: string | null;
  readonly partner_id: string | null;
  readonly capability_id: string | null;
  readonly method: string | null;
  readonly path: string | null;
  /** Present (true) on records of a template path, written since decision 2685. */
  readonly path_is_template?: true;
  readonly permission_id: string | null;
  readonly decision: DecisionOutcome;
  readonly reason: ErrorCode | null;
  readonly transport: Transport;
  readonly requestId: string;
  readonly time: string;
  readonly shadow?: ShadowNote;
  readonly log_only?: LogOnlyNote;
  readonly shipped_id?: string;
}

export type AuditRecord = DecisionAuditRecord | PolicyChangeAuditRecord;

/** Longest string field kept in a record; longer values are cut and end with "…". */
export const MAX_FIELD_CHARS = 1024;

export function boundedText(value: string | null | undefined, max = MAX_FIELD_CHARS): string | null {
  if (value === undefined || value === null) return null;
  if (value.length <= max) return value;
  // Cut on a code-point boundary so the stored text stays well-formed.
  const cut = Array.from(value.slice(0, max)).slice(0, -1).join("");
  return `${cut}…`;
}

/** A path as it may be stored: no query string or fragment (they can carry secrets), bounded. */
export function auditPath(path: string | null | undefined): string | null {
  if (path === undefined || path === null) return null;
  const end = path.search(/[?#]/);
  return boundedText(end === -1 ? path : path.slice(0, end));
}

function isoTime(time: Date | string): string {
  return typeof time === "string" ? time : time.toISOString();
}

export function newRecordId(prefix: string): string {
  return `${prefix}_${randomUUID()}`;
}

export function decisionRecord(input: DecisionInput, id = newRecordId("dec")): DecisionAuditRecord {
  return {
    kind: "decision",
    id,
    actor: boundedText(input.actor),
    subject_id: boundedText(input.subject_id),
    partner_id: boundedText(input.partner_id),
    capability_id: boundedText(input.capability_id),
    method: boundedText(input.method, 16),
    path: auditPath(input.path),
    ...(input.path_is_template === true ? { path_is_template: true as const } : {}),
    permission_id: boundedText(input.permission_id ?? null, 2048),
    decision: input.decision,
    reason: input.decision === "denied" ? (input.reason ?? null) : null,
    transport: input.transport,
    requestId: input.requestId,
    time: isoTime(input.time),
    ...notesOf(input),
    ...(input.shipped_id === undefined ? {} : { shipped_id: input.shipped_id }),
  };
}
