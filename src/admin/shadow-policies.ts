/**
 * Shadow policies (decision 2761): an assignment (subject × capability) may carry a shadow
 * next to the enforced one. The subject's shadow assignments compile into one shadow policy
 * document, signed and protected exactly like the enforced policy (same protector, same
 * custody mode) and stored in `shadow_policies`; every decision evaluates it beside the
 * enforced policy and only records the outcome. Promoting makes a shadow the enforced
 * assignment in one recorded change.
 */
import { AuthorityError } from "../errors.ts";
import type { HeadlessContext } from "../policy/compile.ts";
import { type PublicPolicyRecord, toPublicPolicyRecord } from "../policy/record.ts";
import { deletePolicyRecord, readPolicyRecord } from "../policy/record-store.ts";
import { type AssignmentRecord, collections, type SubjectRecord, storeKeys } from "../store/model.ts";
import { appendChange, policyChangeRecord, writeAssignmentChange } from "./audit.ts";
import type { Actor, AdminDeps } from "./deps.ts";
import { withKeyLock } from "./key-lock.ts";
import { getPartner } from "./partners.ts";
import {
  type AssignInput,
  checkedAssignment,
  managedSubject,
  readAssignment,
  recheckAssignment,
} from "./policies.ts";
import {
  type AssignmentReplay,
  type ReplayDeps,
  type ReplayWindowInput,
  replayAssignment,
} from "./policy-replay.ts";
import {
  hasActivePolicy,
  listAssignments,
  notifyPolicyChange,
  policyLockKey,
  writeCompiledPolicy,
} from "./policy-writer.ts";
import { scanAll } from "./store-scan.ts";
import { getSubject } from "./subjects.ts";

export interface ShadowOutcome {
  /** The subject's shadow policy after the change (public facts only); null when none is left. */
  readonly shadow_policy: PublicPolicyRecord | null;
  readonly assignment?: AssignmentRecord;
}

export interface PromoteOutcome {
  readonly policy: PublicPolicyRecord;
  readonly assignment: AssignmentRecord;
  readonly shadow_policy: PublicPolicyRecord | null;
}

async function listShadowAssignments(deps: Pick<AdminDeps, "store">, partnerId: string, subjectId: string) {
  const items = await scanAll<AssignmentRecord>(
    deps.store,
    collections.shadowAssignments,
    `${partnerId}/${subjectId}/`,
  );
  return items.map((item) => item.value);
}

/**
 * Recompiles and signs the subject's shadow policy from its shadow assignments (none: removed);
 * a headless subject's under its binding's context, like its enforced policy.
 */
async function writeShadowPolicy(
  deps: AdminDeps,
  subject: SubjectRecord,
  shadows: readonly AssignmentRecord[],
  headless?: HeadlessContext,
): Promise<PublicPolicyRecord | null> {
  if (shadows.length === 0) {
    await deletePolicyRecord(deps.store, subject.subject_id, collections.shadowPolicies);
    return null;
  }
  const record = await writeCompiledPolicy(
    deps,
    subject,
    shadows,
    null,
    headless,
    collections.shadowPolicies,
  );
  return toPublicPolicyRecord(record, deps.now());
}

/**
 * Puts one capability's shadow of the subject and recompiles its shadow policy (a headless
 * subject's under its binding's context), with its `shadow_assign` record.
 */
export async function putShadow(
  deps: AdminDeps,
  actor: Actor,
  subject: SubjectRecord,
  assignment: AssignmentRecord,
  headless?: HeadlessContext,
): Promise<PublicPolicyRecord | null> {
  const { partner_id: partnerId, subject_id: subjectId } = subject;
  const capabilityId = assignment.capability_id;
  return withKeyLock(policyLockKey(partnerId, subjectId), async () => {
    const others = (await listShadowAssignments(deps, partnerId, subjectId)).filter(
      (a) => a.capability_id !== capabilityId,
    );
    const written = await writeShadowPolicy(deps, subject, [...others, assignment], headless);
    await writeAssignmentChange(
      deps,
      actor,
      { action: "shadow_assign", partnerId, subjectId, capabilityId },
      assignment,
      deps.now(),
      collections.shadowAssignments,
    );
    return written;
  });
}

/** Removes one capability's shadow of the subject (not_found without one), with its `shadow_unassign` record. */
export async function dropShadow(
  deps: AdminDeps,
  actor: Actor,
  subject: SubjectRecord,
  capabilityId: string,
  headless?: HeadlessContext,
): Promise<PublicPolicyRecord | null> {
  const { partner_id: partnerId, subject_id: subjectId } = subject;
  return withKeyLock(policyLockKey(partnerId, subjectId), async () => {
    const shadows = await listShadowAssignments(deps, partnerId, subjectId);
    if (!shadows.some((a) => a.capability_id === capabilityId))
      throw new AuthorityError("not_found", "The subject has no shadow assignment of this capability.");
    const written = await writeShadowPolicy(
      deps,
      subject,
      shadows.filter((a) => a.capability_id !== capabilityId),
      headless,
    );
    await writeAssignmentChange(
      deps,
      actor,
      { action: "shadow_unassign", partnerId, subjectId, capabilityId },
      null,
      deps.now(),
      collections.shadowAssignments,
    );
    return written;
  });
}

/** Sets (or replaces) the shadow of one assignment; checked exactly like an assignment. */
export async function setShadowAssignment(
  deps: AdminDeps,
  actor: Actor,
  partnerId: string,
  subjectId: string,
  capabilityId: string,
  input: AssignInput,
): Promise<ShadowOutcome> {
  const { subject, assignment } = await checkedAssignment(
    deps,
    actor,
    partnerId,
    subjectId,
    capabilityId,
    input,
  );
  const shadowPolicy = await putShadow(deps, actor, subject, assignment);
  return { shadow_policy: shadowPolicy, assignment };
}

