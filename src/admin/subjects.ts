import { generateId, isValidId } from "../core/ids.ts";
import {
  DERIVED_SUBJECT_PREFIX,
  identityOf,
  PARTNER_NAMESPACE_SEPARATOR,
  partnerSubjectId,
  type SubjectIdentity,
} from "../core/subject-identity.ts";
import { AuthorityError } from "../errors.ts";
import {
  type BoundaryRecord,
  type CryptoVersion,
  collections,
  type PartnerSubjectIndexRecord,
  type SubjectRecord,
  type SubjectType,
  storeKeys,
} from "../store/model.ts";
import { recordPolicyChange } from "./audit.ts";
import type { Actor, AdminDeps } from "./deps.ts";
import { getPartner } from "./partners.ts";
import { type PageOf, type PageRequest, pageUnder } from "./store-scan.ts";

export interface CreateSubjectInput {
  /**
   * Generated (`sub_…`) when absent. Unique per partner; when another partner holds it, a
   * `partner_token` subject is stored as `<partner>~<subject_id>` (storeNewSubject).
   */
  readonly subject_id?: string;
  readonly subject_type: SubjectType;
  readonly display_name: string;
  readonly boundary_id?: string | null;
  /** Default `subject_credentials_v1`. */
  readonly crypto_version?: CryptoVersion;
  /**
   * Which principals stand for the subject (src/core/subject-identity.ts). `binding` for,
   * and only for, external subjects. Otherwise the admin route decides from the caller's
   * role; in-process callers (the dev seed) are platform code and default to `platform_vouched`.
   */
  readonly identity?: SubjectIdentity;
}

/** A stored record as the current model reads it (legacy records lack `identity`). */
export function withIdentity(record: SubjectRecord): SubjectRecord {
  const identity = identityOf(record);
  return record.identity === identity ? record : { ...record, identity };
}

function identityFor(input: CreateSubjectInput, subjectId: string): SubjectIdentity {
  const external = input.subject_type === "external";
  const identity = input.identity ?? (external ? "binding" : "platform_vouched");
  if (external !== (identity === "binding")) {
    throw new AuthorityError(
      "invalid_request",
      "Only external subjects, and all of them, have identity binding.",
    );
  }
  // Derived ids belong to binding mappings: nobody may take one ahead of its mapping.
  if (!external && subjectId.startsWith(DERIVED_SUBJECT_PREFIX)) {
    throw new AuthorityError("invalid_request", `subject_id may not start with "${DERIVED_SUBJECT_PREFIX}".`);
  }
  return identity;
}

export async function createSubject(
  deps: AdminDeps,
  partnerId: string,
  input: CreateSubjectInput,
): Promise<SubjectRecord> {
  await getPartner(deps, partnerId);
  const subjectId = input.subject_id ?? generateId("sub");
  if (!isValidId("subject", subjectId)) {
    throw new AuthorityError("invalid_request", "subject_id must be 1-128 characters of [A-Za-z0-9._:@-].");
  }
  const identity = identityFor(input, subjectId);
  const boundaryId = input.boundary_id ?? null;
  if (boundaryId !== null) {
    const boundary = await deps.store.get<BoundaryRecord>(
      collections.boundaries,
      storeKeys.boundary(partnerId, boundaryId),
    );
    if (boundary === undefined) {
      throw new AuthorityError("invalid_request", "The permission boundary does not exist in this partner.", {
        details: { unknown_boundary_id: boundaryId },
      });
    }
  }
  const asked: SubjectRecord = {
    subject_id: subjectId,
    partner_id: partnerId,
    subject_type: input.subject_type,
    display_name: input.display_name,
    boundary_id: boundaryId,
    crypto_version: input.crypto_version ?? "subject_credentials_v1",
    identity,
    created_at: deps.now().toISOString(),
  };
  const record = await storeNewSubject(deps, asked);
  await provisionSubjectKeys(deps, record);
  const index: PartnerSubjectIndexRecord = { partner_id: partnerId, subject_id: record.subject_id };
  await deps.store.put(
    collections.partnerSubjects,
    storeKeys.partnerSubject(partnerId, record.subject_id),
    index,
  );
  return record;
}

/**
 * A `subject_credentials_v1` subject gets its owner at the crypto service now (custody modes),
 * so its first assignment needs no operator step; when that fails the subject is not kept and
 * the caller gets the specific refusal (`subject_keys_unavailable`, or 503 when it is down).
 */
async function provisionSubjectKeys(deps: Pick<AdminDeps, "store" | "protector">, record: SubjectRecord) {
  const keys = deps.protector.subjectKeys;
  if (keys === undefined || record.crypto_version !== "subject_credentials_v1") return;
  try {
    await keys.provision(record.subject_id);
  } catch (error) {
    await deps.store.delete(collections.subjects, storeKeys.subject(record.subject_id));
    throw error;
  }
}

/**
 * POST /partners/{id}/users/{subject}/rotate-keys: new current keys for the subject's owner at
 * the crypto service (provisioned first when missing). Stored policies keep opening under the
 * retired keys; `authority reprotect` moves them to the new ones.
 */
