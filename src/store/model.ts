/**
 * Records the authority service keeps, one Store collection each. Partner-scoped records
 * are keyed `<partner_id>/<local id>` so a partner's records list together by prefix.
 */

import type { Sha256Ref } from "../core/canonical-json.ts";
import type { OperationSnapshot } from "../core/operation-snapshot.ts";
import type { PermissionId } from "../core/permission-id.ts";
import type { RedactionRule } from "../core/redaction.ts";
import type { SubjectIdentity } from "../core/subject-identity.ts";

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
  /** A subject's shadow policy record (same shape and protection as `policies`; decision 2761). */
  shadowPolicies: "shadow_policies",
  /** Shadow assignments, `<partner>/<subject>/<capability>` like `policy_assignments`. */
  shadowAssignments: "shadow_assignments",
  /** Capabilities in the platform-wide log-only mode, `<partner>/<capability>` (src/admin/log-only.ts). */
  logOnlyCapabilities: "log_only_capabilities",
  /** Policy artifacts by content address (record-store.ts); the record names the one in force. */
  policyArtifacts: "policy_artifacts",
  /** Per authority process: when it last granted a sidecar freshness lease (src/policy/change-log.ts). */
  sidecarLeases: "sidecar_leases",
  /** Users' OAuth token sets, sealed (`<partner>/<profile>/<subject>`, src/admin/user-token-sets.ts). */
  userTokenSets: "oauth_user_token_sets",
  /** Started user grants awaiting their callback, by state hash (src/admin/user-grants.ts). */
  userAuthorizations: "oauth_user_authorizations",
  /** Per replica: the newest checkpointed head of its decision chains (src/audit/checkpoints.ts). */
  auditChainHeads: "audit_chain_heads",
} as const;

export const logs = {
  audit: "audit",
  mcpAudit: "mcp_audit",
  evidence: "evidence",
  /** Every stored policy change (subject, partner, head, document hash, revocation): what sidecars follow. */
  policyChanges: "policy_changes",
  /** Signed checkpoints of the decision chains (src/audit/checkpoints.ts). */
  auditCheckpoints: "audit_checkpoints",
} as const;
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
  /**
   * Which principals stand for the subject (src/core/subject-identity.ts). Records written
   * before it existed are migrated at start (subject-identity-migration.ts) and read with
   * `identityOf` meanwhile.
   */
  readonly identity: SubjectIdentity;
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

/**
 * Store ids of every record, in one place so the admin services and the runtime path
 * agree. Subject ids are global (one subject belongs to one partner), and so is the
 * subject's one policy record; every other record is partner-scoped. Ids never contain
 * "/", so a prefix such as `<partner>/<subject>/` lists exactly one subject's records.
 */
export const storeKeys = {
  partner: (partnerId: string): string => partnerId,
  subject: (subjectId: string): string => subjectId,
  partnerSubject: (partnerId: string, subjectId: string): string => partnerKey(partnerId, subjectId),
  capability: (partnerId: string, capabilityId: string): string => partnerKey(partnerId, capabilityId),
  /** `<partner>/<capability>/<version>` (the runtime's catalogVersionId spells it the same). */
  catalogVersion: (partnerId: string, capabilityId: string, version: string): string =>
    partnerKey(partnerId, `${capabilityId}/${version}`),
  boundary: (partnerId: string, boundaryId: string): string => partnerKey(partnerId, boundaryId),
  authProfile: (partnerId: string, profileId: string): string => partnerKey(partnerId, profileId),
  assignment: (partnerId: string, subjectId: string, capabilityId: string): string =>
    `${partnerId}/${subjectId}/${capabilityId}`,
  /** The subject's one policy record (src/policy/record.ts PolicyRecord), read by the runtime loader. */
  policy: (subjectId: string): string => subjectId,
} as const;

/** Value of the `partner_subjects` index: lists a partner's subjects by prefix. */
export interface PartnerSubjectIndexRecord {
  readonly partner_id: string;
  readonly subject_id: string;
}

/**
 * One immutable imported version of a capability's catalog. A re-import that changes any
 * operation stores a new version; existing versions (and the snapshots policies copied
 * from them) are never rewritten.
 */
export interface CatalogVersionRecord {
  readonly partner_id: string;
  readonly capability_id: string;
  /** Positive integer as a decimal string ("1", "2", …). */
  readonly catalog_version: string;
  readonly previous_version: string | null;
  /** hashCanonical of the operations in permission-id order. */
  readonly catalog_hash: Sha256Ref;
  readonly source: {
    readonly openapi: string;
    readonly title: string;
    readonly api_version: string;
  };
  readonly operations: readonly OperationSnapshot[];
  readonly imported_by: string;
  readonly imported_at: string;
}

/** The fields every stored auth profile has. The secret is only ever stored sealed. */
interface AuthProfileRecordBase {
  readonly partner_id: string;
  readonly profile_id: string;
  /**
   * ML-KEM-768 envelope (base64) of the secret, sealed to the key ring named by
   * `authProfileSecretOwner(partner_id)` with associated data binding it to this profile.
   */
  readonly sealed_secret: string;
  readonly created_at: string;
  readonly updated_at: string;
  readonly secret_updated_at: string;
}

