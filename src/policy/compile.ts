import {
  CRYPTO_VERSION_V2,
  computePolicyHash,
  POLICY_SCHEMA_V1,
  POLICY_SCHEMA_V2,
  type PolicyApiEntry,
  type PolicyDocument,
  type PolicySubject,
  type Sha256Ref,
} from "../core/index.ts";
import type { AssignmentRecord, CryptoVersion } from "../store/model.ts";

/** The v2 context bound into a headless subject's policy, derived server-side. */
export interface HeadlessContext {
  readonly partnerId: string;
  readonly bindingId: string;
  readonly issuerHash: Sha256Ref;
  readonly externalSubjectHash: Sha256Ref;
  readonly mappingVersion: string;
}

export interface CompileInput {
  readonly subject: PolicySubject;
  readonly cryptoVersion: CryptoVersion;
  /** One per assigned capability; the document gets one `apis` entry each, ordered by capability id. */
  readonly assignments: readonly AssignmentRecord[];
  readonly expiresAt: string;
  readonly revokedAt: string | null;
  readonly now: Date;
  /** Required for platform_service_v2 (a v2 document); absent for v1. */
  readonly headless?: HeadlessContext;
}

export function apiEntryOf(assignment: AssignmentRecord): PolicyApiEntry {
  return {
    capability_id: assignment.capability_id,
    allowed_permission_ids: [...assignment.allowed_permission_ids].sort(),
    auth_profile_ref: assignment.auth_profile_ref,
    operations: assignment.operations,
    response_redactions: assignment.response_redactions,
  };
}

/** Builds the subject's single policy document from its assignments (pure). */
export function compilePolicyDocument(input: CompileInput): PolicyDocument {
  const apis = [...input.assignments]
    .sort((a, b) => (a.capability_id < b.capability_id ? -1 : a.capability_id > b.capability_id ? 1 : 0))
    .map(apiEntryOf);
  const common = {
    policy_version: input.now.toISOString(),
    expires_at: input.expiresAt,
    revoked_at: input.revokedAt,
  };
  if (input.cryptoVersion === "subject_credentials_v1") {
    return { schema_version: POLICY_SCHEMA_V1, ...common, subject: input.subject, apis };
  }
  const headless = input.headless;
  if (headless === undefined) throw new TypeError("a platform_service_v2 policy needs its headless context");
  return {
    schema_version: POLICY_SCHEMA_V2,
    crypto_version: CRYPTO_VERSION_V2,
    subject_id: input.subject.subject_id,
    authority_partner_id: headless.partnerId,
    binding_id: headless.bindingId,
    issuer_hash: headless.issuerHash,
    external_subject_hash: headless.externalSubjectHash,
    mapping_version: headless.mappingVersion,
    policy_hash: computePolicyHash(apis),
    ...common,
    subject: input.subject,
    apis,
  };
}
