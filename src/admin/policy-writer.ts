import { computePolicyHash, type PolicyDocument, PolicyDocumentError } from "../core/index.ts";
import { AuthorityError } from "../errors.ts";
import { openPolicy, protectPolicy } from "../policy/artifact.ts";
import { appendPolicyChange } from "../policy/change-log.ts";
import { apiEntryOf, compilePolicyDocument, type HeadlessContext } from "../policy/compile.ts";
import type { PolicyOpener } from "../policy/protector.ts";
import type { PolicyCapabilitySummary, PolicyRecord } from "../policy/record.ts";
import {
  type PolicyCollection,
  readPolicyRecord,
  readStoredPolicyRecord,
  writePolicyRecord,
} from "../policy/record-store.ts";
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
  collection: PolicyCollection,
): Promise<PolicyRecord> {
  const protectedPolicy = await protect(deps, document, partnerId);
  // Heads only grow per subject id, even across a deleted and re-created subject.
  const previous = await readStoredPolicyRecord(deps.store, subjectId, collection);
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
  await writePolicyRecord(deps.store, record, collection);
  return record;
}

/**
 * Whether the subject's policy is in force now (stored, not revoked, not expired): rewriting
 * it may take access away, so its change notice waits out the sidecars' leases. A first grant,
 * or one that lifts a revocation or an expiry, takes nothing away. Call inside withKeyLock.
 */
export async function hasActivePolicy(
  deps: Pick<AdminDeps, "store" | "now">,
  subjectId: string,
): Promise<boolean> {
  const previous = await readStoredPolicyRecord(deps.store, subjectId);
  return (
    previous !== undefined &&
    previous.revoked_at === null &&
    Date.parse(previous.expires_at) > deps.now().getTime()
  );
}

/** The key every writer of a subject's policy serializes on (see withKeyLock). */
export const policyLockKey = (partnerId: string, subjectId: string): string =>
  `policy:${partnerId}/${subjectId}`;

/**
 * Compiles a subject's one policy document from the given assignments, signs and
 * encrypts it, and stores the record with head = previous head + 1. A
 * platform_service_v2 subject needs its binding context (`headless`); v1 subjects none.
 * A shadow policy (`collection` shadow_policies) is compiled, signed and stored the same way.
 * Call inside withKeyLock(policyLockKey(...)).
 */
export async function writeCompiledPolicy(
  deps: AdminDeps,
  subject: SubjectRecord,
  assignments: readonly AssignmentRecord[],
  revokedAt: string | null,
  headless?: HeadlessContext,
  collection: PolicyCollection = collections.policies,
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
  return store(deps, document, sorted.map(summaryOf), subject.partner_id, subject.subject_id, collection);
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
  return store(
    deps,
    document,
    previous.capabilities,
    previous.partner_id,
    previous.subject_id,
    collections.policies,
  );
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

/** Tells the change hook (the Redis publisher); a failing hook is logged, the stored change stands. */
async function publishPolicyChange(deps: AdminDeps, change: PolicyChangeFacts): Promise<void> {
  if (deps.onPolicyChange === undefined) return;
  try {
    await deps.onPolicyChange(change.subject_id, change.head);
  } catch (error) {
    deps.logger?.warn(
      { err: error, subject_id: change.subject_id, head: change.head },
      "policy change hook failed",
    );
  }
}

/** Which subject's policy changed: its new head, signed text and revocation. */
export type PolicyChangeFacts = Pick<
  PolicyRecord,
  "subject_id" | "partner_id" | "head" | "document_hash" | "revoked_at"
>;

/**
 * A policy record removed instead of re-signed (its artifact no longer opens): logged for the
 * sidecars under the next head, so each drops its copy, and waited out like a revocation.
 * Not published: Redis heads only grow, and a later record of the subject starts again at 1.
 */
export async function notifyPolicyRemoved(deps: AdminDeps, removed: PolicyChangeFacts): Promise<void> {
  const seq = await appendPolicyChange(deps.store, {
    subject_id: removed.subject_id,
    partner_id: removed.partner_id,
    head: removed.head + 1,
    document_hash: null,
    revoked_at: null,
  });
  deps.sidecarLeases?.logged(removed.partner_id);
  await deps.sidecarLeases?.outlast(seq, removed.partner_id);
}

/**
 * Tells the sidecars about a stored change: it is appended to the policy change log (which
 * they follow from this service; when that fails the call fails, and the change is not
 * reported as in force), published on Redis (the fast path, best effort), and — when it can
 * take access away (`narrows`) — the caller is answered only once every sidecar holding a
 * freshness lease has acknowledged it or its lease ran out: from that answer on no sidecar
 * allows what the change removed, whatever Redis does (decision 2507).
 */
export async function notifyPolicyChange(
  deps: AdminDeps,
  change: PolicyChangeFacts,
  options: { readonly narrows: boolean },
): Promise<void> {
  const seq = await appendPolicyChange(deps.store, change);
  deps.sidecarLeases?.logged(change.partner_id);
  await Promise.all([
    publishPolicyChange(deps, change),
    options.narrows ? deps.sidecarLeases?.outlast(seq, change.partner_id) : undefined,
  ]);
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
  return store(
    deps,
    document,
    previous.capabilities,
    previous.partner_id,
    previous.subject_id,
    collections.policies,
  );
}
