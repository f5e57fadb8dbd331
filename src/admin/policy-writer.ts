import { computePolicyHash, type PolicyDocument, PolicyDocumentError } from "../core/index.ts";
import { AuthorityError } from "../errors.ts";
import { openPolicy, protectPolicy } from "../policy/artifact.ts";
import { apiEntryOf, compilePolicyDocument, type HeadlessContext } from "../policy/compile.ts";
import type { PolicyOpener } from "../policy/protector.ts";
import type { PolicyCapabilitySummary, PolicyRecord } from "../policy/record.ts";
import { readPolicyRecord, readStoredPolicyRecord, writePolicyRecord } from "../policy/record-store.ts";
import { type AssignmentRecord, collections, type SubjectRecord } from "../store/model.ts";
import type { AdminDeps } from "./deps.ts";
import { scanAll } from "./store-scan.ts";

/** Every assignment of one subject, ordered by capability id. */
export async function listAssignments(
  deps: Pick<AdminDeps, "store">,
  partnerId: string,
  subjectId: string,
): Promise<AssignmentRecord[]> {
  const items = await scanAll<AssignmentRecord>(
    deps.store,
    collections.assignments,
    `${partnerId}/${subjectId}/`,
  );
  return items.map((item) => item.value);
}

/**
 * The subject's policy record in this partner. Policy records are keyed by the global
 * subject id; one left revoked by a deleted subject of another partner is not this
 * partner's.
 */
export async function loadPolicyRecord(
  deps: Pick<AdminDeps, "store">,
  partnerId: string,
  subjectId: string,
): Promise<PolicyRecord | undefined> {
  const record = await readPolicyRecord(deps.store, subjectId);
  return record?.partner_id === partnerId ? record : undefined;
}

/**
 * The document's single expiry is the earliest of its assignments: no capability may
 * outlive the lifetime it was granted with (fail closed). No assignments: now.
 */
export function policyExpiry(assignments: readonly AssignmentRecord[], now: Date): string {
  let earliest: number | undefined;
  for (const assignment of assignments) {
    const at = Date.parse(assignment.expires_at);
    if (earliest === undefined || at < earliest) earliest = at;
  }
  return new Date(earliest ?? now.getTime()).toISOString();
}

function summaryOf(assignment: AssignmentRecord): PolicyCapabilitySummary {
  const entry = apiEntryOf(assignment);
  return {
    capability_id: entry.capability_id,
    catalog_version: assignment.catalog_version,
    allowed_permission_ids: entry.allowed_permission_ids,
    auth_profile_ref: entry.auth_profile_ref,
  };
}

async function protect(deps: AdminDeps, document: PolicyDocument, partnerId: string) {
  try {
    return await protectPolicy(document, deps.protector, partnerId);
  } catch (error) {
    // Inputs are checked before compiling; this is the last line, never a 500 with internals.
    if (error instanceof PolicyDocumentError) {
      throw new AuthorityError("invalid_request", "The resulting policy would be invalid.", {
        details: { problems: error.messages },
      });
    }
    throw error;
  }
}

async function store(
  deps: AdminDeps,
  document: PolicyDocument,
  summaries: readonly PolicyCapabilitySummary[],
  partnerId: string,
  subjectId: string,
): Promise<PolicyRecord> {
  const protectedPolicy = await protect(deps, document, partnerId);
  // Heads only grow per subject id, even across a deleted and re-created subject.
  const previous = await readStoredPolicyRecord(deps.store, subjectId);
  const record: PolicyRecord = {
    subject_id: subjectId,
    partner_id: partnerId,
    schema_version: document.schema_version,
    crypto_version:
      document.schema_version === "authority-user-policy-v2"
        ? "platform_service_v2"
        : "subject_credentials_v1",
    policy_version: document.policy_version,
    policy_hash: computePolicyHash(document.apis),
    document_hash: protectedPolicy.documentHash,
    head: (previous?.head ?? 0) + 1,
    expires_at: document.expires_at,
    revoked_at: document.revoked_at,
    capabilities: summaries,
    // Only the sign-encrypted artifact is enforceable; the rest are facts safe to show.
    artifact: protectedPolicy.artifact,
    updated_at: deps.now().toISOString(),
  };
  await writePolicyRecord(deps.store, record);
  return record;
}

