import {
  capabilityIdSchema,
  nonEmptyString,
  permissionIdSchema,
  sha256RefSchema,
  timestampSchema,
} from "./common.ts";
import { operationSnapshotSchema } from "./operation-snapshot.schema.ts";
import { redactionRuleSchema } from "./redaction-rule.schema.ts";

export const POLICY_SCHEMA_V1 = "authority-user-policy-v1";
export const POLICY_SCHEMA_V2 = "authority-user-policy-v2";
export const CRYPTO_VERSION_V2 = "platform_service_v2";

export const policySubjectSchema = {
  type: "object",
  additionalProperties: false,
  required: ["subject_id", "subject_type", "display_name"],
  properties: {
    subject_id: nonEmptyString(256),
    subject_type: { type: "string", pattern: "^[a-z][a-z0-9_]{0,31}$" },
    display_name: { type: "string", maxLength: 256 },
  },
} as const;

export const policyApiEntrySchema = {
  type: "object",
  additionalProperties: false,
  required: [
    "capability_id",
    "allowed_permission_ids",
    "auth_profile_ref",
    "operations",
    "response_redactions",
  ],
  properties: {
    capability_id: capabilityIdSchema,
    allowed_permission_ids: { type: "array", maxItems: 4096, uniqueItems: true, items: permissionIdSchema },
    auth_profile_ref: nonEmptyString(256),
    operations: { type: "array", maxItems: 4096, items: operationSnapshotSchema },
    response_redactions: {
      type: "object",
      propertyNames: permissionIdSchema,
      additionalProperties: { type: "array", maxItems: 256, items: redactionRuleSchema },
    },
  },
} as const;

const apisSchema = { type: "array", maxItems: 1024, items: policyApiEntrySchema } as const;

/** authority-user-policy-v1: exactly the spec's fields. */
export const policyDocumentV1Schema = {
  $schema: "https://json-schema.org/draft/2020-12/schema",
  $id: "urn:authority:schema:authority-user-policy-v1",
  type: "object",
  additionalProperties: false,
  required: ["schema_version", "policy_version", "subject", "expires_at", "revoked_at", "apis"],
  properties: {
    schema_version: { const: POLICY_SCHEMA_V1 },
    policy_version: timestampSchema,
    subject: policySubjectSchema,
    expires_at: timestampSchema,
    revoked_at: { anyOf: [timestampSchema, { type: "null" }] },
    apis: apisSchema,
  },
} as const;

/**
 * authority-user-policy-v2: the spec's context fields plus `subject` and `apis` as in v1
 * (the spec lists the signed context only; the policy still has to say what is allowed).
 * policy_hash binds the two: it is hashCanonical(apis), checked on validation.
 */
export const policyDocumentV2Schema = {
  $schema: "https://json-schema.org/draft/2020-12/schema",
  $id: "urn:authority:schema:authority-user-policy-v2",
  type: "object",
  additionalProperties: false,
  required: [
    "schema_version",
    "crypto_version",
    "subject_id",
    "authority_partner_id",
    "binding_id",
    "issuer_hash",
    "external_subject_hash",
    "mapping_version",
    "policy_version",
    "policy_hash",
    "expires_at",
    "revoked_at",
    "subject",
    "apis",
  ],
  properties: {
    schema_version: { const: POLICY_SCHEMA_V2 },
    crypto_version: { const: CRYPTO_VERSION_V2 },
    subject_id: nonEmptyString(256),
    authority_partner_id: nonEmptyString(256),
    binding_id: nonEmptyString(256),
    issuer_hash: sha256RefSchema,
    external_subject_hash: sha256RefSchema,
    mapping_version: nonEmptyString(256),
    policy_version: timestampSchema,
    policy_hash: sha256RefSchema,
    expires_at: timestampSchema,
    revoked_at: { anyOf: [timestampSchema, { type: "null" }] },
    subject: policySubjectSchema,
    apis: apisSchema,
  },
} as const;
