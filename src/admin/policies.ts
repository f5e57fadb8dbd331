import { redactionRuleProblem } from "../catalog/extensions.ts";
import { buildPermissionId, type PermissionId, type RedactionRule } from "../core/index.ts";
import { AuthorityError } from "../errors.ts";
import { NO_AUTH_PROFILE_ID } from "../execute/auth-profiles.ts";
import type { HeadlessContext } from "../policy/compile.ts";
import { PolicyProtectionError } from "../policy/protector.ts";
import { type PolicyRecord, type PublicPolicyRecord, toPublicPolicyRecord } from "../policy/record.ts";
import { deletePolicyRecord } from "../policy/record-store.ts";
import {
  type AssignmentRecord,
  type AuthProfileRecord,
  type BoundaryRecord,
  collections,
  type PartnerSubjectIndexRecord,
  type SubjectRecord,
  storeKeys,
} from "../store/model.ts";
import { assignmentExpiry } from "./assignment-expiry.ts";
import { recordPolicyChange, writeAssignmentChange } from "./audit.ts";
import { checkBoundary } from "./boundary-check.ts";
import { assertPermissionsInCatalog, loadCatalog } from "./capabilities.ts";
import type { Actor, AdminDeps } from "./deps.ts";
import { withKeyLock } from "./key-lock.ts";
import { getPartner } from "./partners.ts";

export { MAX_POLICY_TTL_SECONDS } from "./assignment-expiry.ts";

import { type PolicyView, policyView, type WithShadow, withShadowPolicy } from "./policy-view.ts";
import {
  hasActivePolicy,
  listAssignments,
  loadPolicyRecord,
  notifyPolicyChange,
  notifyPolicyRemoved,
  policyLockKey,
  writeCompiledPolicy,
  writeRevocationMarker,
  writeRevokedPolicy,
} from "./policy-writer.ts";
import { type PageOf, type PageRequest, pageUnder } from "./store-scan.ts";
import { getSubject } from "./subjects.ts";

/** Longest lifetime an assignment may ask for, boundary or not. */

export interface AssignInput {
  readonly allowed_permission_ids: readonly string[];
  /** Permission id → rules; every key must be in allowed_permission_ids. */
  readonly response_redactions?: Readonly<Record<string, readonly RedactionRule[]>>;
  /** Exactly one of expires_at (ISO 8601) and ttl_seconds. */
  readonly expires_at?: string;
  readonly ttl_seconds?: number;
  /** Default: the capability's auth_profile_ref. */
  readonly auth_profile_ref?: string;
}

export interface AssignOutcome {
  readonly policy: PublicPolicyRecord;
  readonly assignment: AssignmentRecord;
  readonly warnings: readonly string[];
}

const lockKey = policyLockKey;

/** The subject, when its policy is managed here (v1); headless subjects go through bindings. */
export async function managedSubject(
  deps: AdminDeps,
  partnerId: string,
  subjectId: string,
): Promise<SubjectRecord> {
  await getPartner(deps, partnerId);
  const subject = await getSubject(deps, partnerId, subjectId);
  if (subject.crypto_version === "platform_service_v2") {
    throw new AuthorityError(
      "invalid_request",
      "This subject is headless (platform_service_v2): its policy is managed through its binding, not here.",
      { details: { subject_id: subjectId, crypto_version: subject.crypto_version } },
    );
  }
  return subject;
}

function checkRedactions(
  redactions: Readonly<Record<string, readonly RedactionRule[]>>,
  allowed: ReadonlySet<string>,
): void {
  const problems: string[] = [];
  const notAllowed: string[] = [];
  for (const [id, rules] of Object.entries(redactions)) {
    if (!allowed.has(id)) notAllowed.push(id);
    rules.forEach((rule, i) => {
      const problem = redactionRuleProblem(rule);
      if (problem !== undefined) problems.push(`/response_redactions/${id}/${i}: ${problem}`);
    });
  }
  if (notAllowed.length > 0 || problems.length > 0) {
    throw new AuthorityError("invalid_request", "response_redactions are invalid.", {
      details: {
        ...(notAllowed.length > 0 ? { not_in_allowed_permission_ids: notAllowed } : {}),
        ...(problems.length > 0 ? { problems } : {}),
      },
    });
  }
}

