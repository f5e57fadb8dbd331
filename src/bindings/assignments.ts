/**
 * API assignments of mapped (headless) subjects: `POST /v1/bindings/{id}/apis`. The
 * subject's single policy is compiled as a v2 document whose signed content binds it to
 * the binding's context (partner, binding, issuer hash, external-subject hash, mapping
 * version), then protected and stored through the admin policy write path.
 */

import { assignmentExpiry } from "../admin/assignment-expiry.ts";
import { writeAssignmentChange } from "../admin/audit.ts";
import { assertPermissionsInCatalog, loadCatalog } from "../admin/capabilities.ts";
import type { Actor, AdminDeps } from "../admin/deps.ts";
import { withKeyLock } from "../admin/key-lock.ts";
import { checkSubjectBoundary, dropAssignmentLocked } from "../admin/policies.ts";
import {
  hasActivePolicy,
  listAssignments,
  notifyPolicyChange,
  writeCompiledPolicy,
} from "../admin/policy-writer.ts";
import {
  dropShadow,
  type PromoteOutcome,
  promoteShadowOf,
  putShadow,
  type ShadowOutcome,
} from "../admin/shadow-policies.ts";
import { getSubject } from "../admin/subjects.ts";
import { redactionRuleProblem } from "../catalog/extensions.ts";
import { buildPermissionId, type PermissionId, type RedactionRule } from "../core/index.ts";
import { AuthorityError } from "../errors.ts";
import type { HeadlessContext } from "../policy/compile.ts";
import { type PublicPolicyRecord, toPublicPolicyRecord } from "../policy/record.ts";
import type { BindingRecord, ExternalMappingRecord } from "../store/binding-model.ts";
import type { AssignmentRecord, SubjectRecord } from "../store/model.ts";
import { getMapping, touchMapping } from "./mappings.ts";

export interface BindingAssignInput {
  readonly subject_id: string;
  readonly capability_id: string;
  readonly allowed_permission_ids: readonly string[];
  readonly response_redactions?: Readonly<Record<string, readonly RedactionRule[]>>;
  /** Exactly one of expires_at (ISO 8601) and ttl_seconds. */
  readonly expires_at?: string;
  readonly ttl_seconds?: number;
}

export interface BindingAssignOutcome {
  readonly policy: PublicPolicyRecord;
  readonly assignment: AssignmentRecord;
  readonly mapping: ExternalMappingRecord;
}

const lockKey = (partnerId: string, subjectId: string): string => `policy:${partnerId}/${subjectId}`;

function invalid(message: string, details?: Record<string, unknown>): AuthorityError {
  return new AuthorityError("invalid_request", message, details === undefined ? undefined : { details });
}

function checkRedactions(
  redactions: Readonly<Record<string, readonly RedactionRule[]>>,
  allowed: ReadonlySet<string>,
) {
  const problems: string[] = [];
  for (const [id, rules] of Object.entries(redactions)) {
    if (!allowed.has(id)) problems.push(`/response_redactions/${id}: not in allowed_permission_ids`);
    rules.forEach((rule, i) => {
      const problem = redactionRuleProblem(rule);
      if (problem !== undefined) problems.push(`/response_redactions/${id}/${i}: ${problem}`);
    });
  }
  if (problems.length > 0) throw invalid("response_redactions are invalid.", { problems });
}

async function headlessSubject(
  deps: AdminDeps,
  binding: BindingRecord,
  subjectId: string,
): Promise<SubjectRecord> {
  const subject = await getSubject(deps, binding.partner_id, subjectId);
  if (subject.subject_type !== "external" || subject.crypto_version !== "platform_service_v2") {
    throw invalid("The subject is not a headless external subject.", { subject_id: subjectId });
  }
  return subject;
}

/** The v2 context every policy of this mapping is bound to. */
export function headlessContextOf(binding: BindingRecord, mapping: ExternalMappingRecord): HeadlessContext {
  return {
    partnerId: binding.partner_id,
    bindingId: binding.binding_id,
    issuerHash: mapping.issuer_hash,
    externalSubjectHash: mapping.external_subject_hash,
    mappingVersion: binding.mapping_version,
  };
}

interface CheckedBindingAssignment {
  readonly mapping: ExternalMappingRecord;
  readonly subject: SubjectRecord;
  readonly assignment: AssignmentRecord;
}

/**
 * The assignment a binding's request asks for, with every check of the binding API: the
 * mapping, a headless subject, the catalog, the expiry, the redactions and the boundary; the
 * binding's auth profile when set. Shared by the enforced assignment and its shadow.
 */
async function checkedBindingAssignment(
  deps: AdminDeps,
  actor: Actor,
  binding: BindingRecord,
  input: BindingAssignInput,
): Promise<CheckedBindingAssignment> {
  const mapping = await getMapping(deps, binding, input.subject_id);
  const subject = await headlessSubject(deps, binding, input.subject_id);
  const partnerId = binding.partner_id;
  const loaded = await loadCatalog(deps.store, partnerId, input.capability_id);
  if (loaded === undefined) throw new AuthorityError("not_found", "No such capability.");
  const now = deps.now();
  const expiresAt = assignmentExpiry(input, now);
  assertPermissionsInCatalog(loaded, input.allowed_permission_ids);
  const allowed = new Set(input.allowed_permission_ids);
  if (allowed.size === 0) throw invalid("allowed_permission_ids must not be empty.");
  const redactions = input.response_redactions ?? {};
  checkRedactions(redactions, allowed);
  await checkSubjectBoundary(
    deps,
    subject,
    input.capability_id,
    [...allowed],
    (expiresAt.getTime() - now.getTime()) / 1000,
  );

  const assignment: AssignmentRecord = {
    partner_id: partnerId,
    subject_id: subject.subject_id,
    capability_id: input.capability_id,
    catalog_version: loaded.version.catalog_version,
    allowed_permission_ids: [...allowed].sort() as PermissionId[],
    auth_profile_ref: binding.auth_profile_ref ?? loaded.capability.auth_profile_ref,
    operations: loaded.version.operations.filter((op) =>
      allowed.has(buildPermissionId(input.capability_id, op.method, op.path)),
    ),
    response_redactions: redactions,
    expires_at: expiresAt.toISOString(),
    assigned_by: actor.subject,
    assigned_at: now.toISOString(),
  };
  return { mapping, subject, assignment };
}

