import { readFile } from "node:fs/promises";
import type { ClientInput, Directory, ServiceAccountInput } from "./directory.ts";
import { IdpConfigError } from "./errors.ts";

/**
 * The `--accounts-file` format:
 *
 * ```json
 * { "serviceAccounts": [{ "username": "svc", "password": "…", "scopes": ["crypto"], "tenant": "t1" }],
 *   "clients": [{ "clientId": "workload", "clientSecretHash": "scrypt$…", "scopes": ["a", "b"] }] }
 * ```
 * Entries take the fields of addServiceAccount / addClient; `passwordHash` and
 * `clientSecretHash` (from `hashSecret`) keep plaintext secrets out of the file.
 */
export interface AccountsFile {
  readonly serviceAccounts?: readonly ServiceAccountInput[];
  readonly clients?: readonly ClientInput[];
}

export function parseAccountsFile(text: string, source = "accounts file"): AccountsFile {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new IdpConfigError(`${source} is not valid JSON`);
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    throw new IdpConfigError(`${source} must be a JSON object`);
  }
  const { serviceAccounts, clients, ...rest } = parsed as Record<string, unknown>;
  const unknown = Object.keys(rest).filter((key) => key !== "$schema");
  if (unknown.length > 0) throw new IdpConfigError(`${source} has unknown fields: ${unknown.join(", ")}`);
  for (const [name, value] of [
    ["serviceAccounts", serviceAccounts],
    ["clients", clients],
  ] as const) {
    if (value !== undefined && !Array.isArray(value))
      throw new IdpConfigError(`${source}: ${name} must be an array`);
  }
  return {
    serviceAccounts: (serviceAccounts ?? []) as ServiceAccountInput[],
    clients: (clients ?? []) as ClientInput[],
  };
}

/** Adds every entry; entries are validated by the directory itself. */
export async function loadAccounts(directory: Directory, accounts: AccountsFile): Promise<void> {
  for (const account of accounts.serviceAccounts ?? []) await directory.addServiceAccount(account);
  for (const client of accounts.clients ?? []) await directory.addClient(client);
}

export async function loadAccountsFile(directory: Directory, path: string): Promise<void> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch {
    throw new IdpConfigError(`cannot read accounts file ${path}`);
  }
  await loadAccounts(directory, parseAccountsFile(text, path));
}
