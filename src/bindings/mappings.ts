/**
 * External mappings: (binding, issuer, external subject) → authority subject. The subject
 * id is derived server-side (derive.ts) and the subject is created as an `external`
 * subject whose policy is v2 (platform_service_v2), bound to the binding's context.
 */
import type { AdminDeps } from "../admin/deps.ts";
import { type PageOf, type PageRequest, pageUnder } from "../admin/store-scan.ts";
import { createSubject } from "../admin/subjects.ts";
import { AuthorityError } from "../errors.ts";
import {
  type BindingRecord,
  bindingCollections,
  bindingKeys,
  type ExternalMappingRecord,
} from "../store/binding-model.ts";
import { collections, type SubjectRecord, storeKeys } from "../store/model.ts";
import { deriveExternalSubject } from "./derive.ts";

export interface CreateMappingInput {
  /** The `sub` the binding's issuer puts in this user's access tokens. */
  readonly external_subject: string;
  readonly display_name?: string;
  readonly boundary_id?: string | null;
}

export interface CreatedMapping {
  readonly mapping: ExternalMappingRecord;
  readonly subject: SubjectRecord;
}

const SUBJECT_ID = /^ext_[a-z2-7]{32}$/;

export async function createMapping(
  deps: AdminDeps,
  binding: BindingRecord,
  input: CreateMappingInput,
): Promise<CreatedMapping> {
  const external = input.external_subject;
  if (external.trim().length === 0 || external.length > 1024) {
    throw new AuthorityError("invalid_request", "external_subject must be 1-1024 characters.", {
      details: { field: "external_subject" },
    });
  }
  const derived = deriveExternalSubject(binding, binding.issuer, external);
  const now = deps.now().toISOString();
  const mapping: ExternalMappingRecord = {
    binding_id: binding.binding_id,
    partner_id: binding.partner_id,
    subject_id: derived.subjectId,
    issuer_hash: derived.context.issuerHash,
    external_subject_hash: derived.context.externalSubjectHash,
    mapping_version: binding.mapping_version,
    display_name: input.display_name ?? derived.subjectId,
    created_at: now,
    updated_at: now,
  };
  const key = bindingKeys.mapping(binding.binding_id, derived.subjectId);
  if (await deps.store.get(bindingCollections.mappings, key)) {
    throw new AuthorityError("conflict", "This external subject is already mapped in this binding.", {
      details: { subject_id: derived.subjectId },
    });
  }
  let subject: SubjectRecord;
  try {
    subject = await createSubject(deps, binding.partner_id, {
      subject_id: derived.subjectId,
      subject_type: "external",
      display_name: mapping.display_name,
      boundary_id: input.boundary_id ?? null,
      crypto_version: "platform_service_v2",
    });
  } catch (error) {
    // A subject left by an interrupted create is reused only if it is exactly this one.
    if (!(error instanceof AuthorityError) || error.code !== "conflict") throw error;
    const existing = await deps.store.get<SubjectRecord>(
      collections.subjects,
      storeKeys.subject(derived.subjectId),
    );
    if (
      existing === undefined ||
      existing.partner_id !== binding.partner_id ||
      existing.subject_type !== "external" ||
      existing.crypto_version !== "platform_service_v2"
    ) {
      throw error;
    }
    subject = existing;
  }
  if (!(await deps.store.create(bindingCollections.mappings, key, mapping))) {
    throw new AuthorityError("conflict", "This external subject is already mapped in this binding.", {
      details: { subject_id: derived.subjectId },
    });
  }
  return { mapping, subject };
}

/** The mapping of one derived subject in a binding, or undefined. */
export async function findMapping(
  deps: Pick<AdminDeps, "store">,
  bindingId: string,
  subjectId: string,
): Promise<ExternalMappingRecord | undefined> {
  if (!SUBJECT_ID.test(subjectId)) return undefined;
  return deps.store.get<ExternalMappingRecord>(
    bindingCollections.mappings,
    bindingKeys.mapping(bindingId, subjectId),
  );
}

export async function getMapping(
  deps: Pick<AdminDeps, "store">,
  binding: BindingRecord,
  subjectId: string,
): Promise<ExternalMappingRecord> {
  const mapping = await findMapping(deps, binding.binding_id, subjectId);
  if (mapping === undefined) throw new AuthorityError("not_found", "No such mapped subject in this binding.");
  return mapping;
}

export async function listMappings(
  deps: Pick<AdminDeps, "store">,
  binding: BindingRecord,
  request: PageRequest,
): Promise<PageOf<ExternalMappingRecord>> {
  const page = await pageUnder<ExternalMappingRecord>(
    deps.store,
    bindingCollections.mappings,
    `${binding.binding_id}/`,
    request,
  );
  const items = page.items.map((item) => item.value);
  return page.next === undefined ? { items } : { items, next: page.next };
}

/** Records the binding's current mapping_version on the mapping (after a re-assignment). */
export async function touchMapping(
  deps: AdminDeps,
  mapping: ExternalMappingRecord,
  mappingVersion: string,
): Promise<ExternalMappingRecord> {
  const updated: ExternalMappingRecord = {
    ...mapping,
    mapping_version: mappingVersion,
    updated_at: deps.now().toISOString(),
  };
  await deps.store.put(
    bindingCollections.mappings,
    bindingKeys.mapping(mapping.binding_id, mapping.subject_id),
    updated,
  );
  return updated;
}