/** Refuses an assignment outside the subject's permission boundary (400, details list what). */
export async function checkSubjectBoundary(
  deps: AdminDeps,
  subject: SubjectRecord,
  capabilityId: string,
  permissionIds: readonly string[],
  ttlSeconds: number,
): Promise<void> {
  if (subject.boundary_id === null) return;
  const boundary = await deps.store.get<BoundaryRecord>(
    collections.boundaries,
    storeKeys.boundary(subject.partner_id, subject.boundary_id),
  );
  if (boundary === undefined) {
    // A boundary that cannot be read admits nothing.
    throw new AuthorityError("conflict", "The subject's permission boundary is missing.", {
      details: { boundary_id: subject.boundary_id },
    });
  }
  const violation = checkBoundary(boundary, { capabilityId, permissionIds, ttlSeconds });
  if (violation !== undefined) {
    throw new AuthorityError(
      "invalid_request",
      "The assignment is outside the subject's permission boundary.",
      {
        details: { ...violation },
      },
    );
  }
}

/**
 * The assignment's auth profile is what every allowed call injects: a missing one would turn
 * every allow into 503 `upstream_unavailable`, so the assignment is refused instead. `none`
 * (authorization only) needs no stored profile.
 */
async function checkAuthProfile(
  deps: AdminDeps,
  partnerId: string,
  assignment: AssignmentRecord,
): Promise<void> {
  const ref = assignment.auth_profile_ref;
  if (ref === NO_AUTH_PROFILE_ID) return;
  const found = await deps.store.get<AuthProfileRecord>(
    collections.authProfiles,
    storeKeys.authProfile(partnerId, ref),
  );
  if (found === undefined) {
    throw new AuthorityError(
      "invalid_request",
      `The auth profile ${JSON.stringify(ref)} is not defined for this partner: create it first, or assign with auth_profile_ref "${NO_AUTH_PROFILE_ID}" for authorization only.`,
      { details: { auth_profile_ref: ref } },
    );
  }
}

/**
 * The assignment an admin asks for, checked as every assignment is (catalog, redactions,
 * boundary, auth profile) and not stored: what assignCapability writes, a shadow is set to
 * (decision 2761) and an assignment's dry run replays.
 */
export async function checkedAssignment(
  deps: AdminDeps,
  actor: Actor,
  partnerId: string,
  subjectId: string,
  capabilityId: string,
  input: AssignInput,
): Promise<{ subject: SubjectRecord; assignment: AssignmentRecord }> {
  const subject = await managedSubject(deps, partnerId, subjectId);
  const loaded = await loadCatalog(deps.store, partnerId, capabilityId);
  if (loaded === undefined) throw new AuthorityError("not_found", "No such capability.");
  const now = deps.now();
  const expiresAt = assignmentExpiry(input, now);

  assertPermissionsInCatalog(loaded, input.allowed_permission_ids);
  const allowed = new Set(input.allowed_permission_ids);
  const redactions = input.response_redactions ?? {};
  checkRedactions(redactions, allowed);
  await checkSubjectBoundary(
    deps,
    subject,
    capabilityId,
    [...allowed],
    (expiresAt.getTime() - now.getTime()) / 1000,
  );

  const assignment: AssignmentRecord = {
    partner_id: partnerId,
    subject_id: subjectId,
    capability_id: capabilityId,
    catalog_version: loaded.version.catalog_version,
    allowed_permission_ids: [...allowed].sort() as PermissionId[],
    auth_profile_ref: input.auth_profile_ref ?? loaded.capability.auth_profile_ref,
    // The snapshots reviewed now; later imports never touch them.
    operations: loaded.version.operations.filter((op) =>
      allowed.has(buildPermissionId(capabilityId, op.method, op.path)),
    ),
    response_redactions: redactions,
    expires_at: expiresAt.toISOString(),
    assigned_by: actor.subject,
    assigned_at: now.toISOString(),
  };
  await checkAuthProfile(deps, partnerId, assignment);
  return { subject, assignment };
}

