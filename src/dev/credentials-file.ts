/**
 * `<state-dir>/dev-credentials.json`: every URL, id and secret of the development
 * environment in one file (mode 0600), the way a dev server prints its root token. The
 * README's quick start reads it with `jq`. Never use these values outside local development.
 */
import { chmod, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { PartnerCredentials } from "../servers/crypto/index.ts";
import type { DevSecrets } from "./identities.ts";
import {
  DEV_BINDING,
  DEV_IDP,
  DEV_NOT_ALLOWED_PERMISSION,
  DEV_PARTNER,
  DEV_SERVICE_IDENTITY,
  DEV_SUBJECTS,
  type DevSubjectRole,
} from "./names.ts";
import type { SeededData } from "./seed.ts";

export const DEV_CREDENTIALS_FILE = "dev-credentials.json";

export interface DevUrls {
  readonly authority: string;
  readonly managed: string;
  readonly crypto: string;
  readonly idp: string;
  readonly tokenEndpoint: string;
  readonly jwks: string;
  readonly sampleApi: string;
  readonly sidecar?: { readonly grpc: string; readonly proxy: string; readonly metrics: string };
}

/** The binding seeded for the headless flow (absent while bindings are not built). */
export interface SeededBinding {
  readonly bindingId: string;
  readonly audience: string;
  readonly workloadClientId: string;
  readonly workloadClientSecret: string;
  /** The authority subject derived from (binding, issuer, external subject). */
  readonly subjectId: string;
  readonly externalSubject: string;
}

export interface DevCredentialsInput {
  readonly urls: DevUrls;
  readonly managedCertFile: string;
  readonly secrets: DevSecrets;
  readonly partnerKeys: PartnerCredentials;
  readonly seeded: SeededData;
  readonly binding: SeededBinding | undefined;
  readonly now: Date;
}

const policyState: Record<DevSubjectRole, string> = {
  agent: "active",
  revoked: "revoked",
  expired: "expired",
  unassigned: "none",
};

/** The file's content (pure). Keys are snake_case, like the APIs'. */
export function devCredentialsDocument(input: DevCredentialsInput): Record<string, unknown> {
  const { urls, secrets, seeded } = input;
  const subjects: Record<string, unknown> = {};
  for (const role of Object.keys(DEV_SUBJECTS) as DevSubjectRole[]) {
    subjects[role] = {
      subject_id: DEV_SUBJECTS[role].subjectId,
      client_id: DEV_SUBJECTS[role].subjectId,
      client_secret: secrets.subjectClientSecrets[role],
      policy: policyState[role],
    };
  }
  return {
    note: "Development credentials of `authority dev`. Local use only; delete the state directory to start over.",
    generated_at: input.now.toISOString(),
    urls: {
      authority: urls.authority,
      managed: urls.managed,
      crypto: urls.crypto,
      idp: urls.idp,
      token_endpoint: urls.tokenEndpoint,
      jwks: urls.jwks,
      sample_api: urls.sampleApi,
      sidecar: urls.sidecar ?? null,
    },
    managed_tls_cert: input.managedCertFile,
    admin: {
      username: DEV_IDP.adminUsername,
      password: secrets.adminPassword,
      client_id: DEV_IDP.adminClientId,
      client_secret: secrets.adminClientSecret,
    },
    service_account: { username: DEV_IDP.serviceAccountUsername, password: secrets.serviceAccountPassword },
    partner: {
      partner_id: DEV_PARTNER.partnerId,
      name: DEV_PARTNER.name,
      api_key: input.partnerKeys.apiKey,
      access_key: input.partnerKeys.accessKey,
      secret_key: input.partnerKeys.secretKey,
    },
    capability: {
      capability_id: seeded.capabilityId,
      catalog_version: seeded.catalogVersion,
      auth_profile: seeded.authProfileId,
      allowed_permission_ids: seeded.allowedPermissionIds,
      not_allowed_permission_id: DEV_NOT_ALLOWED_PERMISSION,
    },
    boundary_id: seeded.boundaryId,
    subjects,
    binding:
      input.binding === undefined
        ? null
        : {
            binding_id: input.binding.bindingId,
            audience: input.binding.audience,
            workload_client: {
              client_id: input.binding.workloadClientId,
              client_secret: input.binding.workloadClientSecret,
              token_endpoint: `${urls.authority}/v1/bindings/${input.binding.bindingId}/token`,
            },
            end_user: {
              client_id: DEV_IDP.endUserClientId,
              client_secret: secrets.endUserClientSecret,
              external_subject: input.binding.externalSubject,
              subject_id: input.binding.subjectId,
              audience: DEV_BINDING.audience,
            },
          },
    sidecar_client: { client_id: DEV_IDP.sidecarClientId, client_secret: secrets.sidecarClientSecret },
    service_identity: DEV_SERVICE_IDENTITY,
  };
}

/** Writes the file atomically with mode 0600 (a reader never sees half a file). */
export async function writeDevCredentials(
  stateDir: string,
  document: Record<string, unknown>,
): Promise<string> {
  const file = join(stateDir, DEV_CREDENTIALS_FILE);
  const temporary = `${file}.${process.pid}.tmp`;
  await writeFile(temporary, `${JSON.stringify(document, null, 2)}\n`, { mode: 0o600 });
  await chmod(temporary, 0o600);
  await rename(temporary, file);
  return file;
}
