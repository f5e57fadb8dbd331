import { isScopeToken } from "../../identity/claims.ts";
import {
  defaultScryptCost,
  hashSecret,
  isSecretHash,
  type ScryptCost,
  verifyAgainstDummy,
  verifySecret,
} from "../../identity/secret-hash.ts";
import { IdpConfigError } from "./errors.ts";

/**
 * The development IdP's in-memory directory of service accounts (password grant) and
 * clients (client-credentials grant). Secrets are kept only as scrypt hashes.
 */

interface PrincipalInput {
  readonly subject?: string;
  /** The scopes its tokens may carry; none when omitted. */
  readonly scopes?: readonly string[];
  readonly roles?: readonly string[];
  readonly tenant?: string;
  /** Audiences a token may be issued for; the first is the default. Default: the IdP's audience. */
  readonly audience?: string | readonly string[];
  /** Extra claims copied into every token (reserved claim names are refused). */
  readonly claims?: Readonly<Record<string, unknown>>;
}

export interface ServiceAccountInput extends PrincipalInput {
  readonly username: string;
  /** The password, or `passwordHash` (an scrypt hash from hashSecret) — exactly one. */
  readonly password?: string;
  readonly passwordHash?: string;
}

export interface ClientInput extends PrincipalInput {
  readonly clientId: string;
  /** The secret, or `clientSecretHash` — exactly one. */
  readonly clientSecret?: string;
  readonly clientSecretHash?: string;
}

/** What a token is issued from, whichever grant authenticated it. */
export interface Principal {
  readonly subject: string;
  readonly scopes: readonly string[];
  readonly roles: readonly string[];
  readonly tenant: string | undefined;
  readonly audiences: readonly string[];
  readonly claims: Readonly<Record<string, unknown>>;
}

interface Entry extends Principal {
  readonly secretHash: string;
}

export interface Directory {
  addServiceAccount(input: ServiceAccountInput): Promise<void>;
  removeServiceAccount(username: string): boolean;
  addClient(input: ClientInput): Promise<void>;
  removeClient(clientId: string): boolean;
  hasClient(clientId: string): boolean;
  /** The account when the password matches; undefined otherwise (same work either way). */
  authenticateServiceAccount(username: string, password: string): Promise<Principal | undefined>;
  authenticateClient(clientId: string, secret: string): Promise<Principal | undefined>;
  /** Every scope some account or client may receive (for discovery). */
  scopes(): string[];
  /** How many service accounts and clients are registered. */
  size(): { readonly serviceAccounts: number; readonly clients: number };
}

export interface DirectoryOptions {
  readonly defaultAudience: string;
  readonly reservedClaims: readonly string[];
  readonly scryptCost?: ScryptCost;
}

const MIN_SECRET_LENGTH = 8;
const MAX_SECRET_LENGTH = 1024;
/** Visible ASCII: identifiers travel in form bodies, Basic credentials and logs. */
const IDENTIFIER = /^[\x21-\x7E]{1,256}$/;

function fail(what: string, message: string): never {
  throw new IdpConfigError(`${what}: ${message}`);
}

function identifier(value: unknown, what: string, name: string): string {
  if (typeof value !== "string" || !IDENTIFIER.test(value)) {
    fail(what, `${name} must be 1-256 visible ASCII characters`);
  }
  return value;
}

function optionalString(value: unknown, what: string, name: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "string" || value.length === 0 || value.length > 1024) {
    fail(what, `${name} must be a non-empty string`);
  }
  return value;
}

function stringArray(value: unknown, what: string, name: string): string[] {
  if (
    !Array.isArray(value) ||
    !value.every((v) => typeof v === "string" && v.length > 0 && v.length <= 256)
  ) {
    fail(what, `${name} must be an array of non-empty strings`);
  }
  return [...new Set(value as string[])];
}

async function secretHashOf(
  secret: unknown,
  hash: unknown,
  what: string,
  name: string,
  cost: ScryptCost,
): Promise<string> {
  if ((secret === undefined) === (hash === undefined))
    fail(what, `give exactly one of ${name} or ${name}Hash`);
  if (hash !== undefined) {
    if (typeof hash !== "string" || !isSecretHash(hash)) fail(what, `${name}Hash is not an scrypt hash`);
    return hash;
  }
  if (typeof secret !== "string" || secret.length < MIN_SECRET_LENGTH || secret.length > MAX_SECRET_LENGTH) {
    fail(what, `${name} must be ${MIN_SECRET_LENGTH}-${MAX_SECRET_LENGTH} characters`);
  }
  return hashSecret(secret, cost);
}

