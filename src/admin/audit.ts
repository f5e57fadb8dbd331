import { type BindingChangeAuditRecord, logs, type PolicyChangeAuditRecord } from "../store/model.ts";
import type { Store } from "../store/store.ts";
import type { Actor } from "./deps.ts";

export interface PolicyChange {
  readonly action: PolicyChangeAuditRecord["action"];
  readonly partnerId: string;
  readonly subjectId: string;
  readonly capabilityId: string | null;
}

/** Appends one admin policy-change record to the shared `audit` log. */
export async function recordPolicyChange(
  store: Store,
  actor: Actor,
  change: PolicyChange,
  now: Date,
): Promise<void> {
  const record: PolicyChangeAuditRecord = {
    kind: "policy_change",
    action: change.action,
    actor: actor.subject,
    partner_id: change.partnerId,
    subject_id: change.subjectId,
    capability_id: change.capabilityId,
    time: now.toISOString(),
    requestId: actor.requestId,
  };
  await store.append(logs.audit, record);
}

/** Appends one binding-change record (experience writes) to the shared `audit` log. */
export async function recordBindingChange(
  store: Store,
  record: Omit<BindingChangeAuditRecord, "kind">,
): Promise<void> {
  const row: BindingChangeAuditRecord = { kind: "binding_change", ...record };
  await store.append(logs.audit, row);
}