/** A stored assignment (a shadow being promoted) checked again against today's boundary and profiles. */
export async function recheckAssignment(
  deps: AdminDeps,
  subject: SubjectRecord,
  assignment: AssignmentRecord,
): Promise<void> {
  const ttlSeconds = (Date.parse(assignment.expires_at) - deps.now().getTime()) / 1000;
  if (!(ttlSeconds > 0))
    throw new AuthorityError(
      "conflict",
      "The shadow assignment has expired: set it again before promoting it.",
    );
  await checkSubjectBoundary(
    deps,
    subject,
    assignment.capability_id,
    assignment.allowed_permission_ids,
    ttlSeconds,
  );
  await checkAuthProfile(deps, subject.partner_id, assignment);
}

/**
 * Assigns (or replaces the assignment of) one capability to a subject and recompiles
 * the subject's single policy. Permission ids must exist in the capability's current
 * catalog; the policy copies exactly those operations' snapshots from that version.
 */
export async function assignCapability(
  deps: AdminDeps,
  actor: Actor,
  partnerId: string,
  subjectId: string,
  capabilityId: string,
  input: AssignInput,
): Promise<AssignOutcome> {
  const { subject, assignment } = await checkedAssignment(
    deps,
    actor,
    partnerId,
    subjectId,
    capabilityId,
    input,
  );
  const warnings: string[] = [];

  const { record, narrows } = await withKeyLock(lockKey(partnerId, subjectId), async () => {
    const others = (await listAssignments(deps, partnerId, subjectId)).filter(
      (a) => a.capability_id !== capabilityId,
    );
    const narrows = await hasActivePolicy(deps, subjectId);
    // A new grant issues a fresh, active policy (it lifts an earlier revocation).
    const written = await writeCompiledPolicy(deps, subject, [...others, assignment], null);
    // Stored after the policy, so a failed compile leaves no assignment that is not enforced;
    // with its audit record in one transaction.
    await writeAssignmentChange(
      deps,
      actor,
      { action: "assign", partnerId, subjectId, capabilityId },
      assignment,
      deps.now(),
    );
    return { record: written, narrows };
  });
  await notifyPolicyChange(deps, record, { narrows });
  return { policy: toPublicPolicyRecord(record, deps.now()), assignment, warnings };
}

/**
 * Removes one capability from the subject's policy and recompiles it. Removing the last
 * one leaves a revoked policy with no apis (not a deleted record), so every cache sees a
 * newer head that denies.
 */
export async function unassignCapability(
  deps: AdminDeps,
  actor: Actor,
  partnerId: string,
  subjectId: string,
  capabilityId: string,
): Promise<PublicPolicyRecord> {
  const subject = await managedSubject(deps, partnerId, subjectId);
  const record = await withKeyLock(lockKey(partnerId, subjectId), async () => {
    const previous = await loadPolicyRecord(deps, partnerId, subjectId);
    return dropAssignmentLocked(deps, actor, subject, capabilityId, {
      revokedAt: previous?.revoked_at ?? null,
    });
  });
  await notifyPolicyChange(deps, record, { narrows: true });
  return toPublicPolicyRecord(record, deps.now());
}

/**
 * Inside the subject's lock: removes one assignment and recompiles the policy from the rest
 * — revoked now when none is left, else with `revokedAt` — then records the change. Shared
 * by the admin API and the binding API (which passes the headless context).
 */
