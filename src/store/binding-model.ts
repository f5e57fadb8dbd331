/**
 * Records of the headless partner API (docs/bindings.md) and their Store collections.
 *
 * A binding is one partner connection: the partner's OIDC issuer whose access tokens
 * carry end users ("user assertions"), the workload clients the partner's servers use to
 * call the authority, and the external subjects mapped from that issuer.
 */
import type { Sha256Ref } from "../core/canonical-json.ts";

export const bindingCollections = {
  /** binding_id → BindingRecord */
  bindings: "bindings",
  /** `<partner_id>/<binding_id>` → BindingIndexRecord (lists a partner's bindings). */
  partnerBindings: "partner_bindings",
  /** client_id → WorkloadClientRecord */
  workloadClients: "workload_clients",
  /** `<binding_id>/<client_id>` → WorkloadClientIndexRecord */
  bindingWorkloadClients: "binding_workload_clients",
  /** `<binding_id>/<subject_id>` → ExternalMappingRecord */
  mappings: "binding_mappings",
  /** `<binding_id>/<key hash>` → IdempotencyRecord (with a TTL) */
  idempotency: "binding_idempotency",
  /** `<binding_id>/<evidence_id>` → InvocationEvidence */
  invocations: "binding_invocations",
  /** binding_id → ExperienceRecord (the end-user-facing configuration; experience.ts) */
  experiences: "binding_experiences",
  /** Workload-token signing key (one document, id `signing`). */
  tokenKeys: "workload_token_keys",
} as const;

export const bindingKeys = {
  binding: (bindingId: string): string => bindingId,
  partnerBinding: (partnerId: string, bindingId: string): string => `${partnerId}/${bindingId}`,
  workloadClient: (clientId: string): string => clientId,
  bindingWorkloadClient: (bindingId: string, clientId: string): string => `${bindingId}/${clientId}`,
  mapping: (bindingId: string, subjectId: string): string => `${bindingId}/${subjectId}`,
  idempotency: (bindingId: string, keyHash: string): string => `${bindingId}/${keyHash}`,
  invocation: (bindingId: string, evidenceId: string): string => `${bindingId}/${evidenceId}`,
  experience: (bindingId: string): string => bindingId,
} as const;

/** Scope a workload token needs for `POST /v1/bindings/{id}/invoke`. */
export const INVOKE_SCOPE = "authority/bindings.invoke";
/** Scope for `POST /v1/authority/verify` and `POST /v1/broker/execute` (the spec's name). */
export const BROKER_EXECUTE_SCOPE = "authority/authority.broker.execute";
export const workloadScopes = [INVOKE_SCOPE, BROKER_EXECUTE_SCOPE] as const;
export type WorkloadScope = (typeof workloadScopes)[number];

/** A JSON Web Key Set given inline (tests, air-gapped partners) instead of a URL. */
export interface InlineJwks {
  readonly keys: readonly Readonly<Record<string, unknown>>[];
}

export interface BindingRecord {
  readonly binding_id: string;
  readonly partner_id: string;
  /** Exact `iss` of the partner's user access tokens. */
  readonly issuer: string;
  /** Where the issuer's keys are published; null when `jwks` is inline. */
  readonly jwks_url: string | null;
  readonly jwks: InlineJwks | null;
  /** Required `aud` of user assertions. */
  readonly audience: string;
  /** Claim that names the tenant, and the value it must have. */
  readonly tenant_claim: string;
  readonly tenant_value: string;
  /** Accepted asymmetric JWS algorithms of user assertions. */
  readonly algorithms: readonly string[];
  /**
   * Bound into every v2 policy compiled for this binding's subjects. Changing it makes
   * every existing policy of the binding a context mismatch until it is re-assigned.
   */
  readonly mapping_version: string;
  readonly active: boolean;
  /** The partner auth profile assignments of this binding use (null: the capability's own). */
  readonly auth_profile_ref: string | null;
  readonly created_at: string;
  readonly updated_at: string;
}

export interface BindingIndexRecord {
  readonly partner_id: string;
  readonly binding_id: string;
}

export interface WorkloadClientRecord {
  readonly client_id: string;
  readonly binding_id: string;
  readonly partner_id: string;
  readonly name: string;
  readonly scopes: readonly WorkloadScope[];
  /** scrypt hash (src/identity/secret-hash.ts); the secret itself is shown once at creation. */
  readonly secret_hash: string;
  readonly status: "active" | "revoked";
  readonly created_at: string;
  readonly revoked_at: string | null;
}

