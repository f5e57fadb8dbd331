import {
  type AssignmentRecord,
  type BindingChangeAuditRecord,
  collections,
  logs,
  type PolicyChangeAuditRecord,
  storeKeys,
} from "../store/model.ts";
import type { StoreWrite } from "../store/store.ts";
import type { Actor, AdminDeps } from "./deps.ts";

/** Where an admin change's record goes: the replica's admin chain when there is one, else a plain append. */
export type AuditDeps = Pick<AdminDeps, "store" | "adminChain">;

/** The record, stored with `writes` in one transaction: chained when the process has an admin chain. */
export async function appendChange(
  deps: AuditDeps,
  record: object,
  writes: readonly StoreWrite[] = [],
): Promise<void> {
  if (deps.adminChain !== undefined) return deps.adminChain.append(record, writes);
  await deps.store.writeAll([...writes, { op: "append", log: logs.audit, value: record }]);
}

export interface PolicyChange {
  readonly action: PolicyChangeAuditRecord["action"];
  readonly partnerId: string;
  readonly subjectId: string;
  readonly capabilityId: string | null;
}

/** Appends one admin policy-change record to the shared `audit` log. */
export async function recordPolicyChange(
  deps: AuditDeps,
  actor: Actor,
  change: PolicyChange,
  now: Date,
): Promise<void> {
  await appendChange(deps, policyChangeRecord(actor, change, now));
}

/**
 * Stores (or, with `null`, removes) one assignment and appends its audit record in one
 * transaction (Store.writeAll): there is never an assignment without its record, nor a
 * record of a change that was not stored.
 */
export async function writeAssignmentChange(
  deps: AuditDeps,
  actor: Actor,
  change: PolicyChange & { readonly capabilityId: string },
  assignment: AssignmentRecord | null,
  now: Date,
  collection: typeof collections.assignments | typeof collections.shadowAssignments = collections.assignments,
): Promise<void> {
  const id = storeKeys.assignment(change.partnerId, change.subjectId, change.capabilityId);
  await appendChange(deps, policyChangeRecord(actor, change, now), [
    assignment === null ? { op: "delete", collection, id } : { op: "put", collection, id, value: assignment },
  ]);
}

export function policyChangeRecord(actor: Actor, change: PolicyChange, now: Date): PolicyChangeAuditRecord {
  return {
    kind: "policy_change",
    action: change.action,
    actor: actor.subject,
    partner_id: change.partnerId,
    subject_id: change.subjectId,
    capability_id: change.capabilityId,
    time: now.toISOString(),
    requestId: actor.requestId,
  };
}

/** Appends one binding-change record (experience writes) to the shared `audit` log. */
export async function recordBindingChange(
  deps: AuditDeps,
  record: Omit<BindingChangeAuditRecord, "kind">,
): Promise<void> {
  const row: BindingChangeAuditRecord = { kind: "binding_change", ...record };
  await appendChange(deps, row);
}
