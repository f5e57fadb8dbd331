/**
 * Records the authority service keeps, one Store collection each. Partner-scoped records
 * are keyed `<partner_id>/<local id>` so a partner's records list together by prefix.
 */
import type { OperationSnapshot } from "../core/operation-snapshot.ts";
import type { PermissionId } from "../core/permission-id.ts";
import type { RedactionRule } from "../core/redaction.ts";

export const collections = {
  partners: "partners",
  subjects: "subjects",
  partnerSubjects: "partner_subjects",
  capabilities: "capabilities",
  catalogVersions: "catalog_versions",
  boundaries: "boundaries",
  authProfiles: "auth_profiles",
  assignments: "policy_assignments",
  policies: "policies",
} as const;

export const logs = { audit: "audit", mcpAudit: "mcp_audit", evidence: "evidence" } as const;
export const counters = { usage: "usage" } as const;

export const partnerKey = (partnerId: string, localId: string): string => `${partnerId}/${localId}`;

export interface PartnerRecord {
  readonly partner_id: string;
  readonly name: string;
  readonly status: "active";
  readonly created_at: string;
}

export const subjectTypes = ["agent", "user", "service", "external"] as const;
export type SubjectType = (typeof subjectTypes)[number];

export const cryptoVersions = ["subject_credentials_v1", "platform_service_v2"] as const;
export type CryptoVersion = (typeof cryptoVersions)[number];

export interface SubjectRecord {
  readonly subject_id: string;
  readonly partner_id: string;
  readonly subject_type: SubjectType;
  readonly display_name: string;
  readonly boundary_id: string | null;
  readonly crypto_version: CryptoVersion;
  readonly created_at: string;
}

export interface CapabilityRecord {
  readonly partner_id: string;
  readonly capability_id: string;
  readonly name: string;
  readonly current_version: string;
  readonly auth_profile_ref: string;
  readonly upstream_base_url: string | null;
  readonly created_at: string;
  readonly updated_at: string;
}

export interface BoundaryRecord {
  readonly partner_id: string;
  readonly boundary_id: string;
  readonly name: string;
  /** Capabilities a subject under this boundary may be assigned. */
  readonly allowed_capabilities: readonly string[];
  /** Permission-ID patterns (`*` matches any run of characters) the allowlist must stay within. */
  readonly allowed_permission_patterns: readonly string[];
  /** Longest policy lifetime an assignment may ask for. */
  readonly max_policy_ttl_seconds: number | null;
  readonly updated_at: string;
}

/** The inputs of one capability's entry in a subject's compiled policy. */
export interface AssignmentRecord {
  readonly partner_id: string;
  readonly subject_id: string;
  readonly capability_id: string;
  readonly catalog_version: string;
  readonly allowed_permission_ids: readonly PermissionId[];
  readonly auth_profile_ref: string;
  readonly operations: readonly OperationSnapshot[];
  readonly response_redactions: Readonly<Record<string, readonly RedactionRule[]>>;
  readonly expires_at: string;
  readonly assigned_by: string;
  readonly assigned_at: string;
}
