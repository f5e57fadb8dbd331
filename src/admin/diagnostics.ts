import type { PolicyRecord } from "../policy/record.ts";
import {
  type AssignmentRecord,
  type AuthProfileRecord,
  type CapabilityRecord,
  collections,
  logs,
  storeKeys,
} from "../store/model.ts";
import type { StoreHealth } from "../store/store.ts";
import type { AdminDeps } from "./deps.ts";
import {
  type McpFacts,
  type OAuthFacts,
  type PlatformEndpoints,
  type ResourceFacts,
  resourceFacts,
} from "./platform-diagnostics.ts";
import { scan } from "./store-scan.ts";

/** Facts about the configuration that are safe to show (no secrets, no credentials in URLs). */
export interface ConfigurationFacts {
  readonly issuer: string;
  readonly audience: string;
  readonly public_url: string;
  readonly service_identity: string;
  /** Who holds the keys (decision 2601): `embedded` means this process, under its own KEK. */
  readonly key_custody: "crypto" | "managed" | "embedded";
  readonly body_limit_bytes: number;
  readonly parameter_scoping: { readonly enabled: boolean; readonly partner_allowlist: readonly string[] };
}

export interface DiagnosticsWarning {
  readonly code:
    | "store_unhealthy"
    | "policy_expiring"
    | "policy_expired"
    | "capability_without_policy"
    | "auth_profile_missing"
    | "scan_truncated"
    | "resource_unreachable"
    | "jwks_unavailable"
    | "subject_keys_unavailable"
    | "embedded_key_custody";
  readonly message: string;
  readonly partner_id?: string;
  readonly subject_id?: string;
  readonly capability_id?: string;
  readonly profile_id?: string;
  readonly expires_at?: string;
}

export interface Diagnostics {
  readonly generated_at: string;
  readonly persistence: { readonly backend: string; readonly health: StoreHealth };
  readonly counts: Readonly<Record<string, number>>;
  readonly backends: {
    readonly policy_protection: "configured";
    readonly secret_storage: "configured" | "not_configured";
    readonly policy_change_notifications: "configured" | "not_configured";
  };
  readonly configuration: ConfigurationFacts;
  readonly mcp: McpFacts;
  readonly oauth: OAuthFacts;
  readonly resources: ResourceFacts;
  readonly warnings: readonly DiagnosticsWarning[];
}

/** What the route adds about the platform (platform-diagnostics.ts). */
export interface PlatformInput {
  readonly mcp: McpFacts;
  readonly oauth: OAuthFacts;
  readonly endpoints: PlatformEndpoints | undefined;
}

/** Warn about policies expiring within this window. */
export const EXPIRY_WARNING_MS = 24 * 3600 * 1000;
/** Records looked at per collection when looking for warnings; beyond it a warning says so. */
export const DIAGNOSTICS_SCAN_LIMIT = 50_000;

async function safeHealth(deps: Pick<AdminDeps, "store">): Promise<StoreHealth> {
  try {
    return await deps.store.health();
  } catch {
    return { backend: deps.store.backend, ok: false, detail: "health check failed" };
  }
}

async function policyWarnings(
  deps: AdminDeps,
  now: Date,
  warnings: DiagnosticsWarning[],
): Promise<Set<string>> {
  const assigned = new Set<string>();
  let seen = 0;
  for await (const item of scan<PolicyRecord>(deps.store, collections.policies)) {
    if (++seen > DIAGNOSTICS_SCAN_LIMIT) {
      warnings.push({
        code: "scan_truncated",
        message: `only the first ${DIAGNOSTICS_SCAN_LIMIT} policies were checked`,
      });
      break;
    }
    const policy = item.value;
    if (policy.revoked_at !== null) continue;
    for (const capability of policy.capabilities)
      assigned.add(`${policy.partner_id}/${capability.capability_id}`);
    const left = Date.parse(policy.expires_at) - now.getTime();
    const where = {
      partner_id: policy.partner_id,
      subject_id: policy.subject_id,
      expires_at: policy.expires_at,
    };
    if (left < 0) warnings.push({ code: "policy_expired", message: "the policy has expired", ...where });
    else if (left <= EXPIRY_WARNING_MS) {
      warnings.push({ code: "policy_expiring", message: "the policy expires within 24 hours", ...where });
    }
  }
  return assigned;
}

