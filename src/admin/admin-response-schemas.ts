/**
 * JSON Schemas of the admin API's response bodies (docs/admin-api.md), for the OpenAPI
 * document and its conformance tests. Records are open (`additionalProperties` allowed) where
 * the domain may add fields; the required fields are the ones the docs promise.
 */

const text = { type: "string" } as const;
const nullableText = { type: ["string", "null"] } as const;
const count = { type: "integer", minimum: 0 } as const;

/** An object with these required fields; any other field allowed. */
export const record = (required: readonly string[], properties: Record<string, unknown> = {}) =>
  ({ type: "object", required: [...required], properties, additionalProperties: true }) as const;

/** `{ items: T[], next? }`, every list of the admin API. */
export const listOf = (item: unknown) =>
  ({
    type: "object",
    required: ["items"],
    additionalProperties: false,
    properties: { items: { type: "array", items: item }, next: text },
  }) as const;

export const noContent = { type: "null", description: "No body." } as const;

export const partnerSchema = record(["partner_id", "name", "status", "created_at"], {
  partner_id: text,
  name: text,
  status: text,
  created_at: text,
});

export const partnerDeletionSchema = record(["partner_id", "deleted"], {
  partner_id: text,
  deleted: { type: "object", additionalProperties: count },
  revoked_policies: count,
  deleted_workload_clients: count,
});

export const subjectSchema = record(
  ["subject_id", "partner_id", "subject_type", "display_name", "identity", "created_at"],
  {
    subject_id: text,
    partner_id: text,
    subject_type: text,
    display_name: text,
    boundary_id: nullableText,
    crypto_version: text,
    identity: text,
    created_at: text,
  },
);

export const rotatedKeysSchema = record(["subject_id", "rotated_at"], {
  subject_id: text,
  rotated_at: text,
});

export const capabilityViewSchema = record(["capability_id", "partner_id", "catalog_version"], {
  capability_id: text,
  partner_id: text,
  catalog_version: text,
  catalog_hash: text,
  operation_count: count,
});

export const capabilityDetailSchema = record(["capability_id", "catalog_version", "versions", "operations"], {
  capability_id: text,
  catalog_version: text,
  versions: { type: "array", items: text },
  operations: { type: "array", items: record(["permission_id"], { permission_id: text }) },
});

export const importResultSchema = record(["is_new_version"], { is_new_version: { type: "boolean" } });
export const previewSchema = record([]);

export const publicPolicySchema = record(["subject_id", "partner_id"], {
  subject_id: text,
  partner_id: text,
});
export const assignmentSchema = record(["subject_id", "capability_id"], {
  subject_id: text,
  capability_id: text,
});

export const assignResultSchema = record(["policy", "assignment", "warnings"], {
  policy: publicPolicySchema,
  assignment: assignmentSchema,
  warnings: { type: "array", items: text },
});

export const policyOnlySchema = record(["policy"], { policy: publicPolicySchema });
export const revokeResultSchema = record(["policy", "changed"], {
  policy: publicPolicySchema,
  changed: { type: "boolean" },
});

export const boundarySchema = record(
  ["partner_id", "boundary_id", "name", "allowed_capabilities", "allowed_permission_patterns"],
  {
    partner_id: text,
    boundary_id: text,
    name: text,
    allowed_capabilities: { type: "array", items: text },
    allowed_permission_patterns: { type: "array", items: text },
    max_policy_ttl_seconds: { type: ["integer", "null"] },
    updated_at: text,
  },
);

export const boundaryUpdateSchema = record(["boundary", "assignments_outside"], {
  boundary: boundarySchema,
  assignments_outside: { type: "array", items: record(["subject_id", "capability_id"]) },
});

/** An auth profile as the API shows it: never its secret material. */
export const authProfileViewSchema = record([]);

/** A user's grant as the API shows it: closed, so no token can ride along undocumented. */
export const userGrantSchema = {
  type: "object",
  additionalProperties: false,
  required: [
    "partner_id",
    "profile_id",
    "subject_id",
    "connected",
    "expires_at",
    "scope",
    "has_refresh_token",
  ],
  properties: {
    partner_id: text,
    profile_id: text,
    subject_id: text,
    connected: { type: "boolean" },
    expires_at: nullableText,
    scope: nullableText,
    has_refresh_token: { type: "boolean" },
  },
} as const;

export const startedUserGrantSchema = {
  type: "object",
  additionalProperties: false,
  required: ["authorization_url", "state", "expires_at"],
  properties: { authorization_url: text, state: text, expires_at: text },
} as const;

export const disconnectedUserGrantSchema = {
  type: "object",
  additionalProperties: false,
  required: ["grant", "revocation", "dropped_tokens"],
  properties: {
    grant: userGrantSchema,
    revocation: { enum: ["revoked", "failed", "not_supported", "no_grant"] },
    dropped_tokens: count,
  },
} as const;

export const bindingSchema = record(["binding_id", "partner_id"], { binding_id: text, partner_id: text });
export const workloadClientSchema = record(["client_id", "binding_id", "status"], {
  client_id: text,
  binding_id: text,
  scopes: { type: "array", items: text },
  status: text,
  revoked_at: nullableText,
});
/** A new workload client: its secret is in this one answer only. */
export const createdWorkloadClientSchema = record(["client", "client_secret"], {
  client: workloadClientSchema,
  client_secret: text,
});
export const subjectMappingSchema = record([]);
export const bindingApiSchema = record([]);
export const bindingAuthProfileSchema = record(["auth_profile_ref"], {
  auth_profile_ref: nullableText,
  profile: { anyOf: [authProfileViewSchema, { type: "null" }] },
});
export const evidenceSchema = record([]);

/** The sidecar's reads (docs/sidecar.md): open records, the sidecar checks their content. */
export const sidecarPolicySchema = record(["subject", "policy", "signed_policy"], {
  subject: record(["subject_id", "partner_id"]),
  policy: record([]),
});
export const sidecarPolicyKeysSchema = record([]);
export const sidecarCapabilitySchema = record(["capability"], { capability: record([]) });
export const sidecarDecisionsAcceptedSchema = record(["accepted"], { accepted: count });
export const sidecarAuthMaterialSchema = record([]);
/** GET /v1/sidecar/self: the sidecar's own credentials, as the authority accepted them. */
export const sidecarSelfSchema = record(["subject", "partner_id"], {
  subject: text,
  partner_id: nullableText,
});

/** GET /v1/sidecar/policy-changes: a page of the policy change log and the lease it grants. */
export const sidecarPolicyChangesSchema = {
  type: "object",
  required: ["cursor", "changes", "complete", "reset", "lease_ms"],
  additionalProperties: false,
  properties: {
    cursor: count,
    changes: {
      type: "array",
      items: {
        type: "object",
        required: ["subject_id", "head", "document_hash", "revoked_at"],
        additionalProperties: false,
        properties: { subject_id: text, head: count, document_hash: nullableText, revoked_at: nullableText },
      },
    },
    complete: { type: "boolean" },
    reset: { type: "boolean" },
    lease_ms: count,
  },
} as const;

/** GET /admin/diagnostics: facts and warnings (docs/admin-api.md, "Diagnostics"). */
export const diagnosticsSchema = record(
  ["generated_at", "persistence", "counts", "backends", "configuration", "warnings"],
  {
    generated_at: text,
    persistence: record(["backend"]),
    counts: record([]),
    backends: record([]),
    configuration: record([]),
    mcp: record([]),
    oauth: record([]),
    resources: {},
    warnings: { type: "array", items: record([]) },
  },
);
