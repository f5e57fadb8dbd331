/**
 * The identities of the development environment: their generated secrets (kept in the dev
 * vault, so a restart keeps them) and their registration in the dev identity provider,
 * whose directory lives in memory and is filled again on every start.
 */

import { SIDECAR_CAPABILITY_SCOPE_PREFIX } from "../servers/authority/routes/sidecar.ts";
import type { Directory } from "../servers/idp/index.ts";
import {
  DEV_BINDING,
  DEV_CAPABILITY,
  DEV_IDP,
  DEV_PARTNER,
  DEV_SUBJECTS,
  type DevSubjectRole,
} from "./names.ts";
import { type DevVault, randomSecret } from "./vault.ts";

export interface DevSecrets {
  readonly adminPassword: string;
  readonly adminClientSecret: string;
  readonly serviceAccountPassword: string;
  readonly authorityClientSecret: string;
  readonly sidecarClientSecret: string;
  readonly endUserClientSecret: string;
  readonly subjectClientSecrets: Readonly<Record<DevSubjectRole, string>>;
  /** What the sample API expects in `x-api-key` (auth profile customers-api-key). */
  readonly upstreamApiKey: string;
  /** What the sample API's admin export expects as a bearer (auth profile customers-admin). */
  readonly upstreamAdminBearer: string;
}

const secret = (vault: DevVault, name: string, prefix: string): Promise<string> =>
  vault.getOrCreate(`secret:${name}`, () => randomSecret(prefix));

export async function loadDevSecrets(vault: DevVault): Promise<DevSecrets> {
  const subjectClientSecrets: Partial<Record<DevSubjectRole, string>> = {};
  for (const role of Object.keys(DEV_SUBJECTS) as DevSubjectRole[]) {
    subjectClientSecrets[role] = await secret(vault, `subject-client:${DEV_SUBJECTS[role].subjectId}`, "cs_");
  }
  return {
    adminPassword: await secret(vault, "admin-password", "pw_"),
    adminClientSecret: await secret(vault, "admin-client", "cs_"),
    serviceAccountPassword: await secret(vault, "service-account-password", "pw_"),
    authorityClientSecret: await secret(vault, "authority-client", "cs_"),
    sidecarClientSecret: await secret(vault, "sidecar-client", "cs_"),
    endUserClientSecret: await secret(vault, "end-user-client", "cs_"),
    subjectClientSecrets: subjectClientSecrets as Record<DevSubjectRole, string>,
    upstreamApiKey: await secret(vault, "upstream-api-key", "sk_live_demo_"),
    upstreamAdminBearer: await secret(vault, "upstream-admin-bearer", "adm_"),
  };
}

/** Scope an agent asks for at the hosted MCP endpoint (advertised in its resource metadata). */
export const AGENT_SCOPES = ["authority/mcp"] as const;

/**
 * Registers every account and client. Roles: `admin` for the admin identities,
 * `partner_admin` of `acme` for the partner's service account (which is also the managed
 * crypto API's username), `sidecar` for the sidecar; agents get their subject id as `sub`.
 */
export async function registerDevIdentities(directory: Directory, secrets: DevSecrets): Promise<void> {
  await directory.addServiceAccount({
    username: DEV_IDP.adminUsername,
    password: secrets.adminPassword,
    scopes: [],
    roles: ["admin"],
  });
  await directory.addClient({
    clientId: DEV_IDP.adminClientId,
    clientSecret: secrets.adminClientSecret,
    scopes: [],
    roles: ["admin"],
  });
  await directory.addServiceAccount({
    username: DEV_IDP.serviceAccountUsername,
    password: secrets.serviceAccountPassword,
    scopes: [],
    roles: ["partner_admin"],
    claims: { partner_id: DEV_PARTNER.partnerId },
  });
  // The authority's service account at the crypto service (password grant; crypto mode).
  await directory.addServiceAccount({
    username: DEV_IDP.authorityClientId,
    password: secrets.authorityClientSecret,
    scopes: [],
  });
  // Scoped as a real sidecar is: one partner, and the capabilities of its pod's capability map
  // (it reads only the upstream credentials those use).
  await directory.addClient({
    clientId: DEV_IDP.sidecarClientId,
    clientSecret: secrets.sidecarClientSecret,
    scopes: [`${SIDECAR_CAPABILITY_SCOPE_PREFIX}${DEV_CAPABILITY.capabilityId}`],
    roles: ["sidecar"],
    claims: { partner_id: DEV_PARTNER.partnerId },
  });
  for (const role of Object.keys(DEV_SUBJECTS) as DevSubjectRole[]) {
    const subjectId = DEV_SUBJECTS[role].subjectId;
    await directory.addClient({
      clientId: subjectId,
      clientSecret: secrets.subjectClientSecrets[role],
      subject: subjectId,
      scopes: [...AGENT_SCOPES],
    });
  }
  // The partner portal's user, as the partner's own identity provider would issue it.
  await directory.addClient({
    clientId: DEV_IDP.endUserClientId,
    clientSecret: secrets.endUserClientSecret,
    subject: DEV_BINDING.externalSubject,
    scopes: [],
    audience: DEV_BINDING.audience,
    tenant: DEV_BINDING.tenantValue,
  });
}
