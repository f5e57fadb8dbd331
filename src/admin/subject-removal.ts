import { collections, type SubjectRecord, storeKeys } from "../store/model.ts";
import type { Actor, AdminDeps } from "./deps.ts";
import { getPartner } from "./partners.ts";
import { retireSubjectPolicy } from "./policies.ts";
import { removeShadows } from "./shadow-policies.ts";
import { getSubject } from "./subjects.ts";

/**
 * Revokes the subject's policy first (enforcement stops), retires its owner at the crypto
 * service (custody modes), then removes its records.
 */
export async function removeSubject(deps: AdminDeps, actor: Actor, subject: SubjectRecord): Promise<void> {
  await retireSubjectPolicy(deps, actor, subject);
  // After the revocation is signed, before the records go: a failure leaves the subject there
  // to delete again (an owner already retired counts as done).
  if (subject.crypto_version === "subject_credentials_v1") {
    await deps.protector.subjectKeys?.retire(subject.subject_id);
  }
  // Its shadow (decision 2761) goes with it: a subject id freed now is never judged by it.
  await removeShadows(deps, subject);
  await deps.store.delete(
    collections.partnerSubjects,
    storeKeys.partnerSubject(subject.partner_id, subject.subject_id),
  );
  await deps.store.delete(collections.subjects, storeKeys.subject(subject.subject_id));
}

/**
 * DELETE /partners/{id}/users/{subject}: the subject's policy is revoked (a signed,
 * revoked record stays so caches see a newer head), its assignments, index entry and
 * record are deleted. The subject id becomes free again.
 */
export async function deleteSubject(
  deps: AdminDeps,
  actor: Actor,
  partnerId: string,
  subjectId: string,
): Promise<void> {
  await getPartner(deps, partnerId);
  await removeSubject(deps, actor, await getSubject(deps, partnerId, subjectId));
}