export async function dropAssignmentLocked(
  deps: AdminDeps,
  actor: Actor,
  subject: SubjectRecord,
  capabilityId: string,
  options: { readonly revokedAt: string | null; readonly headless?: HeadlessContext },
): Promise<PolicyRecord> {
  const { partner_id: partnerId, subject_id: subjectId } = subject;
  const assignments = await listAssignments(deps, partnerId, subjectId);
  if (!assignments.some((a) => a.capability_id === capabilityId)) {
    throw new AuthorityError("not_found", "The subject has no assignment of this capability.");
  }
  const remaining = assignments.filter((a) => a.capability_id !== capabilityId);
  const revokedAt = remaining.length === 0 ? deps.now().toISOString() : options.revokedAt;
  const written = await writeCompiledPolicy(deps, subject, remaining, revokedAt, options.headless);
  await writeAssignmentChange(
    deps,
    actor,
    { action: "unassign", partnerId, subjectId, capabilityId },
    null,
    deps.now(),
  );
  return written;
}

export interface RevokeOutcome {
  readonly policy: PolicyRecord | undefined;
  /** False when the policy was already revoked (nothing written). */
  readonly changed: boolean;
  /** The record removed instead of re-signed (its artifact no longer opened). */
  readonly removed?: PolicyRecord;
}

/**
 * Revokes a subject's policy: re-signs it with revoked_at set. v1 documents are
 * recompiled from the assignments (works even if an old artifact no longer opens); a v2
 * document is opened and re-signed, and when it cannot be opened its record is deleted
 * (the runtime then denies with missing_policy). When the crypto service is unavailable,
 * a deny-only revocation marker is written instead (writeRevocationMarker). Call inside
 * the subject's lock.
 */
async function revokeLocked(deps: AdminDeps, subject: SubjectRecord): Promise<RevokeOutcome> {
  const previous = await loadPolicyRecord(deps, subject.partner_id, subject.subject_id);
  if (previous === undefined) return { policy: undefined, changed: false };
  if (previous.revoked_at !== null) return { policy: previous, changed: false };
  try {
    return { policy: await resign(deps, subject, previous), changed: true };
  } catch (error) {
    if (!(error instanceof PolicyProtectionError)) throw error;
    // The crypto service is down: revoke now with a deny-only marker rather than not at all.
    if (error.code === "policy_protection_unavailable") {
      return { policy: await writeRevocationMarker(deps, previous), changed: true };
    }
    await deletePolicyRecord(deps.store, subject.subject_id);
    return { policy: undefined, changed: true, removed: previous };
  }
}

/** The revoked policy, signed: v1 recompiled from the assignments, v2 opened and re-signed. */
async function resign(
  deps: AdminDeps,
  subject: SubjectRecord,
  previous: PolicyRecord,
): Promise<PolicyRecord> {
  if (previous.crypto_version === "subject_credentials_v1") {
    const assignments = await listAssignments(deps, subject.partner_id, subject.subject_id);
    return writeCompiledPolicy(deps, subject, assignments, deps.now().toISOString());
  }
  return writeRevokedPolicy(deps, previous);
}

export async function revokePolicy(
  deps: AdminDeps,
  actor: Actor,
  partnerId: string,
  subjectId: string,
): Promise<{ policy: PublicPolicyRecord | null; changed: boolean }> {
  await getPartner(deps, partnerId);
  const subject = await getSubject(deps, partnerId, subjectId);
  let notice: Promise<void> | undefined;
  const outcome = await withKeyLock(lockKey(partnerId, subjectId), async () => {
    const result = await revokeLocked(deps, subject);
    // The sidecars are told first (logged in head order, under the lock); the audit record
    // does not hold the revocation up. The call answers after both.
    notice = noticeOfRevocation(deps, result);
    notice.catch(() => undefined);
    if (result.changed) {
      await recordPolicyChange(
        deps,
        actor,
        { action: "revoke", partnerId, subjectId, capabilityId: null },
        deps.now(),
      );
    }
    return result;
  });
  await notice;
  if (outcome.policy === undefined) {
    // Changed without a record: an unreadable v2 policy was removed instead of re-signed.
    if (outcome.changed) return { policy: null, changed: true };
    throw new AuthorityError("not_found", "The subject has no policy.");
  }
  return { policy: toPublicPolicyRecord(outcome.policy, deps.now()), changed: outcome.changed };
}

/**
 * A revocation's change notice, also when the policy was revoked already: a revoke repeated
 * after an answer that was not 200 must still log it and wait out the sidecars' leases
 * before it answers 200 (notifyPolicyChange).
 */
