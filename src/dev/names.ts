/**
 * The fixed names of the seeded development data. Docs (README quick start,
 * docs/quickstart.md) and the demo refer to them, so they change together.
 */
import { buildPermissionId } from "../core/index.ts";

export const DEV_PARTNER = { partnerId: "acme", name: "Acme Corp (demo partner)" } as const;
export const DEV_BOUNDARY_ID = "acme-agents";
export const DEV_CAPABILITY = { capabilityId: "customers", name: "Customer records" } as const;
/** Static API key profile every customers operation uses by default. */
export const DEV_AUTH_PROFILE_ID = "customers-api-key";
/** Static bearer profile the admin export operation names (x-authority-auth-profile). */
export const DEV_ADMIN_AUTH_PROFILE_ID = "customers-admin";
export const DEV_SERVICE_IDENTITY = "authority";

/** Subjects: one with an active policy, one revoked, one expired, one without any policy. */
export const DEV_SUBJECTS = {
  agent: { subjectId: "agent-demo", displayName: "Demo agent" },
  revoked: { subjectId: "agent-revoked", displayName: "Agent whose policy was revoked" },
  expired: { subjectId: "agent-expired", displayName: "Agent whose policy expired" },
  unassigned: { subjectId: "agent-unassigned", displayName: "Agent without a policy" },
} as const;

export type DevSubjectRole = keyof typeof DEV_SUBJECTS;

/** The headless binding: the partner's own identity provider is the dev IdP here. */
export const DEV_BINDING = {
  bindingId: "acme-portal",
  audience: "acme-portal",
  tenantClaim: "tenant",
  tenantValue: "acme",
  externalSubject: "alice",
  externalDisplayName: "Alice (portal user)",
  workloadClientName: "acme-portal-backend",
} as const;

/** Identity-provider accounts and clients of the dev environment. */
export const DEV_IDP = {
  adminUsername: "dev-admin",
  adminClientId: "dev-admin-client",
  /** The managed crypto API's service account (username/password headers). */
  serviceAccountUsername: "acme-service",
  /** The authority service's own client (its token for the crypto service). */
  authorityClientId: "authority-service",
  sidecarClientId: "authority-sidecar",
  /** The partner portal's end user (user assertions for binding invoke). */
  endUserClientId: "acme-portal-alice",
} as const;

const p = (method: string, path: string): string =>
  buildPermissionId(DEV_CAPABILITY.capabilityId, method, path);

/** What the demo agent may do (not everything: DELETE and PATCH stay out). */
export const DEV_ALLOWED_PERMISSIONS = [
  p("GET", "/customers"),
  p("POST", "/customers"),
  p("GET", "/customers/{customerId}"),
  p("GET", "/customers/{customerId}/payment-methods"),
] as const;

/** An operation in the catalog that the agent's policy does not allow. */
export const DEV_NOT_ALLOWED_PERMISSION = p("DELETE", "/customers/{customerId}");

/** Patterns of the permission boundary: reads and creates only, never the admin export. */
/** The sample API's downstream MCP server (its /mcp), imported by the demo as a capability. */
export const DEV_MCP_CAPABILITY = {
  capabilityId: "helpdesk",
  name: "Helpdesk (downstream MCP server)",
} as const;

export const DEV_BOUNDARY_PATTERNS = [
  `${DEV_MCP_CAPABILITY.capabilityId}:post:/tools/*`,
  `${DEV_CAPABILITY.capabilityId}:get:*`,
  `${DEV_CAPABILITY.capabilityId}:post:/customers`,
  `${DEV_CAPABILITY.capabilityId}:patch:*`,
  `${DEV_CAPABILITY.capabilityId}:delete:*`,
] as const;

/** Lifetime of the seeded active policies; renewed by a restart when less than a day is left. */
export const DEV_POLICY_TTL_SECONDS = 30 * 24 * 3600;
export const DEV_POLICY_RENEW_BEFORE_MS = 24 * 3600 * 1000;
