/**
 * What-if replay (docs/decisions/2685-explainable-denials-and-what-if-replay.md): the recorded
 * decisions of one subject and capability, decided again by the same decision stage against a
 * proposed policy document, before it is signed or stored. Pure: no store, no credential, no
 * upstream. It compares the decision stage only — a record that the decision allowed and a
 * later stage refused (input, constraints, upstream) counts as the decision's allow; a record
 * with no decision at all (no subject, an outage) is skipped and counted by its reason.
 */
import type { DecisionAuditRecord } from "../audit/records.ts";
import type { Capability } from "../core/capability.ts";
import type { ExternalSubjectContext } from "../core/decision.ts";
import { POLICY_SCHEMA_V2, type PolicyDocument } from "../core/policy-document.ts";
import { type DenyReason, explainDeny, isDenyReason } from "../errors.ts";
import { decideStage } from "./decision.ts";

/** Reasons a decision stage gives after it found the subject and capability: their records replay. */
const REPLAYED_DENIALS: ReadonlySet<DenyReason> = new Set([
  "missing_policy",
  "policy_verification_failed",
  "subject_mismatch",
  "policy_revoked",
  "policy_expired",
  "unknown_operation",
  "operation_not_allowed",
  "ambiguous_path",
]);

/** Later refusals: the decision allowed these requests. */
const AFTER_THE_DECISION: ReadonlySet<string> = new Set([
  "invalid_input",
  "constraint_violation",
  "request_body_required",
  "egress_denied",
  "user_grant_required",
  "upstream_error",
  "upstream_timeout",
  "redaction_failed",
  "scrub_failed",
]);

export type ReplayOutcome = "allowed" | "denied";

export interface ReplayExample {
  readonly requestId: string;
  readonly time: string;
  readonly transport: string;
  readonly method: string;
  readonly path: string;
  readonly recorded: { readonly decision: ReplayOutcome; readonly reason: string | null };
  readonly replayed: {
    readonly decision: ReplayOutcome;
    readonly reason: string | null;
    readonly rule?: string;
  };
}

export interface ReplayFlips {
  readonly count: number;
  /** The first few, in record order. */
  readonly examples: readonly ReplayExample[];
}

export interface ReplayReport {
  readonly replayed: number;
  readonly unchanged: number;
  readonly allow_to_deny: ReplayFlips;
  readonly deny_to_allow: ReplayFlips;
  /** Records without a decision to compare (no subject, an outage, no method or path), by reason. */
  readonly skipped: Readonly<Record<string, number>>;
}

export interface ReplayInput {
  readonly records: Iterable<DecisionAuditRecord>;
  readonly subjectId: string;
  readonly capability: Capability;
  /** The proposed policy document (unsigned: it is the one under review). */
  readonly proposed: PolicyDocument;
  readonly constraintsEnforced: boolean;
  /** Most examples per direction (default 5). */
  readonly examples?: number;
}

/** The decision stage's outcome a record shows, or why it has none. */
function recordedOutcome(record: DecisionAuditRecord): ReplayOutcome | { readonly skip: string } {
  if (record.method === null || record.path === null) return { skip: "no_request" };
  if (record.decision === "allowed") return "allowed";
  const reason = record.reason ?? "unknown";
  if (isDenyReason(reason) && REPLAYED_DENIALS.has(reason)) return "denied";
  if (AFTER_THE_DECISION.has(reason) && record.permission_id !== null) return "allowed";
  return { skip: reason };
}

/** The v2 context a document binds (a document under review or explanation stands for itself). */
export function documentContext(doc: PolicyDocument): ExternalSubjectContext | undefined {
  if (doc.schema_version !== POLICY_SCHEMA_V2) return undefined;
  return {
    partnerId: doc.authority_partner_id,
    bindingId: doc.binding_id,
    issuerHash: doc.issuer_hash,
    externalSubjectHash: doc.external_subject_hash,
    mappingVersion: doc.mapping_version,
  };
}

/** A record's path is the operation's template on the template paths (MCP always; others say so since 2685). */
function pathIsTemplate(record: DecisionAuditRecord): boolean {
  return record.path_is_template === true || record.transport === "mcp";
}

/** A replay fed record by record (a caller reading pages yields between them), then reported. */
export interface Replayer {
  add(record: DecisionAuditRecord): void;
  report(): ReplayReport;
}

export function createReplayer(input: Omit<ReplayInput, "records">): Replayer {
  const most = input.examples ?? 5;
  const expectedContext = documentContext(input.proposed);
  const flips = { allow_to_deny: [] as ReplayExample[], deny_to_allow: [] as ReplayExample[] };
  const counts = { allow_to_deny: 0, deny_to_allow: 0, replayed: 0, unchanged: 0 };
  const skipped: Record<string, number> = {};
  const add = (record: DecisionAuditRecord): void => {
    const recorded = recordedOutcome(record);
    if (typeof recorded !== "string") {
      skipped[recorded.skip] = (skipped[recorded.skip] ?? 0) + 1;
      return;
    }
    const decision = decideStage({
      subjectId: input.subjectId,
      capabilityId: input.capability.capability_id,
      capability: input.capability,
      policy: { ok: true, document: input.proposed },
      method: record.method ?? "",
      path: record.path ?? "",
      pathIsTemplate: pathIsTemplate(record),
      now: new Date(record.time),
      constraintsEnforced: input.constraintsEnforced,
      ...(expectedContext === undefined ? {} : { expectedContext }),
    });
    counts.replayed++;
    if (decision.status === recorded) {
      counts.unchanged++;
      return;
    }
    const direction = recorded === "allowed" ? "allow_to_deny" : "deny_to_allow";
    counts[direction]++;
    if (flips[direction].length >= most) return;
    flips[direction].push({
      requestId: record.requestId,
      time: record.time,
      transport: record.transport,
      method: record.method ?? "",
      path: record.path ?? "",
      recorded: { decision: record.decision, reason: record.reason },
      replayed:
        decision.status === "allowed"
          ? { decision: "allowed", reason: null }
          : {
              decision: "denied",
              reason: decision.reason,
              rule: explainDeny(decision.reason, decision.explanation).rule,
            },
    });
  };
  const report = (): ReplayReport => ({
    replayed: counts.replayed,
    unchanged: counts.unchanged,
    allow_to_deny: { count: counts.allow_to_deny, examples: [...flips.allow_to_deny] },
    deny_to_allow: { count: counts.deny_to_allow, examples: [...flips.deny_to_allow] },
    skipped: { ...skipped },
  });
  return { add, report };
}

export function replayDecisions(input: ReplayInput): ReplayReport {
  const replayer = createReplayer(input);
  for (const record of input.records) replayer.add(record);
  return replayer.report();
}