export interface WorkloadClientIndexRecord {
  readonly binding_id: string;
  readonly client_id: string;
}

/** Maps one external identity of the binding's issuer to an authority subject. */
export interface ExternalMappingRecord {
  readonly binding_id: string;
  readonly partner_id: string;
  readonly subject_id: string;
  readonly issuer_hash: Sha256Ref;
  readonly external_subject_hash: Sha256Ref;
  /** The binding's mapping_version when the mapping was created or last assigned. */
  readonly mapping_version: string;
  readonly display_name: string;
  readonly created_at: string;
  readonly updated_at: string;
}

/** One tool (a permission id) the binding's end users see, with the partner's wording. */
export interface ExperienceTool {
  readonly permission_id: string;
  /** Shown instead of the tool's generated name where a listing shows tools. */
  readonly display_name: string | null;
  readonly description: string | null;
}

/** One capability the binding's end users see; `tools` null: every tool the policy allows. */
export interface ExperienceCapability {
  readonly capability_id: string;
  readonly tools: readonly ExperienceTool[] | null;
}

/**
 * What a binding's end users see (docs/bindings.md "Experience"). It only narrows what each
 * user's policy allows: a capability or tool outside an enabled experience is denied, a
 * disabled experience denies everything of the binding, no experience changes nothing.
 */
export interface ExperienceRecord {
  readonly binding_id: string;
  readonly partner_id: string;
  readonly enabled: boolean;
  readonly display_name: string | null;
  readonly capabilities: readonly ExperienceCapability[];
  readonly consent: { readonly text: string; readonly version: string } | null;
  /** 1 on creation, +1 on every change. */
  readonly revision: number;
  readonly created_at: string;
  readonly updated_at: string;
}

/** The stored outcome of one idempotent request. */
export interface StoredResponse {
  readonly status_code: number;
  readonly body: unknown;
  /** The decision record's receipt (`x-authority-receipt`), when the decision was recorded. */
  readonly receipt?: string;
}

export interface IdempotencyRecord {
  /**
   * `in_progress`: claimed, the upstream not contacted yet (the claim lapses after the lease);
   * `sending`: the upstream call may have been sent (kept for the result's TTL: once its lease
   * has passed, the claimant is taken as dead and the key is refused, never run again);
   * `completed`: the result, replayed.
   */
  readonly state: "in_progress" | "sending" | "completed";
  /** hashCanonical({ binding, subject, body }): the same key must carry the same request. */
  readonly request_hash: Sha256Ref;
  /**
   * The claimant's random token (decision 2991): every later write of the key is made only
   * while the stored record still carries it. Records written before it existed have none.
   */
  readonly claim?: string;
  readonly created_at: string;
  /** `sending`: until when the claimant is taken to be alive (ISO time). */
  readonly lease_until?: string;
  readonly response?: StoredResponse;
}

export interface RedactionEventRecord {
  readonly path: string;
  readonly mode: string;
  readonly source: string;
}

/** Audit evidence of one binding invoke or broker execute (allowed or denied). */
export interface InvocationEvidence {
  readonly kind: "binding_invocation";
  readonly evidence_id: string;
  readonly transport: "invoke" | "broker";
  readonly binding_id: string;
  readonly partner_id: string;
  readonly client_id: string;
  readonly subject_id: string;
  readonly capability_id: string | null;
  readonly permission_id: string | null;
  readonly method: string | null;
  /** Requested path without query string. */
  readonly path: string | null;
  readonly decision: "allowed" | "denied";
  readonly reason: string | null;
  /** Error-table code when the call failed after the decision (execution errors). */
  readonly error_code: string | null;
  /** hashCanonical of { binding, subject, body } as received. */
  readonly request_hash: Sha256Ref;
  /** The executor's hash of the upstream request (before credentials); null when not built. */
  readonly upstream_request_hash: string | null;
  readonly response_hash: string | null;
  /** The verified policy's `policy_hash` (its apis) and whole-document hash. */
  readonly policy_hash: string | null;
  readonly document_hash: string | null;
  readonly policy_version: string | null;
  readonly upstream_status: number | null;
  readonly redaction_events: readonly RedactionEventRecord[];
  readonly envelope_id: string | null;
  readonly timings: {
    readonly total_ms: number;
    readonly decision_ms: number;
    readonly upstream_ms: number | null;
  };
  readonly idempotency_key_hash: string | null;
  readonly requestId: string;
  readonly time: string;
}