export async function rotateSubjectKeys(
  deps: Pick<AdminDeps, "store" | "protector" | "now">,
  partnerId: string,
  subjectId: string,
): Promise<{ subject_id: string; rotated_at: string }> {
  const subject = await getSubject(deps, partnerId, subjectId);
  const keys = deps.protector.subjectKeys;
  if (keys === undefined || subject.crypto_version !== "subject_credentials_v1") {
    throw new AuthorityError(
      "conflict",
      keys === undefined
        ? "Subject keys are held at the crypto service only in the crypto and managed policy protection modes."
        : "A platform_service_v2 subject's policies use the service identity's keys.",
    );
  }
  await keys.provision(subject.subject_id);
  await keys.rotate(subject.subject_id);
  return { subject_id: subject.subject_id, rotated_at: deps.now().toISOString() };
}

/**
 * Stores a new subject under its id in the global namespace, unique per partner: the partner
 * may not have a subject of that id already (in either namespace). When another partner holds
 * the global id, a `partner_token` subject is stored in its own partner's namespace instead
 * (`<partner>~<id>`), where that partner's tokens look first — a subject created ahead of a
 * partner under the `sub` its principals use takes nothing from it. Subjects that tokens
 * without a partner claim (platform-vouched) or a binding reach need the global id.
 */
async function storeNewSubject(
  deps: Pick<AdminDeps, "store">,
  record: SubjectRecord,
): Promise<SubjectRecord> {
  const { partner_id: partnerId, subject_id: subjectId } = record;
  const namespaced = partnerSubjectId(partnerId, subjectId);
  const taken = () =>
    new AuthorityError("conflict", "A subject with this id already exists.", {
      details: { subject_id: subjectId },
    });
  if ((await deps.store.get(collections.subjects, storeKeys.subject(namespaced))) !== undefined)
    throw taken();
  if (await deps.store.create(collections.subjects, storeKeys.subject(subjectId), record)) return record;
  const holder = await deps.store.get<SubjectRecord>(collections.subjects, storeKeys.subject(subjectId));
  if (holder?.partner_id === partnerId || record.identity !== "partner_token") throw taken();
  const own: SubjectRecord = { ...record, subject_id: namespaced };
  if (!(await deps.store.create(collections.subjects, storeKeys.subject(namespaced), own))) throw taken();
  return own;
}

/**
 * The stored id of the subject a route or tool names within a partner: `<partner>~<id>` when
 * the partner has that subject in its namespace, else the id as given (a platform-vouched,
 * external or older subject — or none, which the caller answers as not found).
 */
export async function subjectIdIn(
  deps: Pick<AdminDeps, "store">,
  partnerId: string,
  subjectRef: string,
): Promise<string> {
  if (subjectRef.includes(PARTNER_NAMESPACE_SEPARATOR)) return subjectRef;
  const namespaced = partnerSubjectId(partnerId, subjectRef);
  const found = await deps.store.get<SubjectRecord>(collections.subjects, storeKeys.subject(namespaced));
  return found !== undefined && found.partner_id === partnerId ? namespaced : subjectRef;
}

/** The subject when it belongs to this partner; another partner's subject is `not_found` too. */
export async function getSubject(
  deps: Pick<AdminDeps, "store">,
  partnerId: string,
  subjectId: string,
): Promise<SubjectRecord> {
  const record = await deps.store.get<SubjectRecord>(collections.subjects, storeKeys.subject(subjectId));
  if (record === undefined || record.partner_id !== partnerId) {
    throw new AuthorityError("not_found", "No such subject in this partner.");
  }
  return withIdentity(record);
}

/**
 * PATCH /partners/{id}/users/{subject}: changes which principals stand for the subject.
 * The route allows `platform_vouched` to platform admins only; `binding` is never set here.
 */
export async function setSubjectIdentity(
  deps: Pick<AdminDeps, "store" | "now">,
  actor: Actor,
  partnerId: string,
  subjectId: string,
  identity: Exclude<SubjectIdentity, "binding">,
): Promise<SubjectRecord> {
  const current = await getSubject(deps, partnerId, subjectId);
  if (current.identity === "binding") {
    throw new AuthorityError("invalid_request", "An external subject is reached only through its binding.");
  }
  if (current.identity === identity) return current;
  if (identity === "platform_vouched" && current.subject_id.includes(PARTNER_NAMESPACE_SEPARATOR)) {
    // Tokens without a partner claim look a subject up by its global id, which another partner holds.
    throw new AuthorityError(
      "conflict",
      "This subject's id is another partner's in the global namespace: tokens without a partner claim cannot reach it.",
    );
  }
  const updated: SubjectRecord = { ...current, identity };
  await deps.store.put(collections.subjects, storeKeys.subject(subjectId), updated);
  // Who may act as the subject is a policy change: it is in the admin audit like one.
  await recordPolicyChange(
    deps,
    actor,
    { action: "identity", partnerId, subjectId, capabilityId: null },
    deps.now(),
  );
  return updated;
}

export async function listSubjects(
  deps: Pick<AdminDeps, "store">,
  partnerId: string,
  request: PageRequest,
): Promise<PageOf<SubjectRecord>> {
  await getPartner(deps, partnerId);
  const page = await pageUnder<PartnerSubjectIndexRecord>(
    deps.store,
    collections.partnerSubjects,
    `${partnerId}/`,
    request,
  );
  const items: SubjectRecord[] = [];
  for (const item of page.items) {
    const subject = await deps.store.get<SubjectRecord>(
      collections.subjects,
      storeKeys.subject(item.value.subject_id),
    );
    // An index entry without its subject is the trace of an interrupted delete: skip it.
    if (subject !== undefined && subject.partner_id === partnerId) items.push(withIdentity(subject));
  }
  return page.next === undefined ? { items } : { items, next: page.next };
}
