import type { Store } from "../store/store.ts";
import type { Actor } from "./deps.ts";
import { logs, type PolicyChangeAuditRecord } from "./model.ts";

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