export function getShadowAssignment(
  deps: Pick<AdminDeps, "store">,
  partnerId: string,
  subjectId: string,
  capabilityId: string,
): Promise<AssignmentRecord> {
  return readAssignment(deps, collections.shadowAssignments, partnerId, subjectId, capabilityId);
}

/** The subject's shadow policy record (public facts only). */
export async function getShadowPolicy(
  deps: Pick<AdminDeps, "store" | "now">,
  partnerId: string,
  subjectId: string,
): Promise<PublicPolicyRecord> {
  await getPartner(deps, partnerId);
  await getSubject(deps, partnerId, subjectId);
  const record = await readPolicyRecord(deps.store, subjectId, collections.shadowPolicies);
  if (record === undefined || record.partner_id !== partnerId)
    throw new AuthorityError("not_found", "The subject has no shadow policy.");
  return toPublicPolicyRecord(record, deps.now());
}

export async function removeShadowAssignment(
  deps: AdminDeps,
  actor: Actor,
  partnerId: string,
  subjectId: string,
  capabilityId: string,
): Promise<ShadowOutcome> {
  const subject = await managedSubject(deps, partnerId, subjectId);
  const shadowPolicy = await dropShadow(deps, actor, subject, capabilityId);
  return { shadow_policy: shadowPolicy };
}

/**
 * Promotes the shadow of one assignment to enforced, in one action: the shadow assignment
 * (its reviewed snapshots, checked again against today's boundary and auth profiles)
 * replaces the enforced one, the enforced policy is recompiled and signed, the shadow is
 * removed, and one `promote_shadow` record is written in the same transaction.
 */
export async function promoteShadow(
  deps: AdminDeps,
  actor: Actor,
  partnerId: string,
  subjectId: string,
  capabilityId: string,
): Promise<PromoteOutcome> {
  return promoteShadowOf(deps, actor, await managedSubject(deps, partnerId, subjectId), capabilityId);
}

/**
 * The promotion of `subject`'s shadow of one capability (a headless subject's under its
 * binding's context, its binding API having checked the mapping: decision 2921).
 */
export async function promoteShadowOf(
  deps: AdminDeps,
  actor: Actor,
  subject: SubjectRecord,
  capabilityId: string,
  headless?: HeadlessContext,
): Promise<PromoteOutcome> {
  const { partner_id: partnerId, subject_id: subjectId } = subject;
  const id = storeKeys.assignment(partnerId, subjectId, capabilityId);
  const outcome = await withKeyLock(policyLockKey(partnerId, subjectId), async () => {
    const shadows = await listShadowAssignments(deps, partnerId, subjectId);
    const shadow = shadows.find((a) => a.capability_id === capabilityId);
    if (shadow === undefined)
      throw new AuthorityError("not_found", "The subject has no shadow assignment of this capability.");
    await recheckAssignment(deps, subject, shadow);
    const now = deps.now();
    const promoted: AssignmentRecord = {
      ...shadow,
      assigned_by: actor.subject,
      assigned_at: now.toISOString(),
    };
    const others = (await listAssignments(deps, partnerId, subjectId)).filter(
      (a) => a.capability_id !== capabilityId,
    );
    const narrows = await hasActivePolicy(deps, subjectId);
    const written = await writeCompiledPolicy(deps, subject, [...others, promoted], null, headless);
    await appendChange(
      deps,
      policyChangeRecord(actor, { action: "promote_shadow", partnerId, subjectId, capabilityId }, now),
      [
        { op: "put", collection: collections.assignments, id, value: promoted },
        { op: "delete", collection: collections.shadowAssignments, id },
      ],
    );
    const shadowPolicy = await writeShadowPolicy(
      deps,
      subject,
      shadows.filter((a) => a.capability_id !== capabilityId),
      headless,
    );
    return { written, narrows, promoted, shadowPolicy };
  });
  await notifyPolicyChange(deps, outcome.written, { narrows: outcome.narrows });
  return {
    policy: toPublicPolicyRecord(outcome.written, deps.now()),
    assignment: outcome.promoted,
    shadow_policy: outcome.shadowPolicy,
  };
}

/** Removes a subject's shadow assignments and shadow policy (the subject is being deleted). */
export async function removeShadows(deps: AdminDeps, subject: SubjectRecord): Promise<void> {
  const { partner_id: partnerId, subject_id: subjectId } = subject;
  await withKeyLock(policyLockKey(partnerId, subjectId), async () => {
    for (const shadow of await listShadowAssignments(deps, partnerId, subjectId))
      await deps.store.delete(
        collections.shadowAssignments,
        storeKeys.assignment(partnerId, subjectId, shadow.capability_id),
      );
    const record = await readPolicyRecord(deps.store, subjectId, collections.shadowPolicies);
    if (record?.partner_id === partnerId)
      await deletePolicyRecord(deps.store, subjectId, collections.shadowPolicies);
  });
}

/**
 * The policy view's what-if (decision 2921): each of the subject's shadow assignments replayed
 * as the proposed change over the subject's recorded decisions on its capability — what
 * promoting it would flip. Nothing is written; one replay after another, in the caller's slot.
 */
export async function replayShadows(
  deps: ReplayDeps,
  partnerId: string,
  subjectId: string,
  window: ReplayWindowInput,
): Promise<AssignmentReplay[]> {
  await getPartner(deps, partnerId);
  const subject = await getSubject(deps, partnerId, subjectId);
  const reports: AssignmentReplay[] = [];
  for (const shadow of await listShadowAssignments(deps, partnerId, subject.subject_id))
    reports.push(await replayAssignment(deps, subject, shadow, window));
  return reports;
}
