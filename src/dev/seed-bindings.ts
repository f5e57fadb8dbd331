/**
 * Seeds the headless-partner flow through the authority's public admin routes
 * (docs/bindings.md), idempotently: a binding of `acme` whose user assertions come from the
 * dev identity provider (standing in for the partner's own), one workload client (its secret
 * is shown once, so it is kept in the dev vault; a client that was revoked meanwhile is
 * replaced), the portal user `alice` mapped to a derived authority subject, and an API
 * assignment for that subject.
 */
import { deriveSubjectId } from "../bindings/derive.ts";
import { BROKER_EXECUTE_SCOPE, INVOKE_SCOPE } from "../store/binding-model.ts";
import { type AdminClient, isRecord } from "./admin-client.ts";
import type { SeededBinding } from "./credentials-file.ts";
import {
  DEV_AUTH_PROFILE_ID,
  DEV_BINDING,
  DEV_CAPABILITY,
  DEV_PARTNER,
  DEV_POLICY_RENEW_BEFORE_MS,
  DEV_POLICY_TTL_SECONDS,
} from "./names.ts";
import type { SeedReport } from "./seed.ts";
import type { DevVault } from "./vault.ts";

export interface BindingSeedInput {
  readonly admin: AdminClient;
  readonly vault: DevVault;
  /** The identity provider whose tokens carry the portal user's identity. */
  readonly issuer: string;
  readonly jwksUrl: string;
  readonly now: () => Date;
}

export interface BindingSeedResult {
  readonly binding: SeededBinding;
  readonly report: SeedReport;
}

/** The operations the portal user may run through the binding. */
export const BINDING_ALLOWED_PERMISSIONS = [
  `${DEV_CAPABILITY.capabilityId}:get:/customers`,
  `${DEV_CAPABILITY.capabilityId}:get:/customers/{customerId}`,
  `${DEV_CAPABILITY.capabilityId}:get:/customers/{customerId}/payment-methods`,
] as const;

interface StoredWorkloadClient {
  readonly client_id: string;
  readonly client_secret: string;
}

const bindingPath = `/v1/bindings/${DEV_BINDING.bindingId}`;

async function ensureBinding(input: BindingSeedInput, report: SeedReport): Promise<void> {
  const existing = await input.admin.request("GET", bindingPath);
  if (existing.status === 200 && isRecord(existing.body)) {
    if (existing.body.issuer !== input.issuer) {
      throw new Error(
        `binding ${DEV_BINDING.bindingId} trusts issuer ${String(existing.body.issuer)}, not ${input.issuer}; remove the state directory to start over`,
      );
    }
    report.unchanged.push(`binding ${DEV_BINDING.bindingId}`);
    return;
  }
  await input.admin.expect("POST", `/partners/${DEV_PARTNER.partnerId}/bindings`, {
    binding_id: DEV_BINDING.bindingId,
    issuer: input.issuer,
    jwks_url: input.jwksUrl,
    audience: DEV_BINDING.audience,
    tenant_claim: DEV_BINDING.tenantClaim,
    tenant_value: DEV_BINDING.tenantValue,
    auth_profile_ref: DEV_AUTH_PROFILE_ID,
  });
  report.created.push(`binding ${DEV_BINDING.bindingId}`);
}

async function activeClientIds(admin: AdminClient): Promise<Set<string>> {
  const ids = new Set<string>();
  let after: string | undefined;
  do {
    const page = await admin.expect<{ items: unknown[]; next?: string }>(
      "GET",
      `${bindingPath}/workload-clients?limit=1000${after === undefined ? "" : `&after=${encodeURIComponent(after)}`}`,
    );
    for (const item of page.items) {
      if (isRecord(item) && item.status === "active" && typeof item.client_id === "string")
        ids.add(item.client_id);
    }
    after = page.next;
  } while (after !== undefined);
  return ids;
}