function principalOf(
  input: PrincipalInput,
  defaultSubject: string,
  what: string,
  options: DirectoryOptions,
): Principal {
  if (typeof input !== "object" || input === null) fail(what, "entry must be an object");
  // No scopes is a principal that may only receive tokens without a scope.
  const scopes = input.scopes === undefined ? [] : stringArray(input.scopes, what, "scopes");
  const badScope = scopes.find((s) => !isScopeToken(s));
  if (badScope !== undefined) fail(what, `scope ${JSON.stringify(badScope)} is not a valid scope token`);
  const roles = input.roles === undefined ? [] : stringArray(input.roles, what, "roles");
  const audiences =
    input.audience === undefined
      ? [options.defaultAudience]
      : stringArray(typeof input.audience === "string" ? [input.audience] : input.audience, what, "audience");
  if (audiences.length === 0) fail(what, "audience must not be empty");
  const claims = input.claims ?? {};
  if (typeof claims !== "object" || claims === null || Array.isArray(claims)) {
    fail(what, "claims must be an object");
  }
  const reserved = Object.keys(claims).find((name) => options.reservedClaims.includes(name));
  if (reserved !== undefined) fail(what, `claim ${JSON.stringify(reserved)} is reserved`);
  let copied: Record<string, unknown>;
  try {
    copied = JSON.parse(JSON.stringify(claims)) as Record<string, unknown>;
  } catch {
    fail(what, "claims must be JSON");
  }
  return {
    subject: optionalString(input.subject, what, "subject") ?? defaultSubject,
    scopes,
    roles,
    tenant: optionalString(input.tenant, what, "tenant"),
    audiences,
    claims: Object.freeze(copied),
  };
}

function withoutSecret(entry: Entry): Principal {
  const { secretHash: _omitted, ...principal } = entry;
  return principal;
}

export function createDirectory(options: DirectoryOptions): Directory {
  const cost = options.scryptCost ?? defaultScryptCost;
  const accounts = new Map<string, Entry>();
  const clients = new Map<string, Entry>();

  async function authenticate(
    map: Map<string, Entry>,
    id: string,
    secret: string,
  ): Promise<Principal | undefined> {
    const entry = map.get(id);
    if (entry === undefined || secret.length > MAX_SECRET_LENGTH) {
      await verifyAgainstDummy(secret.slice(0, MAX_SECRET_LENGTH));
      return undefined;
    }
    return (await verifySecret(secret, entry.secretHash)) ? withoutSecret(entry) : undefined;
  }

  return {
    async addServiceAccount(input) {
      const username = identifier(input?.username, "service account", "username");
      const what = `service account ${username}`;
      if (accounts.has(username)) fail(what, "already exists");
      const principal = principalOf(input, username, what, options);
      const secretHash = await secretHashOf(input.password, input.passwordHash, what, "password", cost);
      if (accounts.has(username)) fail(what, "already exists");
      accounts.set(username, { ...principal, secretHash });
    },
    removeServiceAccount: (username) => accounts.delete(username),
    async addClient(input) {
      const clientId = identifier(input?.clientId, "client", "clientId");
      const what = `client ${clientId}`;
      if (clients.has(clientId)) fail(what, "already exists");
      const principal = principalOf(input, clientId, what, options);
      const secretHash = await secretHashOf(
        input.clientSecret,
        input.clientSecretHash,
        what,
        "clientSecret",
        cost,
      );
      if (clients.has(clientId)) fail(what, "already exists");
      clients.set(clientId, { ...principal, secretHash });
    },
    removeClient: (clientId) => clients.delete(clientId),
    hasClient: (clientId) => clients.has(clientId),
    authenticateServiceAccount: (username, password) => authenticate(accounts, username, password),
    authenticateClient: (clientId, secret) => authenticate(clients, clientId, secret),
    scopes() {
      const all = new Set<string>();
      for (const entry of [...accounts.values(), ...clients.values()])
        for (const s of entry.scopes) all.add(s);
      return [...all].sort();
    },
    size: () => ({ serviceAccounts: accounts.size, clients: clients.size }),
  };
}