async function noticeOfRevocation(deps: AdminDeps, outcome: RevokeOutcome): Promise<void> {
  if (outcome.removed !== undefined) await notifyPolicyRemoved(deps, outcome.removed);
  else if (outcome.policy !== undefined) await notifyPolicyChange(deps, outcome.policy, { narrows: true });
}

/**
 * For deletions: revokes the subject's policy (kept as a revoked record, so heads stay
 * monotonic for caches) and deletes its assignments. Audited like a revocation.
 */
export async function retireSubjectPolicy(
  deps: AdminDeps,
  actor: Actor,
  subject: SubjectRecord,
): Promise<void> {
  const { partner_id: partnerId, subject_id: subjectId } = subject;
  const outcome = await withKeyLock(lockKey(partnerId, subjectId), async () => {
    const result = await revokeLocked(deps, subject);
    for (const assignment of await listAssignments(deps, partnerId, subjectId)) {
      await deps.store.delete(
        collections.assignments,
        storeKeys.assignment(partnerId, subjectId, assignment.capability_id),
      );
    }
    if (result.changed) {
      await recordPolicyChange(
        deps,
        actor,
        { action: "revoke", partnerId, subjectId, capabilityId: null },
        deps.now(),
      );
    }
    return result;
  });
  if (outcome.changed) await noticeOfRevocation(deps, outcome);
}

export async function getPolicy(
  deps: Pick<AdminDeps, "store" | "now">,
  partnerId: string,
  subjectId: string,
): Promise<WithShadow<PublicPolicyRecord>> {
  await getPartner(deps, partnerId);
  await getSubject(deps, partnerId, subjectId);
  const record = await loadPolicyRecord(deps, partnerId, subjectId);
  if (record === undefined) throw new AuthorityError("not_found", "The subject has no policy.");
  const now = deps.now();
  return withShadowPolicy(deps, toPublicPolicyRecord(record, now), now);
}

/** The partner's policy records (public view only: never the artifact), with their snapshots. */
export async function listPolicies(
  deps: Pick<AdminDeps, "store" | "now">,
  partnerId: string,
  request: PageRequest,
): Promise<PageOf<PolicyView>> {
  await getPartner(deps, partnerId);
  // Policies are keyed by global subject id: walk the partner's subject index.
  const page = await pageUnder<PartnerSubjectIndexRecord>(
    deps.store,
    collections.partnerSubjects,
    `${partnerId}/`,
    request,
  );
  const now = deps.now();
  const items: PolicyView[] = [];
  for (const item of page.items) {
    const record = await loadPolicyRecord(deps, partnerId, item.value.subject_id);
    if (record !== undefined) items.push(await policyView(deps, toPublicPolicyRecord(record, now), now));
  }
  return page.next === undefined ? { items } : { items, next: page.next };
}

/** One assignment with the operation snapshots it copied. */
export function getAssignment(
  deps: Pick<AdminDeps, "store">,
  partnerId: string,
  subjectId: string,
  capabilityId: string,
): Promise<AssignmentRecord> {
  return readAssignment(deps, collections.assignments, partnerId, subjectId, capabilityId);
}

/** An enforced or a shadow assignment of an existing partner's subject (not_found naming which). */
export async function readAssignment(
  deps: Pick<AdminDeps, "store">,
  collection: typeof collections.assignments | typeof collections.shadowAssignments,
  partnerId: string,
  subjectId: string,
  capabilityId: string,
): Promise<AssignmentRecord> {
  await getPartner(deps, partnerId);
  await getSubject(deps, partnerId, subjectId);
  const assignment = await deps.store.get<AssignmentRecord>(
    collection,
    storeKeys.assignment(partnerId, subjectId, capabilityId),
  );
  if (assignment === undefined) {
    const which = collection === collections.assignments ? "an assignment" : "a shadow assignment";
    throw new AuthorityError("not_found", `The subject has no ${which} of this capability.`);
  }
  return assignment;
}