async function capabilityWarnings(
  deps: AdminDeps,
  assigned: ReadonlySet<string>,
  warnings: DiagnosticsWarning[],
): Promise<void> {
  const profiles = new Map<string, boolean>();
  const profileExists = async (partnerId: string, profileId: string): Promise<boolean> => {
    const key = storeKeys.authProfile(partnerId, profileId);
    let exists = profiles.get(key);
    if (exists === undefined) {
      exists = (await deps.store.get<AuthProfileRecord>(collections.authProfiles, key)) !== undefined;
      profiles.set(key, exists);
    }
    return exists;
  };
  let seen = 0;
  for await (const item of scan<CapabilityRecord>(deps.store, collections.capabilities)) {
    if (++seen > DIAGNOSTICS_SCAN_LIMIT) {
      warnings.push({
        code: "scan_truncated",
        message: `only the first ${DIAGNOSTICS_SCAN_LIMIT} capabilities were checked`,
      });
      break;
    }
    const capability = item.value;
    const where = { partner_id: capability.partner_id, capability_id: capability.capability_id };
    if (!assigned.has(`${capability.partner_id}/${capability.capability_id}`)) {
      warnings.push({
        code: "capability_without_policy",
        message: "no active policy assigns this capability",
        ...where,
      });
    }
    if (!(await profileExists(capability.partner_id, capability.auth_profile_ref))) {
      warnings.push({
        code: "auth_profile_missing",
        message: "the capability's default auth profile is not defined",
        ...where,
        profile_id: capability.auth_profile_ref,
      });
    }
  }
  let assignmentsSeen = 0;
  for await (const item of scan<AssignmentRecord>(deps.store, collections.assignments)) {
    if (++assignmentsSeen > DIAGNOSTICS_SCAN_LIMIT) break;
    const assignment = item.value;
    if (!(await profileExists(assignment.partner_id, assignment.auth_profile_ref))) {
      warnings.push({
        code: "auth_profile_missing",
        message: "an assignment names an auth profile that is not defined",
        partner_id: assignment.partner_id,
        subject_id: assignment.subject_id,
        capability_id: assignment.capability_id,
        profile_id: assignment.auth_profile_ref,
      });
    }
  }
}

/** GET /admin/diagnostics: what an operator checks first. Reads only. */
export async function collectDiagnostics(
  deps: AdminDeps,
  configuration: ConfigurationFacts,
  platform: PlatformInput,
): Promise<Diagnostics> {
  const now = deps.now();
  const health = await safeHealth(deps);
  const resources = await resourceFacts(deps.store, health, platform.endpoints);
  const warnings: DiagnosticsWarning[] = platformWarnings(resources, platform.oauth);
  if (configuration.key_custody === "embedded") {
    warnings.push({
      code: "embedded_key_custody",
      message:
        "every key is held by this process under its KEK (--policy-protection embedded, the one-process mode): use crypto or managed in a deployment",
    });
  }
  const counts: Record<string, number> = {};
  if (!health.ok) {
    warnings.push({ code: "store_unhealthy", message: `the store reports a problem: ${health.detail}` });
  } else {
    for (const collection of Object.values(collections))
      counts[collection] = await deps.store.count(collection);
    for (const log of Object.values(logs)) counts[`log:${log}`] = await deps.store.logLength(log);
    const assigned = await policyWarnings(deps, now, warnings);
    await capabilityWarnings(deps, assigned, warnings);
  }
  for (const { subjectId, reason, at } of deps.protector.subjectKeys?.unusable() ?? []) {
    warnings.push({
      code: "subject_keys_unavailable",
      message: `the subject's owner at the crypto service was unusable (${reason}) at ${at}; rotate-keys provisions it`,
      subject_id: subjectId,
    });
  }
  return {
    generated_at: now.toISOString(),
    persistence: { backend: deps.store.backend, health },
    counts,
    backends: {
      policy_protection: "configured",
      secret_storage: deps.secretKeyRings === undefined ? "not_configured" : "configured",
      policy_change_notifications: deps.onPolicyChange === undefined ? "not_configured" : "configured",
    },
    configuration,
    mcp: platform.mcp,
    oauth: platform.oauth,
    resources,
    warnings,
  };
}

/** A service the process uses that does not answer, or an issuer whose keys could not be fetched. */
function platformWarnings(resources: ResourceFacts, oauth: OAuthFacts): DiagnosticsWarning[] {
  const warnings: DiagnosticsWarning[] = [];
  const used: Array<[string, ResourceFacts["redis"]]> = [["redis", resources.redis]];
  if (resources.crypto_service.in_use) used.push(["crypto_service", resources.crypto_service]);
  for (const [name, facts] of used) {
    if (facts.configured && !facts.reachable) {
      warnings.push({ code: "resource_unreachable", message: `${name} did not answer (${facts.detail})` });
    }
  }
  for (const issuer of oauth.issuers) {
    if (issuer.jwks?.state === "failed") {
      warnings.push({ code: "jwks_unavailable", message: "the last JWKS fetch of the issuer failed" });
    }
  }
  return warnings;
}
