/**
 * Seeds the authority's demo data through the admin domain services, idempotently: every
 * step first looks at what is stored and only creates, renews or revokes what is missing
 * or out of date, so `authority dev` can be re-run on the same state directory.
 *
 * Seeded: the partner `acme`, a permission boundary, two auth profiles (the sample API's
 * static API key and the admin export's bearer secret), the `customers` capability from
 * examples/openapi/customers.yaml pointed at the running sample API, and four agent
 * subjects: one with an active policy that allows some operations (not all), one whose
 * policy is revoked, one whose policy has expired, and one without any policy.
 */
import { putAuthProfile } from "../admin/auth-profiles.ts";
import { createBoundary } from "../admin/boundaries.ts";
import { importOpenApi } from "../admin/capabilities.ts";
import type { Actor, AdminDeps } from "../admin/deps.ts";
import { createPartner } from "../admin/partners.ts";
import { type AssignInput, assignCapability, revokePolicy } from "../admin/policies.ts";
import { createSubject, setSubjectIdentity } from "../admin/subjects.ts";
import { readPolicyRecord } from "../policy/record-store.ts";
import {
  type AssignmentRecord,
  type AuthProfileRecord,
  type BoundaryRecord,
  collections,
  type PartnerRecord,
  type SubjectRecord,
  storeKeys,
} from "../store/model.ts";
import {
  DEV_ADMIN_AUTH_PROFILE_ID,
  DEV_ALLOWED_PERMISSIONS,
  DEV_AUTH_PROFILE_ID,
  DEV_BOUNDARY_ID,
  DEV_BOUNDARY_PATTERNS,
  DEV_CAPABILITY,
  DEV_MCP_CAPABILITY,
  DEV_PARTNER,
  DEV_POLICY_RENEW_BEFORE_MS,
  DEV_POLICY_TTL_SECONDS,
  DEV_SUBJECTS,
  type DevSubjectRole,
} from "./names.ts";

export interface SeedInput {
  /** Admin deps with secret key rings (auth profiles are sealed). */
  readonly deps: AdminDeps;
  /** The OpenAPI document (YAML text) of the sample API. */
  readonly openApiDocument: string;
  /** Base URL of the running sample API. */
  readonly upstreamBaseUrl: string;
  /** The secrets the sample API expects. */
  readonly upstreamSecrets: { readonly apiKey: string; readonly adminBearer: string };
}

/** What changed in this run, for the start-up summary and the tests of idempotency. */
export interface SeedReport {
  readonly created: string[];
  readonly updated: string[];
  readonly unchanged: string[];
}

export interface SeededData {
  readonly partnerId: string;
  readonly boundaryId: string;
  readonly capabilityId: string;
  readonly catalogVersion: string;
  readonly authProfileId: string;
  readonly allowedPermissionIds: readonly string[];
  readonly subjects: Readonly<Record<DevSubjectRole, string>>;
  readonly report: SeedReport;
}

const ACTOR: Actor = { subject: "authority-dev", requestId: "dev-seed" };

interface Tracker extends SeedReport {
  note(kind: "created" | "updated" | "unchanged", what: string): void;
}

function tracker(): Tracker {
  const report = { created: [] as string[], updated: [] as string[], unchanged: [] as string[] };
  return { ...report, note: (kind, what) => report[kind].push(what) };
}

async function ensurePartner(deps: AdminDeps, track: Tracker): Promise<void> {
  const existing = await deps.store.get<PartnerRecord>(
    collections.partners,
    storeKeys.partner(DEV_PARTNER.partnerId),
  );
  if (existing !== undefined) return track.note("unchanged", `partner ${DEV_PARTNER.partnerId}`);
  await createPartner(deps, { partner_id: DEV_PARTNER.partnerId, name: DEV_PARTNER.name });
  track.note("created", `partner ${DEV_PARTNER.partnerId}`);
}

async function ensureBoundary(deps: AdminDeps, track: Tracker): Promise<void> {
  const key = storeKeys.boundary(DEV_PARTNER.partnerId, DEV_BOUNDARY_ID);
  if ((await deps.store.get<BoundaryRecord>(collections.boundaries, key)) !== undefined) {
    return track.note("unchanged", `boundary ${DEV_BOUNDARY_ID}`);
  }
  await createBoundary(deps, DEV_PARTNER.partnerId, {
    boundary_id: DEV_BOUNDARY_ID,
    name: "What demo agents may ever be given",
    allowed_capabilities: [DEV_CAPABILITY.capabilityId, DEV_MCP_CAPABILITY.capabilityId],
    allowed_permission_patterns: [...DEV_BOUNDARY_PATTERNS],
    max_policy_ttl_seconds: 90 * 24 * 3600,
  });
  track.note("created", `boundary ${DEV_BOUNDARY_ID}`);
}