/** The key every writer of a subject's policy serializes on (see withKeyLock). */
export const policyLockKey = (partnerId: string, subjectId: string): string =>
  `policy:${partnerId}/${subjectId}`;

/**
 * Compiles a subject's one policy document from the given assignments, signs and
 * encrypts it, and stores the record with head = previous head + 1. A
 * platform_service_v2 subject needs its binding context (`headless`); v1 subjects none.
 * Call inside withKeyLock(policyLockKey(...)).
 */
export async function writeCompiledPolicy(
  deps: AdminDeps,
  subject: SubjectRecord,
  assignments: readonly AssignmentRecord[],
  revokedAt: string | null,
  headless?: HeadlessContext,
): Promise<PolicyRecord> {
  const now = deps.now();
  const document = compilePolicyDocument({
    subject: {
      subject_id: subject.subject_id,
      subject_type: subject.subject_type,
      display_name: subject.display_name,
    },
    cryptoVersion: subject.crypto_version,
    assignments,
    expiresAt: policyExpiry(assignments, now),
    revokedAt,
    now,
    ...(headless === undefined ? {} : { headless }),
  });
  const sorted = [...assignments].sort((a, b) =>
    a.capability_id < b.capability_id ? -1 : a.capability_id > b.capability_id ? 1 : 0,
  );
  return store(deps, document, sorted.map(summaryOf), subject.partner_id, subject.subject_id);
}

/**
 * Revokes by re-signing the current document with `revoked_at` set: the revocation is
 * inside the signed content, so no cache can strip it. Works for both document versions
 * (a v2 document's binding context cannot be recompiled here, only carried over).
 */
export async function writeRevokedPolicy(deps: AdminDeps, previous: PolicyRecord): Promise<PolicyRecord> {
  const now = deps.now();
  const opened = await openPolicy(previous.artifact, deps.protector, {
    cryptoVersion: previous.crypto_version,
    subjectId: previous.subject_id,
    partnerId: previous.partner_id,
  });
  const document: PolicyDocument = {
    ...opened,
    policy_version: now.toISOString(),
    revoked_at: now.toISOString(),
  };
  return store(deps, document, previous.capabilities, previous.partner_id, previous.subject_id);
}

/**
 * Revokes without the crypto service: the record keeps its signed artifact and gains
 * `revoked_at` and a new head — a deny-only revocation marker that every runtime path
 * honours (withRevocationMarker). The new head makes every cache read the record again.
 */
export async function writeRevocationMarker(deps: AdminDeps, previous: PolicyRecord): Promise<PolicyRecord> {
  const now = deps.now().toISOString();
  const record: PolicyRecord = { ...previous, head: previous.head + 1, revoked_at: now, updated_at: now };
  await writePolicyRecord(deps.store, record);
  return record;
}

/** Tells the change hook; a failing hook is logged, the stored change stands. */
export async function notifyPolicyChange(deps: AdminDeps, record: PolicyRecord): Promise<void> {
  if (deps.onPolicyChange === undefined) return;
  try {
    await deps.onPolicyChange(record.subject_id, record.head);
  } catch (error) {
    deps.logger?.warn(
      { err: error, subject_id: record.subject_id, head: record.head },
      "policy change hook failed",
    );
  }
}

/**
 * Re-signs and re-encrypts the subject's current document under the protector's current keys
 * (after a key rotation), head + 1. The signed content is unchanged, except that a deny-only
 * revocation marker becomes a signed revocation.
 */
export async function writeReprotectedPolicy(
  deps: AdminDeps,
  previous: PolicyRecord,
  opener: PolicyOpener = deps.protector,
): Promise<PolicyRecord> {
  const opened = await openPolicy(previous.artifact, opener, {
    cryptoVersion: previous.crypto_version,
    subjectId: previous.subject_id,
    partnerId: previous.partner_id,
  });
  const marker = typeof previous.revoked_at === "string" && opened.revoked_at === null;
  const document: PolicyDocument = marker
    ? { ...opened, policy_version: deps.now().toISOString(), revoked_at: previous.revoked_at }
    : opened;
  return store(deps, document, previous.capabilities, previous.partner_id, previous.subject_id);
}
