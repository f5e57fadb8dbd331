import type { OperationSnapshot } from "../core/operation-snapshot.ts";
import {
  type PolicyCapabilitySummary,
  type PublicPolicyRecord,
  toPublicPolicyRecord,
} from "../policy/record.ts";
import { readStoredPolicyRecord } from "../policy/record-store.ts";
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

/** A subject's policy as admins read it: with its shadow policy, when it has one (decision 2761). */
export type WithShadow<P> = P & {
  /** The subject's shadow policy (public facts only: never the artifact); absent when none. */
  readonly shadow_policy?: PublicPolicyRecord;
};

/** The admin policies view: the public record, each capability with its snapshots, and the shadow. */
export type PolicyView = WithShadow<
  Omit<PublicPolicyRecord, "capabilities"> & {
    readonly capabilities: readonly PolicyCapabilityView[];
  }
>;

/** Adds the subject's shadow policy record (read without its artifact) to what an admin reads. */
export async function withShadowPolicy<
  P extends { readonly subject_id: string; readonly partner_id: string },
>(deps: Pick<AdminDeps, "store">, policy: P, now: Date): Promise<WithShadow<P>> {
  const shadow = await readStoredPolicyRecord(deps.store, policy.subject_id, collections.shadowPolicies);
  return shadow === undefined || shadow.partner_id !== policy.partner_id
    ? policy
    : { ...policy, shadow_policy: toPublicPolicyRecord(shadow, now) };
}

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
  now: Date,
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
  return withShadowPolicy(deps, { ...record, capabilities }, now);
}
