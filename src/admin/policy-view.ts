import type { OperationSnapshot } from "../core/operation-snapshot.ts";
import type { PolicyCapabilitySummary, PublicPolicyRecord } from "../policy/record.ts";
import { type AssignmentRecord, collections, storeKeys } from "../store/model.ts";
import type { AdminDeps } from "./deps.ts";

/** Snapshots shown inline per capability; the assignment (linked) holds all of them. */
export const POLICY_VIEW_SNAPSHOT_LIMIT = 25;

export interface PolicyCapabilityView extends PolicyCapabilitySummary {
  /** The reviewed operation snapshots the policy enforces, at most POLICY_VIEW_SNAPSHOT_LIMIT. */
  readonly snapshots: readonly OperationSnapshot[];
  readonly snapshots_total: number;
  readonly snapshots_truncated: boolean;
  /** The assignment with every snapshot: `GET` it for the full set. */
  readonly assignment_href: string;
}

/** The admin policies view: the public record, each capability with its snapshots. */
export type PolicyView = Omit<PublicPolicyRecord, "capabilities"> & {
  readonly capabilities: readonly PolicyCapabilityView[];
};

function assignmentHref(partnerId: string, subjectId: string, capabilityId: string): string {
  const segment = encodeURIComponent;
  return `/partners/${segment(partnerId)}/caab/subjects/${segment(subjectId)}/policies/${segment(capabilityId)}`;
}

/**
 * Adds the operation snapshots to a policy record, from the assignment each capability was
 * compiled from (the same snapshots the signed document carries; the record itself keeps only
 * the allowlist, so listing policies does not open any artifact).
 */
export async function policyView(
  deps: Pick<AdminDeps, "store">,
  record: PublicPolicyRecord,
): Promise<PolicyView> {
  const capabilities = await Promise.all(
    record.capabilities.map(async (capability): Promise<PolicyCapabilityView> => {
      const assignment = await deps.store.get<AssignmentRecord>(
        collections.assignments,
        storeKeys.assignment(record.partner_id, record.subject_id, capability.capability_id),
      );
      const all = assignment?.operations ?? [];
      return {
        ...capability,
        snapshots: all.slice(0, POLICY_VIEW_SNAPSHOT_LIMIT),
        snapshots_total: all.length,
        snapshots_truncated: all.length > POLICY_VIEW_SNAPSHOT_LIMIT,
        assignment_href: assignmentHref(record.partner_id, record.subject_id, capability.capability_id),
      };
    }),
  );
  return { ...record, capabilities };
}