export interface ApiKeyAuthProfileRecord extends AuthProfileRecordBase {
  readonly type: "static";
  readonly kind: "api_key";
  readonly in: "header" | "query";
  /** Header or query parameter name. */
  readonly name: string;
}

export interface BearerAuthProfileRecord extends AuthProfileRecordBase {
  readonly type: "static";
  readonly kind: "bearer";
}

export interface ClientCredentialsAuthProfileRecord extends AuthProfileRecordBase {
  readonly type: "oauth_client_credentials";
  readonly token_url: string;
  readonly client_id: string;
  readonly scopes: readonly string[];
  readonly audience: string | null;
  readonly client_auth: "client_secret_basic" | "client_secret_post";
}

/** A user's delegated grant (authorization code + PKCE); `sealed_secret` is "" for a public client. */
export interface OAuthUserAuthProfileRecord extends AuthProfileRecordBase {
  readonly type: "oauth_user";
  readonly authorization_url: string;
  readonly token_url: string;
  readonly revocation_url: string | null;
  readonly client_id: string;
  readonly scopes: readonly string[];
  readonly audience: string | null;
  readonly client_auth: "client_secret_basic" | "client_secret_post";
  /** The one redirect URI registered at the provider: no request chooses another. */
  readonly redirect_uri: string;
}

/** On-behalf-of (RFC 8693); `sealed_secret` is "" for a public client. */
export interface TokenExchangeAuthProfileRecord extends AuthProfileRecordBase {
  readonly type: "oauth_token_exchange";
  readonly token_url: string;
  readonly client_id: string;
  readonly scopes: readonly string[];
  readonly audience: string | null;
  readonly resource: string | null;
  readonly client_auth: "client_secret_basic" | "client_secret_post";
  readonly subject_token_type: "access_token" | "jwt" | "id_token";
}

export type AuthProfileRecord =
  | ApiKeyAuthProfileRecord
  | BearerAuthProfileRecord
  | ClientCredentialsAuthProfileRecord
  | OAuthUserAuthProfileRecord
  | TokenExchangeAuthProfileRecord;

/** A grant started and not yet completed (collection `oauth_user_authorizations`, key: sha256 of the state). */
export interface UserAuthorizationRecord {
  readonly partner_id: string;
  readonly profile_id: string;
  readonly subject_id: string;
  /** Who started it: only the same principal completes it. */
  readonly actor: string;
  readonly redirect_uri: string;
  /** The PKCE verifier, sealed to the partner's auth-profile ring, bound to this state. */
  readonly sealed_verifier: string;
  readonly expires_at: string;
}

/** A user grant action, in the `audit` log. Never a token. */
export interface UserGrantAuditRecord {
  readonly kind: "user_grant";
  readonly action: "start" | "complete" | "complete_failed" | "refresh" | "refresh_failed" | "disconnect";
  /** The admin's bearer subject, or `runtime` for a refresh that failed during a call. */
  readonly actor: string;
  readonly partner_id: string;
  readonly profile_id: string;
  readonly subject_id: string;
  /** Why it failed (`details.issue`, `oauth_error`), or what a disconnect did at the provider. */
  readonly outcome: string | null;
  readonly time: string;
  readonly requestId: string | null;
}

/** Owner name of the key ring that seals a partner's auth-profile secrets. */
export const authProfileSecretOwner = (partnerId: string): string => `auth-profile-secrets:${partnerId}`;

/**
 * What the admin API appends to the `audit` log for every policy change. The runtime
 * path appends its decision records to the same log, so GET /admin/audit shows both.
 */
/** A change of a binding's end-user experience (src/bindings/experience.ts), in the `audit` log. */
export interface BindingChangeAuditRecord {
  readonly kind: "binding_change";
  readonly action: "experience_put" | "experience_update" | "experience_delete";
  readonly actor: string;
  readonly partner_id: string;
  readonly binding_id: string;
  /** The experience's revision after the change, and whether it is enabled. */
  readonly revision: number;
  readonly enabled: boolean;
  readonly time: string;
  readonly requestId: string;
}

/** A platform admin turned a capability's log-only mode on or off (decision 2761). */
export interface LogOnlyChangeAuditRecord {
  readonly kind: "log_only_change";
  readonly action: "enable" | "disable";
  readonly actor: string;
  readonly partner_id: string;
  readonly capability_id: string;
  readonly reason: string | null;
  readonly time: string;
  readonly requestId: string;
}

export interface PolicyChangeAuditRecord {
  readonly kind: "policy_change";
  /**
   * `identity`: which principals stand for the subject changed (PATCH …/users/{subject}).
   * `shadow_assign`, `shadow_unassign`: the assignment's shadow policy was set or removed;
   * `promote_shadow`: the shadow became the enforced assignment (decision 2761).
   */
  readonly action:
    | "assign"
    | "unassign"
    | "revoke"
    | "identity"
    | "shadow_assign"
    | "shadow_unassign"
    | "promote_shadow";
  /** Subject of the admin's bearer token. */
  readonly actor: string;
  readonly partner_id: string;
  readonly subject_id: string;
  /** Null when the change concerns the whole policy (revocation). */
  readonly capability_id: string | null;
  readonly time: string;
  readonly requestId: string;
}
