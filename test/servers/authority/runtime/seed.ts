/**
 * Writes runtime records straight into a Store, in exactly the shapes of
 * src/store/model.ts and src/policy/record.ts, the way the admin API stores them:
 * partner, subject, capability + catalog version, and a compiled, protected policy.
 */

import type { HttpMethod } from "../../../../src/core/http-method.ts";
import { buildPermissionId, computePolicyHash, hashCanonical } from "../../../../src/core/index.ts";
import type { OperationSnapshot } from "../../../../src/core/operation-snapshot.ts";
import { protectPolicy } from "../../../../src/policy/artifact.ts";
import { compilePolicyDocument, type HeadlessContext } from "../../../../src/policy/compile.ts";
import type { PolicyProtector } from "../../../../src/policy/protector.ts";
import type { PolicyRecord } from "../../../../src/policy/record.ts";
import { readStoredPolicyRecord, writePolicyRecord } from "../../../../src/policy/record-store.ts";
import {
  type AssignmentRecord,
  type CapabilityRecord,
  type CatalogVersionRecord,
  type CryptoVersion,
  collections,
  type PartnerRecord,
  type PartnerSubjectIndexRecord,
  type SubjectRecord,
  storeKeys,
} from "../../../../src/store/model.ts";
import type { Store } from "../../../../src/store/store.ts";

export const PARTNER = "partner-1";
export const SUBJECT = "agent-7";
export const CAPABILITY = "billing-api";
const T0 = "2026-01-01T00:00:00.000Z";

export function snapshot(method: HttpMethod, path: string): OperationSnapshot {
  return {
    operation_id: `${method.toLowerCase()}${path.replace(/[^A-Za-z0-9]/g, "_")}`,
    method,
    path,
    input_schema: {
      path: { type: "object", properties: {} },
      query: { type: "object" },
      headers: { type: "object" },
      body: method === "POST" ? { type: "object" } : null,
    },
    response_schema: { type: "object" },
    upstream_url_template: `https://api.example.com/v1${path}`,
    auth_profile_ref: "billing-static",
    response_rules: [],
    parameter_constraints: [],
  };
}

export const catalog: OperationSnapshot[] = [
  snapshot("GET", "/users/{id}"),
  snapshot("GET", "/users/me"),
  snapshot("DELETE", "/users/{id}"),
  snapshot("POST", "/invoices"),
  snapshot("GET", "/invoices/{invoiceId}/lines/{lineId}"),
];

export async function seedPartner(store: Store, partnerId = PARTNER): Promise<void> {
  const record: PartnerRecord = { partner_id: partnerId, name: partnerId, status: "active", created_at: T0 };
  await store.put(collections.partners, storeKeys.partner(partnerId), record);
}

export async function seedSubject(
  store: Store,
  options: { subjectId?: string; partnerId?: string; cryptoVersion?: CryptoVersion } = {},
): Promise<SubjectRecord> {
  const subjectId = options.subjectId ?? SUBJECT;
  const partnerId = options.partnerId ?? PARTNER;
  const record: SubjectRecord = {
    subject_id: subjectId,
    partner_id: partnerId,
    subject_type: options.cryptoVersion === "platform_service_v2" ? "external" : "agent",
    display_name: `Subject ${subjectId}`,
    boundary_id: null,
    crypto_version: options.cryptoVersion ?? "subject_credentials_v1",
    identity: options.cryptoVersion === "platform_service_v2" ? "binding" : "platform_vouched",
    created_at: T0,
  };
  await store.put(collections.subjects, storeKeys.subject(subjectId), record);
  const index: PartnerSubjectIndexRecord = { partner_id: partnerId, subject_id: subjectId };
  await store.put(collections.partnerSubjects, storeKeys.partnerSubject(partnerId, subjectId), index);
  return record;
}

export async function seedCapability(
  store: Store,
  options: {
    partnerId?: string;
    capabilityId?: string;
    version?: string;
    operations?: OperationSnapshot[];
  } = {},
): Promise<void> {
  const partnerId = options.partnerId ?? PARTNER;
  const capabilityId = options.capabilityId ?? CAPABILITY;
  const version = options.version ?? "1";
  const operations = options.operations ?? catalog;
  const versionRecord: CatalogVersionRecord = {
    partner_id: partnerId,
    capability_id: capabilityId,
    catalog_version: version,
    previous_version: version === "1" ? null : String(Number(version) - 1),
    catalog_hash: hashCanonical(operations),
    source: { openapi: "3.1.0", title: "Billing", api_version: "1.0.0" },
    operations,
    imported_by: "admin",
    imported_at: T0,
  };
  await store.put(
    collections.catalogVersions,
    storeKeys.catalogVersion(partnerId, capabilityId, version),
    versionRecord,
  );
  const record: CapabilityRecord = {
    partner_id: partnerId,
    capability_id: capabilityId,
    name: "Billing",
    current_version: version,
    auth_profile_ref: "billing-static",
    upstream_base_url: "https://api.example.com/v1",
    created_at: T0,
    updated_at: T0,
  };
  await store.put(collections.capabilities, storeKeys.capability(partnerId, capabilityId), record);
}

