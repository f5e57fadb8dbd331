/**
 * The authority service's credentials for the crypto service, read from a mounted secret
 * file (JSON), never from flags: the identity-provider service account (`username`,
 * `password`: the password grant gives the bearer token, cached until shortly before it
 * expires) and the partner credentials of the policy owners — the service identity's
 * (`api_key`, `access_key`, `secret_key`), which also acts for the subjects' owners it
 * provisions (decision 2513). `subjects` (optional, the older way) lists credential sets of
 * subject_credentials_v1 subjects the operator provisioned. Errors name the file and the
 * field, never a value.
 */
import { readFile } from "node:fs/promises";
import type { PartnerCredentials } from "../clients/crypto-service/credentials.ts";
import { ConfigError } from "../config/errors.ts";
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

export async function loadServiceCryptoCredentials(path: string): Promise<ServiceCryptoCredentials> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    const missing = (error as { code?: unknown }).code === "ENOENT";
    throw new ConfigError(
      `the crypto credentials file ${path} ${missing ? "does not exist" : "cannot be read"}`,
    );
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new ConfigError(`the crypto credentials file ${path} is not JSON`);
  }
  return parseServiceCryptoCredentials(json, `the crypto credentials file ${path}`);
}