/**
 * Assigns (or replaces) one capability of a mapped subject and recompiles its v2 policy
 * under the binding's current mapping_version. Uses the binding's auth profile when set.
 */
export async function assignBindingApi(
  deps: AdminDeps,
  actor: Actor,
  binding: BindingRecord,
  input: BindingAssignInput,
): Promise<BindingAssignOutcome> {
  const { mapping, subject, assignment } = await checkedBindingAssignment(deps, actor, binding, input);
  const partnerId = binding.partner_id;
  const headless = headlessContextOf(binding, mapping);
  const { record, narrows } = await withKeyLock(lockKey(partnerId, subject.subject_id), async () => {
    const others = (await listAssignments(deps, partnerId, subject.subject_id)).filter(
      (a) => a.capability_id !== input.capability_id,
    );
    const narrows = await hasActivePolicy(deps, subject.subject_id);
    const written = await writeCompiledPolicy(deps, subject, [...others, assignment], null, headless);
    await writeAssignmentChange(
      deps,
      actor,
      { action: "assign", partnerId, subjectId: subject.subject_id, capabilityId: input.capability_id },
      assignment,
      deps.now(),
    );
    return { record: written, narrows };
  });
  await notifyPolicyChange(deps, record, { narrows });
  const touched = await touchMapping(deps, mapping, binding.mapping_version);
  return { policy: toPublicPolicyRecord(record, deps.now()), assignment, mapping: touched };
}

/**
 * Sets (or replaces) the shadow of one capability of a mapped subject (decision 2761): checked
 * exactly like the binding's assignment, compiled with the subject's other shadows under the
 * binding's context, so the runtime verifies and evaluates it like the enforced policy.
 */
export async function setBindingShadow(
  deps: AdminDeps,
  actor: Actor,
  binding: BindingRecord,
  input: BindingAssignInput,
): Promise<ShadowOutcome> {
  const { mapping, subject, assignment } = await checkedBindingAssignment(deps, actor, binding, input);
  const headless = headlessContextOf(binding, mapping);
  return { shadow_policy: await putShadow(deps, actor, subject, assignment, headless), assignment };
}

/** A mapped subject of the binding, with the context its v2 policy is compiled under. */
async function mappedSubject(deps: AdminDeps, binding: BindingRecord, subjectId: string) {
  const mapping = await getMapping(deps, binding, subjectId);
  const subject = await headlessSubject(deps, binding, subjectId);
  return { mapping, subject, headless: headlessContextOf(binding, mapping) };
}

/** Removes the shadow of one capability of a mapped subject (the last one: the shadow policy too). */
export async function removeBindingShadow(
  deps: AdminDeps,
  actor: Actor,
  binding: BindingRecord,
  subjectId: string,
  capabilityId: string,
): Promise<ShadowOutcome> {
  const { subject, headless } = await mappedSubject(deps, binding, subjectId);
  return { shadow_policy: await dropShadow(deps, actor, subject, capabilityId, headless) };
}

/**
 * Promotes a mapped subject's shadow of one capability to its enforced assignment in one
 * recorded action (`promote_shadow`), the v2 policy recompiled under the binding's current
 * context (decision 2921).
 */
export async function promoteBindingShadow(
  deps: AdminDeps,
  actor: Actor,
  binding: BindingRecord,
  subjectId: string,
  capabilityId: string,
): Promise<PromoteOutcome> {
  const { mapping, subject, headless } = await mappedSubject(deps, binding, subjectId);
  const outcome = await promoteShadowOf(deps, actor, subject, capabilityId, headless);
  await touchMapping(deps, mapping, binding.mapping_version);
  return outcome;
}

/** Removes one capability; removing the last leaves a revoked policy (never a deleted one). */
export async function unassignBindingApi(
  deps: AdminDeps,
  actor: Actor,
  binding: BindingRecord,
  subjectId: string,
  capabilityId: string,
): Promise<PublicPolicyRecord> {
  const { subject, headless } = await mappedSubject(deps, binding, subjectId);
  const partnerId = binding.partner_id;
  const record = await withKeyLock(lockKey(partnerId, subjectId), () =>
    dropAssignmentLocked(deps, actor, subject, capabilityId, { revokedAt: null, headless }),
  );
  await notifyPolicyChange(deps, record, { narrows: true });
  return toPublicPolicyRecord(record, deps.now());
}

/** A mapped subject's assignments (what its policy was compiled from). */
export async function listBindingApis(
  deps: AdminDeps,
  binding: BindingRecord,
  subjectId: string,
): Promise<AssignmentRecord[]> {
  await getMapping(deps, binding, subjectId);
  return listAssignments(deps, binding.partner_id, subjectId);
}