export interface PolicySeed {
  readonly subject: SubjectRecord;
  /** [method, path template] pairs of the capability's catalog to allow. */
  readonly allow: ReadonlyArray<readonly [HttpMethod, string]>;
  readonly capabilityId?: string;
  readonly expiresAt?: string;
  readonly revokedAt?: string | null;
  readonly now?: Date;
  readonly headless?: HeadlessContext;
  /** Overrides the head (default previous head + 1). */
  readonly head?: number;
  /** Overrides the reviewed snapshots (default snapshot() of each allowed pair), e.g. to sign constraints. */
  readonly operations?: OperationSnapshot[];
}

/** Compiles, protects and stores the subject's policy; returns the stored record. */
export async function seedPolicy(
  store: Store,
  protector: PolicyProtector,
  seed: PolicySeed,
): Promise<PolicyRecord> {
  const subject = seed.subject;
  const capabilityId = seed.capabilityId ?? CAPABILITY;
  const now = seed.now ?? new Date();
  const expiresAt = seed.expiresAt ?? new Date(now.getTime() + 86_400_000).toISOString();
  const allowed = seed.allow.map(([method, path]) => buildPermissionId(capabilityId, method, path));
  const operations = seed.operations ?? seed.allow.map(([method, path]) => snapshot(method, path));
  const assignment: AssignmentRecord = {
    partner_id: subject.partner_id,
    subject_id: subject.subject_id,
    capability_id: capabilityId,
    catalog_version: "1",
    allowed_permission_ids: allowed,
    auth_profile_ref: "billing-static",
    operations,
    response_redactions: {},
    expires_at: expiresAt,
    assigned_by: "admin",
    assigned_at: now.toISOString(),
  };
  await store.put(
    collections.assignments,
    storeKeys.assignment(subject.partner_id, subject.subject_id, capabilityId),
    assignment,
  );
  const document = compilePolicyDocument({
    subject: {
      subject_id: subject.subject_id,
      subject_type: subject.subject_type,
      display_name: subject.display_name,
    },
    cryptoVersion: subject.crypto_version,
    assignments: [assignment],
    expiresAt,
    revokedAt: seed.revokedAt ?? null,
    now,
    ...(seed.headless === undefined ? {} : { headless: seed.headless }),
  });
  const protectedPolicy = await protectPolicy(document, protector, subject.partner_id);
  const previous = await readStoredPolicyRecord(store, subject.subject_id);
  const record: PolicyRecord = {
    subject_id: subject.subject_id,
    partner_id: subject.partner_id,
    schema_version: document.schema_version,
    crypto_version: subject.crypto_version,
    policy_version: document.policy_version,
    policy_hash: computePolicyHash(document.apis),
    document_hash: protectedPolicy.documentHash,
    head: seed.head ?? (previous?.head ?? 0) + 1,
    expires_at: document.expires_at,
    revoked_at: document.revoked_at,
    capabilities: [
      {
        capability_id: capabilityId,
        catalog_version: "1",
        allowed_permission_ids: allowed,
        auth_profile_ref: "billing-static",
      },
    ],
    artifact: protectedPolicy.artifact,
    updated_at: now.toISOString(),
  };
  await writePolicyRecord(store, record);
  return record;
}

/** Partner + capability + subject + a policy allowing `allow` (default GET /users/{id}, POST /invoices). */
export async function seedAll(
  store: Store,
  protector: PolicyProtector,
  options: { subjectId?: string; allow?: PolicySeed["allow"] } = {},
): Promise<{ subject: SubjectRecord; policy: PolicyRecord }> {
  await seedPartner(store);
  await seedCapability(store);
  const subject = await seedSubject(
    store,
    options.subjectId === undefined ? {} : { subjectId: options.subjectId },
  );
  const policy = await seedPolicy(store, protector, {
    subject,
    allow: options.allow ?? [
      ["GET", "/users/{id}"],
      ["POST", "/invoices"],
    ],
  });
  return { subject, policy };
}
