import type { PolicyDocument, Sha256Ref } from "../core/index.ts";
import type { CryptoVersion } from "../store/model.ts";

/** What the store keeps per subject: the encrypted artifact plus facts safe to show. */
export interface PolicyRecord {
  readonly subject_id: string;
  readonly partner_id: string;
  readonly schema_version: PolicyDocument["schema_version"];
  readonly crypto_version: CryptoVersion;
  readonly policy_version: string;
  /** hashCanonical(apis) — the v2 document's own policy_hash. */
  readonly policy_hash: Sha256Ref;
  /** hashCanonical(whole document) — changes with any field, including revocation. */
  readonly document_hash: Sha256Ref;
  /** Increases with every write; sidecars compare it to decide whether a cached policy is current. */
  readonly head: number;
  readonly expires_at: string;
  readonly revoked_at: string | null;
  readonly capabilities: readonly PolicyCapabilitySummary[];
  readonly artifact: string;
  readonly updated_at: string;
}

export interface PolicyCapabilitySummary {
  readonly capability_id: string;
  readonly catalog_version: string;
  readonly allowed_permission_ids: readonly string[];
  readonly auth_profile_ref: string;
}

/** The record's facts without the artifact: what decisions report and admins see. */
export type PolicyRecordFacts = Omit<PolicyRecord, "artifact">;

/**
 * What `policies/<subject_id>` holds: the facts plus the artifact's content address
 * (`artifact_sha256`, the artifact itself in `policy_artifacts`; record-store.ts), or — as
 * written by earlier versions and still read — the artifact inline.
 */
export type StoredPolicyRecord = PolicyRecordFacts &
  (
    | { readonly artifact_sha256: string; readonly artifact?: undefined }
    | { readonly artifact: string; readonly artifact_sha256?: undefined }
  );

export type PublicPolicyRecord = PolicyRecordFacts & {
  readonly state: "active" | "expired" | "revoked";
  readonly encrypted_present: boolean;
};

/** The record callers may see: never the encrypted blob, never a credential. */
export function toPublicPolicyRecord(
  record: PolicyRecord | StoredPolicyRecord,
  now: Date,
): PublicPolicyRecord {
  const { artifact, artifact_sha256, ...visible } = record as StoredPolicyRecord;
  const state =
    record.revoked_at !== null
      ? "revoked"
      : now.getTime() > Date.parse(record.expires_at)
        ? "expired"
        : "active";
  return {
    ...visible,
    state,
    encrypted_present: (artifact?.length ?? 0) > 0 || artifact_sha256 !== undefined,
  };
}
