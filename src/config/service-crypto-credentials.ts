/**
 * The authority service's credentials for the crypto service, read from a mounted secret
 * file (JSON) or directory (a file per field), never from flags: the identity-provider service account (`username`,
 * `password`: the password grant gives the bearer token, cached until shortly before it
 * expires) and the partner credentials of the policy owners — the service identity's
 * (`api_key`, `access_key`, `secret_key`), which also acts for the subjects' owners it
 * provisions (decision 2513). `subjects` (optional, the older way) lists credential sets of
 * subject_credentials_v1 subjects the operator provisioned. Errors name the file and the
 * field, never a value.
 */
import type { PartnerCredentials } from "../clients/crypto-service/credentials.ts";
import { ConfigError } from "../core/config-error.ts";
import { readSecretFields } from "./secret-fields.ts";

const CREDENTIAL_FIELDS = ["username", "password", "api_key", "access_key", "secret_key"] as const;

import { isRecord } from "../core/own-property.ts";

export interface ServiceCryptoCredentials {
  readonly username: string;
  readonly password: string;
  /** The service identity's partner credentials (`service:<identity>`). */
  readonly service: PartnerCredentials;
  /** Subject id → that subject's credential set (v1 policies; optional, the older way). */
  readonly subjects: ReadonlyMap<string, PartnerCredentials>;
}

function field(source: Record<string, unknown>, name: string, where: string): string {
  const value = source[name];
  if (typeof value !== "string" || value.length === 0 || value.length > 4096) {
    throw new ConfigError(`${where}: the field ${name} must be a non-empty string`);
  }
  return value;
}

function partnerCredentials(source: Record<string, unknown>, where: string): PartnerCredentials {
  return {
    apiKey: field(source, "api_key", where),
    accessKey: field(source, "access_key", where),
    secretKey: field(source, "secret_key", where),
  };
}

export function parseServiceCryptoCredentials(json: unknown, where: string): ServiceCryptoCredentials {
  if (!isRecord(json)) throw new ConfigError(`${where} must hold a JSON object`);
  const subjects = new Map<string, PartnerCredentials>();
  if (json.subjects !== undefined) {
    if (!isRecord(json.subjects)) throw new ConfigError(`${where}: subjects must be an object`);
    for (const [subjectId, entry] of Object.entries(json.subjects)) {
      if (!isRecord(entry)) throw new ConfigError(`${where}: subjects entries must be objects`);
      subjects.set(subjectId, partnerCredentials(entry, `${where} (a subject entry)`));
    }
  }
  return {
    username: field(json, "username", where),
    password: field(json, "password", where),
    service: partnerCredentials(json, where),
    subjects,
  };
}

/**
 * A JSON file, or a directory with one file per field (`username`, `password`, `api_key`,
 * `access_key`, `secret_key`): what the chart mounts from two Secrets joined in one projected
 * volume, the IdP account's and the generated service identity's (decision 2601).
 */
export async function loadServiceCryptoCredentials(path: string): Promise<ServiceCryptoCredentials> {
  const fields = await readSecretFields(path, CREDENTIAL_FIELDS, "the crypto credentials file");
  return parseServiceCryptoCredentials(fields, `the crypto credentials file ${path}`);
}
