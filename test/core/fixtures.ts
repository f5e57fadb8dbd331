import type { Capability } from "../../src/core/capability.ts";
import type { HttpMethod } from "../../src/core/http-method.ts";
import type { OperationSnapshot } from "../../src/core/operation-snapshot.ts";
import type { PermissionId } from "../../src/core/permission-id.ts";
import { buildPermissionId } from "../../src/core/permission-id.ts";
import {
  computePolicyHash,
  type PolicyApiEntry,
  type PolicyDocument,
  type PolicyDocumentV1,
  type PolicyDocumentV2,
} from "../../src/core/policy-document.ts";
import type { RedactionRule } from "../../src/core/redaction.ts";

export const CAPABILITY_ID = "billing-api";

export function snapshot(
  method: HttpMethod,
  path: string,
  extra: Partial<OperationSnapshot> = {},
): OperationSnapshot {
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
    ...extra,
  };
}

export const catalogOperations: OperationSnapshot[] = [
  snapshot("GET", "/users/{id}"),
  snapshot("GET", "/users/me"),
  snapshot("DELETE", "/users/{id}"),
  snapshot("POST", "/invoices"),
  snapshot("GET", "/invoices/{invoiceId}/lines/{lineId}"),
];

export function capability(operations: OperationSnapshot[] = catalogOperations): Capability {
  return {
    capability_id: CAPABILITY_ID,
    partner_id: "partner-1",
    name: "Billing",
    catalog_version: "2026-01-01",
    operations,
  };
}

export const pid = (method: HttpMethod, path: string, capabilityId = CAPABILITY_ID): PermissionId =>
  buildPermissionId(capabilityId, method, path);

export function entry(
  allowed: Array<[HttpMethod, string]>,
  options: {
    redactions?: Record<string, RedactionRule[]>;
    operations?: OperationSnapshot[];
    capabilityId?: string;
  } = {},
): PolicyApiEntry {
  const capabilityId = options.capabilityId ?? CAPABILITY_ID;
  return {
    capability_id: capabilityId,
    allowed_permission_ids: allowed.map(([m, p]) => pid(m, p, capabilityId)),
    auth_profile_ref: "billing-oauth",
    operations: options.operations ?? allowed.map(([m, p]) => snapshot(m, p)),
    response_redactions: options.redactions ?? {},
  };
}

export const NOW = new Date("2026-06-01T12:00:00.000Z");

export function policyV1(apis: PolicyApiEntry[], extra: Partial<PolicyDocumentV1> = {}): PolicyDocumentV1 {
  return {
    schema_version: "authority-user-policy-v1",
    policy_version: "2026-05-01T00:00:00Z",
    subject: { subject_id: "agent-7", subject_type: "agent", display_name: "Invoice bot" },
    expires_at: "2026-12-31T00:00:00Z",
    revoked_at: null,
    apis,
    ...extra,
  };
}

export const HASH_A = `sha256:${"a".repeat(64)}` as const;
export const HASH_B = `sha256:${"b".repeat(64)}` as const;

export const v2Context = {
  partnerId: "partner-1",
  bindingId: "binding-9",
  issuerHash: HASH_A,
  externalSubjectHash: HASH_B,
  mappingVersion: "3",
};

export function policyV2(apis: PolicyApiEntry[], extra: Partial<PolicyDocumentV2> = {}): PolicyDocumentV2 {
  return {
    schema_version: "authority-user-policy-v2",
    crypto_version: "platform_service_v2",
    subject_id: "ext-subject-1",
    authority_partner_id: v2Context.partnerId,
    binding_id: v2Context.bindingId,
    issuer_hash: v2Context.issuerHash,
    external_subject_hash: v2Context.externalSubjectHash,
    mapping_version: v2Context.mappingVersion,
    policy_version: "2026-05-01T00:00:00Z",
    policy_hash: computePolicyHash(apis),
    expires_at: "2026-12-31T00:00:00Z",
    revoked_at: null,
    subject: { subject_id: "ext-subject-1", subject_type: "external", display_name: "" },
    apis,
    ...extra,
  };
}

/** What a parse made of a text: the document, or a refusal (whatever error it threw). */
export type ParseOutcome = { readonly ok: true; readonly document: PolicyDocument } | { readonly ok: false };

export function outcomeOf(run: () => PolicyDocument): ParseOutcome {
  try {
    return { ok: true, document: run() };
  } catch {
    return { ok: false };
  }
}
