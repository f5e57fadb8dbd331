import { AuthorityError } from "../errors.ts";
import { bindingCollections } from "../store/binding-model.ts";
import {
  collections,
  type PartnerSubjectIndexRecord,
  type SubjectRecord,
  storeKeys,
} from "../store/model.ts";
import type { Actor, AdminDeps } from "./deps.ts";
import { removePartnerBindings } from "./partner-bindings-removal.ts";
import { getPartner } from "./partners.ts";
import { loadPolicyRecord } from "./policy-writer.ts";
import { countPrefix, scanAll } from "./store-scan.ts";
import { removeSubject } from "./subject-removal.ts";

/** What a partner still holds, by kind. */
export interface PartnerContents {
  readonly subjects: number;
  readonly capabilities: number;
  readonly catalog_versions: number;
  readonly boundaries: number;
  readonly auth_profiles: number;
  readonly assignments: number;
  readonly bindings: number;
}

export async function partnerContents(
  deps: Pick<AdminDeps, "store">,
  partnerId: string,
): Promise<PartnerContents> {
  const prefix = `${partnerId}/`;
  const count = (collection: string) => countPrefix(deps.store, collection, prefix);
  return {
    subjects: await count(collections.partnerSubjects),
    capabilities: await count(collections.capabilities),
    catalog_versions: await count(collections.catalogVersions),
    boundaries: await count(collections.boundaries),
    auth_profiles: await count(collections.authProfiles),
    assignments: await count(collections.assignments),
    bindings: await count(bindingCollections.partnerBindings),
  };
}

export interface PartnerDeletion {
  readonly partner_id: string;
  /** What was removed (all zero without cascade). */
  readonly deleted: PartnerContents;
  /** Policies revoked by this deletion. */
  readonly revoked_policies: number;
  /** Workload clients deleted with the bindings: none of their tokens is accepted any more. */
  readonly deleted_workload_clients: number;
}

const isEmpty = (contents: PartnerContents): boolean => Object.values(contents).every((n) => n === 0);

/**
 * Deletes a partner. Without cascade it is refused (409, details list what remains) while
 * the partner holds anything. With cascade: its bindings' workload clients go first (no
 * workload token of the partner is accepted after that), with the bindings, their mappings and
 * stored idempotent results; then every subject's policy is revoked (a signed revocation, so
 * enforcement stops before anything else changes); then assignments, subjects, capabilities
 * with all catalog versions, boundaries and auth profiles are deleted, then the partner.
 * Audit logs, evidence and the revoked policy records stay.
 */
export async function deletePartner(
  deps: AdminDeps,
  actor: Actor,
  partnerId: string,
  options: { readonly cascade: boolean },
): Promise<PartnerDeletion> {
  await getPartner(deps, partnerId);
  const contents = await partnerContents(deps, partnerId);
  if (!isEmpty(contents) && !options.cascade) {
    throw new AuthorityError(
      "conflict",
      "The partner still has resources; delete them or pass cascade=true.",
      {
        details: { contents },
      },
    );
  }
  const removed = await removePartnerBindings(deps, partnerId);
  const prefix = `${partnerId}/`;
  let revoked = 0;
  for (const item of await scanAll<PartnerSubjectIndexRecord>(
    deps.store,
    collections.partnerSubjects,
    prefix,
  )) {
    const subject = await deps.store.get<SubjectRecord>(
      collections.subjects,
      storeKeys.subject(item.value.subject_id),
    );
    if (subject?.partner_id === partnerId) {
      const before = await loadPolicyRecord(deps, partnerId, subject.subject_id);
      await removeSubject(deps, actor, subject);
      if (before !== undefined && before.revoked_at === null) revoked++;
    } else {
      await deps.store.delete(collections.partnerSubjects, item.id);
    }
  }
  // Assignments of subjects that vanished earlier would otherwise linger.
  for (const collection of [
    collections.assignments,
    collections.shadowAssignments,
    collections.logOnlyCapabilities,
    collections.capabilities,
    collections.catalogVersions,
    collections.boundaries,
    collections.authProfiles,
    // Users' sealed token sets of those profiles (keyed `<partner>/<profile>/<subject>`).
    collections.userTokenSets,
  ]) {
    for (const item of await scanAll(deps.store, collection, prefix))
      await deps.store.delete(collection, item.id);
  }
  await deps.store.delete(collections.partners, storeKeys.partner(partnerId));
  return {
    partner_id: partnerId,
    deleted: contents,
    revoked_policies: revoked,
    deleted_workload_clients: removed.workload_clients,
  };
}
