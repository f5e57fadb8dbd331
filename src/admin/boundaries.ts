import { isValidId } from "../core/ids.ts";
import { AuthorityError } from "../errors.ts";
import {
  type AssignmentRecord,
  type BoundaryRecord,
  collections,
  type SubjectRecord,
  storeKeys,
} from "../store/model.ts";
import { checkBoundary } from "./boundary-check.ts";
import type { AdminDeps } from "./deps.ts";
import { getPartner } from "./partners.ts";
import { isValidPermissionPattern } from "./permission-pattern.ts";
import { type PageOf, type PageRequest, pageUnder, scan } from "./store-scan.ts";

export interface BoundaryInput {
  readonly name: string;
  readonly allowed_capabilities: readonly string[];
  readonly allowed_permission_patterns: readonly string[];
  readonly max_policy_ttl_seconds?: number | null;
}

export interface CreateBoundaryInput extends BoundaryInput {
  readonly boundary_id: string;
}

function checkInput(input: BoundaryInput): void {
  const problems: string[] = [];
  input.allowed_capabilities.forEach((id, i) => {
    if (!isValidId("capability", id)) problems.push(`/allowed_capabilities/${i} is not a capability id`);
  });
  input.allowed_permission_patterns.forEach((pattern, i) => {
    if (!isValidPermissionPattern(pattern)) {
      problems.push(`/allowed_permission_patterns/${i} must be 1-2048 printable characters without spaces`);
    }
  });
  if (problems.length > 0) {
    throw new AuthorityError("invalid_request", "The permission boundary is invalid.", {
      details: { problems },
    });
  }
}

function recordOf(partnerId: string, boundaryId: string, input: BoundaryInput, now: Date): BoundaryRecord {
  return {
    partner_id: partnerId,
    boundary_id: boundaryId,
    name: input.name,
    allowed_capabilities: [...new Set(input.allowed_capabilities)],
    allowed_permission_patterns: [...new Set(input.allowed_permission_patterns)],
    max_policy_ttl_seconds: input.max_policy_ttl_seconds ?? null,
    updated_at: now.toISOString(),
  };
}

export async function createBoundary(
  deps: AdminDeps,
  partnerId: string,
  input: CreateBoundaryInput,
): Promise<BoundaryRecord> {
  await getPartner(deps, partnerId);
  if (!isValidId("local", input.boundary_id)) {
    throw new AuthorityError("invalid_request", "boundary_id must be 1-128 characters of [A-Za-z0-9._-].");
  }
  checkInput(input);
  const record = recordOf(partnerId, input.boundary_id, input, deps.now());
  const key = storeKeys.boundary(partnerId, input.boundary_id);
  if (!(await deps.store.create(collections.boundaries, key, record))) {
    throw new AuthorityError("conflict", "A permission boundary with this id already exists.", {
      details: { boundary_id: input.boundary_id },
    });
  }
  return record;
}

export async function getBoundary(
  deps: Pick<AdminDeps, "store">,
  partnerId: string,
  boundaryId: string,
): Promise<BoundaryRecord> {
  const record = await deps.store.get<BoundaryRecord>(
    collections.boundaries,
    storeKeys.boundary(partnerId, boundaryId),
  );
  if (record === undefined) throw new AuthorityError("not_found", "No such permission boundary.");
  return record;
}

export async function listBoundaries(
  deps: Pick<AdminDeps, "store">,
  partnerId: string,
  request: PageRequest,
): Promise<PageOf<BoundaryRecord>> {
  await getPartner(deps, partnerId);
  const page = await pageUnder<BoundaryRecord>(deps.store, collections.boundaries, `${partnerId}/`, request);
  const items = page.items.map((item) => item.value);
  return page.next === undefined ? { items } : { items, next: page.next };
}

/** The partner's subjects that name this boundary. */
async function subjectsUnder(deps: Pick<AdminDeps, "store">, partnerId: string, boundaryId: string) {
  const out: SubjectRecord[] = [];
  for await (const item of scan<{ subject_id: string }>(
    deps.store,
    collections.partnerSubjects,
    `${partnerId}/`,
  )) {
    const subject = await deps.store.get<SubjectRecord>(
      collections.subjects,
      storeKeys.subject(item.value.subject_id),
    );
    if (subject?.partner_id === partnerId && subject.boundary_id === boundaryId) out.push(subject);
  }
  return out;
}

/** An existing assignment the (changed) boundary no longer admits. */
export interface AssignmentOutside {
  readonly subject_id: string;
  readonly capability_id: string;
  readonly outside: readonly string[];
  readonly max_policy_ttl_seconds?: number;
}

export interface BoundaryUpdate {
  readonly boundary: BoundaryRecord;
  /**
   * Assignments made under the old boundary that the new one would refuse. They stay in
   * force (their policies are signed); re-assign or revoke them.
   */
  readonly assignments_outside: readonly AssignmentOutside[];
}

export async function updateBoundary(
  deps: AdminDeps,
  partnerId: string,
  boundaryId: string,
  input: BoundaryInput,
): Promise<BoundaryUpdate> {
  await getPartner(deps, partnerId);
  const existing = await getBoundary(deps, partnerId, boundaryId);
  checkInput(input);
  const now = deps.now();
  const record = recordOf(partnerId, boundaryId, input, now);
  await deps.store.put(collections.boundaries, storeKeys.boundary(partnerId, existing.boundary_id), record);
  const outside: AssignmentOutside[] = [];
  for (const subject of await subjectsUnder(deps, partnerId, boundaryId)) {
    const prefix = `${partnerId}/${subject.subject_id}/`;
    for await (const item of scan<AssignmentRecord>(deps.store, collections.assignments, prefix)) {
      const assignment = item.value;
      const violation = checkBoundary(record, {
        capabilityId: assignment.capability_id,
        permissionIds: assignment.allowed_permission_ids,
        // Measured from when it was granted: the lifetime the admin asked for.
        ttlSeconds: (Date.parse(assignment.expires_at) - Date.parse(assignment.assigned_at)) / 1000,
      });
      if (violation !== undefined) {
        outside.push({
          subject_id: subject.subject_id,
          capability_id: assignment.capability_id,
          outside: violation.outside,
          ...(violation.max_policy_ttl_seconds === undefined
            ? {}
            : { max_policy_ttl_seconds: violation.max_policy_ttl_seconds }),
        });
      }
    }
  }
  return { boundary: record, assignments_outside: outside };
}

/** Refused (409) while any subject still names the boundary. */
export async function deleteBoundary(deps: AdminDeps, partnerId: string, boundaryId: string): Promise<void> {
  await getPartner(deps, partnerId);
  await getBoundary(deps, partnerId, boundaryId);
  const subjects = await subjectsUnder(deps, partnerId, boundaryId);
  if (subjects.length > 0) {
    throw new AuthorityError("conflict", "Subjects still use this permission boundary.", {
      details: {
        subject_ids: subjects.slice(0, 100).map((s) => s.subject_id),
        subject_count: subjects.length,
      },
    });
  }
  await deps.store.delete(collections.boundaries, storeKeys.boundary(partnerId, boundaryId));
}