async function ensureWorkloadClient(
  input: BindingSeedInput,
  report: SeedReport,
): Promise<StoredWorkloadClient> {
  const name = `binding-workload-client:${DEV_BINDING.bindingId}`;
  const stored = await input.vault.get<StoredWorkloadClient>(name);
  if (stored !== undefined && (await activeClientIds(input.admin)).has(stored.client_id)) {
    report.unchanged.push(`workload client ${stored.client_id}`);
    return stored;
  }
  const created = await input.admin.expect<{ client: { client_id: string }; client_secret: string }>(
    "POST",
    `${bindingPath}/workload-clients`,
    // One client for both sides of the demo: the partner backend (invoke) and the sample
    // API (verify). Real deployments give each its own client.
    { name: DEV_BINDING.workloadClientName, scopes: [INVOKE_SCOPE, BROKER_EXECUTE_SCOPE] },
  );
  const client = { client_id: created.client.client_id, client_secret: created.client_secret };
  await input.vault.put(name, client);
  report.created.push(`workload client ${client.client_id}`);
  return client;
}

async function ensureMapping(input: BindingSeedInput, report: SeedReport): Promise<string> {
  const subjectId = deriveSubjectId(DEV_BINDING.bindingId, input.issuer, DEV_BINDING.externalSubject);
  const existing = await input.admin.request("GET", `${bindingPath}/subjects/${subjectId}`);
  if (existing.status === 200) {
    report.unchanged.push(`external mapping ${DEV_BINDING.externalSubject} → ${subjectId}`);
    return subjectId;
  }
  const created = await input.admin.expect<{
    subject?: { subject_id?: string };
    mapping?: { subject_id?: string };
  }>("POST", `${bindingPath}/subjects`, {
    external_subject: DEV_BINDING.externalSubject,
    display_name: DEV_BINDING.externalDisplayName,
  });
  const id = created.mapping?.subject_id ?? created.subject?.subject_id ?? subjectId;
  report.created.push(`external mapping ${DEV_BINDING.externalSubject} → ${id}`);
  return id;
}

async function ensureAssignment(
  input: BindingSeedInput,
  subjectId: string,
  report: SeedReport,
): Promise<void> {
  const listed = await input.admin.request("GET", `${bindingPath}/subjects/${subjectId}/apis`);
  const items =
    listed.status === 200 && isRecord(listed.body) && Array.isArray(listed.body.items)
      ? listed.body.items
      : [];
  const current = items.find((item) => isRecord(item) && item.capability_id === DEV_CAPABILITY.capabilityId);
  const expiresAt =
    isRecord(current) && typeof current.expires_at === "string" ? Date.parse(current.expires_at) : 0;
  if (expiresAt - input.now().getTime() > DEV_POLICY_RENEW_BEFORE_MS) {
    report.unchanged.push(`binding policy of ${subjectId}`);
    return;
  }
  await input.admin.expect("POST", `${bindingPath}/apis`, {
    subject_id: subjectId,
    capability_id: DEV_CAPABILITY.capabilityId,
    allowed_permission_ids: [...BINDING_ALLOWED_PERMISSIONS],
    ttl_seconds: DEV_POLICY_TTL_SECONDS,
  });
  (current === undefined ? report.created : report.updated).push(`binding policy of ${subjectId}`);
}

export async function seedBinding(input: BindingSeedInput): Promise<BindingSeedResult> {
  const report: SeedReport = { created: [], updated: [], unchanged: [] };
  await ensureBinding(input, report);
  const client = await ensureWorkloadClient(input, report);
  const subjectId = await ensureMapping(input, report);
  await ensureAssignment(input, subjectId, report);
  return {
    binding: {
      bindingId: DEV_BINDING.bindingId,
      audience: DEV_BINDING.audience,
      workloadClientId: client.client_id,
      workloadClientSecret: client.client_secret,
      subjectId,
      externalSubject: DEV_BINDING.externalSubject,
    },
    report,
  };
}