async function ensureAuthProfiles(deps: AdminDeps, secrets: SeedInput["upstreamSecrets"], track: Tracker) {
  const partnerId = DEV_PARTNER.partnerId;
  const profiles = [
    {
      id: DEV_AUTH_PROFILE_ID,
      input: {
        type: "static",
        kind: "api_key",
        in: "header",
        name: "X-Api-Key",
        secret: secrets.apiKey,
      } as const,
    },
    {
      id: DEV_ADMIN_AUTH_PROFILE_ID,
      input: { type: "static", kind: "bearer", secret: secrets.adminBearer } as const,
    },
  ];
  for (const profile of profiles) {
    const key = storeKeys.authProfile(partnerId, profile.id);
    if ((await deps.store.get<AuthProfileRecord>(collections.authProfiles, key)) !== undefined) {
      track.note("unchanged", `auth profile ${profile.id}`);
      continue;
    }
    await putAuthProfile(deps, partnerId, profile.id, profile.input);
    track.note("created", `auth profile ${profile.id}`);
  }
}

async function ensureCapability(deps: AdminDeps, input: SeedInput, track: Tracker): Promise<string> {
  // An import that produces the current catalog stores nothing new, so importing on every
  // start keeps the capability in step with the document and the sample API's address.
  const outcome = await importOpenApi(deps, ACTOR, DEV_PARTNER.partnerId, {
    capability_id: DEV_CAPABILITY.capabilityId,
    name: DEV_CAPABILITY.name,
    document: input.openApiDocument,
    format: "yaml",
    upstream_base_url: input.upstreamBaseUrl,
    auth_profile_ref: DEV_AUTH_PROFILE_ID,
  });
  track.note(
    outcome.created ? "created" : outcome.is_new_version ? "updated" : "unchanged",
    `capability ${DEV_CAPABILITY.capabilityId} (catalog version ${outcome.catalog_version})`,
  );
  return outcome.catalog_version;
}

async function ensureSubjects(deps: AdminDeps, track: Tracker): Promise<void> {
  for (const subject of Object.values(DEV_SUBJECTS)) {
    const existing = await deps.store.get<SubjectRecord>(
      collections.subjects,
      storeKeys.subject(subject.subjectId),
    );
    if (existing !== undefined) {
      if (existing.partner_id !== DEV_PARTNER.partnerId) {
        throw new Error(
          `subject ${subject.subjectId} exists in partner ${existing.partner_id}, not ${DEV_PARTNER.partnerId}`,
        );
      }
      // The platform registered these agents in its own identity provider: it vouches for them.
      if (existing.identity !== "platform_vouched") {
        await setSubjectIdentity(deps, ACTOR, DEV_PARTNER.partnerId, subject.subjectId, "platform_vouched");
        track.note("updated", `subject ${subject.subjectId} (vouched for by the platform)`);
        continue;
      }
      track.note("unchanged", `subject ${subject.subjectId}`);
      continue;
    }
    await createSubject(deps, DEV_PARTNER.partnerId, {
      subject_id: subject.subjectId,
      subject_type: "agent",
      display_name: subject.displayName,
      boundary_id: DEV_BOUNDARY_ID,
      identity: "platform_vouched",
    });
    track.note("created", `subject ${subject.subjectId}`);
  }
}

const policyOf = (deps: AdminDeps, subjectId: string) => readPolicyRecord(deps.store, subjectId);

const assignmentOf = (deps: AdminDeps, subjectId: string) =>
  deps.store.get<AssignmentRecord>(
    collections.assignments,
    storeKeys.assignment(DEV_PARTNER.partnerId, subjectId, DEV_CAPABILITY.capabilityId),
  );

function agentAssignment(): AssignInput {
  return {
    allowed_permission_ids: [...DEV_ALLOWED_PERMISSIONS],
    // Besides the catalog's own rules (tax ids, card numbers, CVCs): e-mails in lists.
    response_redactions: {
      [`${DEV_CAPABILITY.capabilityId}:get:/customers`]: [
        { path: "/items/*/email", mode: "mask", keep_last: 4 },
      ],
    },
    ttl_seconds: DEV_POLICY_TTL_SECONDS,
  };
}

/** The active agent: (re)assigned when missing, not active, near expiry or on an older catalog. */
async function ensureActivePolicy(deps: AdminDeps, catalogVersion: string, track: Tracker): Promise<void> {
  const subjectId = DEV_SUBJECTS.agent.subjectId;
  const [policy, assignment] = await Promise.all([policyOf(deps, subjectId), assignmentOf(deps, subjectId)]);
  const now = deps.now().getTime();
  const fresh =
    policy !== undefined &&
    policy.revoked_at === null &&
    Date.parse(policy.expires_at) - now > DEV_POLICY_RENEW_BEFORE_MS &&
    assignment?.catalog_version === catalogVersion;
  if (fresh) return track.note("unchanged", `policy of ${subjectId}`);
  await assignCapability(
    deps,
    ACTOR,
    DEV_PARTNER.partnerId,
    subjectId,
    DEV_CAPABILITY.capabilityId,
    agentAssignment(),
  );
  track.note(policy === undefined ? "created" : "updated", `policy of ${subjectId}`);
}

/** A policy that was active and then revoked (revocation is signed into the document). */
async function ensureRevokedPolicy(deps: AdminDeps, track: Tracker): Promise<void> {
  const subjectId = DEV_SUBJECTS.revoked.subjectId;
  const policy = await policyOf(deps, subjectId);
  if (policy !== undefined && policy.revoked_at !== null)
    return track.note("unchanged", `policy of ${subjectId}`);
  if (policy === undefined) {
    await assignCapability(deps, ACTOR, DEV_PARTNER.partnerId, subjectId, DEV_CAPABILITY.capabilityId, {
      allowed_permission_ids: [`${DEV_CAPABILITY.capabilityId}:get:/customers`],
      ttl_seconds: DEV_POLICY_TTL_SECONDS,
    });
  }
  await revokePolicy(deps, ACTOR, DEV_PARTNER.partnerId, subjectId);
  track.note(policy === undefined ? "created" : "updated", `policy of ${subjectId} (revoked)`);
}

/**
 * A policy that has expired: assigned as if two hours ago with a one-hour lifetime (the
 * admin API only accepts expiries in the future, so the seeding clock is moved back).
 */
async function ensureExpiredPolicy(deps: AdminDeps, track: Tracker): Promise<void> {
  const subjectId = DEV_SUBJECTS.expired.subjectId;
  const policy = await policyOf(deps, subjectId);
  const now = deps.now();
  if (policy !== undefined && policy.revoked_at === null && Date.parse(policy.expires_at) <= now.getTime()) {
    return track.note("unchanged", `policy of ${subjectId}`);
  }
  const past = new Date(now.getTime() - 2 * 3600 * 1000);
  await assignCapability(
    { ...deps, now: () => past },
    ACTOR,
    DEV_PARTNER.partnerId,
    subjectId,
    DEV_CAPABILITY.capabilityId,
    {
      allowed_permission_ids: [`${DEV_CAPABILITY.capabilityId}:get:/customers`],
      ttl_seconds: 3600,
    },
  );
  track.note(policy === undefined ? "created" : "updated", `policy of ${subjectId} (expired)`);
}

/** Subjects that must not hold a policy, e.g. after an earlier run assigned one by hand. */
async function reportUnassigned(deps: AdminDeps, track: Tracker): Promise<void> {
  const subjectId = DEV_SUBJECTS.unassigned.subjectId;
  if ((await policyOf(deps, subjectId)) !== undefined) {
    track.note("unchanged", `policy of ${subjectId} (assigned by hand; left as it is)`);
  }
}

export async function seedAuthority(input: SeedInput): Promise<SeededData> {
  const { deps } = input;
  const track = tracker();
  await ensurePartner(deps, track);
  await ensureBoundary(deps, track);
  await ensureAuthProfiles(deps, input.upstreamSecrets, track);
  const catalogVersion = await ensureCapability(deps, input, track);
  await ensureSubjects(deps, track);
  await ensureActivePolicy(deps, catalogVersion, track);
  await ensureRevokedPolicy(deps, track);
  await ensureExpiredPolicy(deps, track);
  await reportUnassigned(deps, track);
  return {
    partnerId: DEV_PARTNER.partnerId,
    boundaryId: DEV_BOUNDARY_ID,
    capabilityId: DEV_CAPABILITY.capabilityId,
    catalogVersion,
    authProfileId: DEV_AUTH_PROFILE_ID,
    allowedPermissionIds: [...DEV_ALLOWED_PERMISSIONS],
    subjects: {
      agent: DEV_SUBJECTS.agent.subjectId,
      revoked: DEV_SUBJECTS.revoked.subjectId,
      expired: DEV_SUBJECTS.expired.subjectId,
      unassigned: DEV_SUBJECTS.unassigned.subjectId,
    },
    report: { created: track.created, updated: track.updated, unchanged: track.unchanged },
  };
}
