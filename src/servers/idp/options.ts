import { positiveIntegerOption } from "../../core/positive-integer.ts";
import type { ScryptCost } from "../../identity/secret-hash.ts";
import type { Logger } from "../../observability/logger.ts";
import type { AccountsFile } from "./accounts-file.ts";
import type { AuthorizationCodeOptions } from "./authorization-code.ts";
import { IdpConfigError } from "./errors.ts";

export interface IdpServerOptions {
  /** Public issuer URL. Default: `http://<listen address>` once listening. */
  readonly issuer?: string;
  /** Audience of tokens when an account or client names none (default "authority"). */
  readonly audience?: string;
  /** Access-token lifetime (default 900 s). */
  readonly tokenLifetimeSec?: number;
  /** Name of the tenant claim (default "tenant"). */
  readonly tenantClaim?: string;
  /** How long a rotated-out public key stays in the JWKS (default 3600 s; keep it ≥ token lifetime). */
  readonly rotationGraceSec?: number;
  /** Directory to persist signing keys in (file mode 0600); in memory when unset. */
  readonly keysDir?: string;
  /** JSON accounts file loaded at start (see accounts-file.ts). */
  readonly accountsFile?: string;
  /** Accounts given inline, loaded after the file. */
  readonly accounts?: AccountsFile;
  /** Lockout after failed credential checks per username / client id; false disables. */
  readonly failureLimit?: { readonly maxFailures: number; readonly windowSec: number } | false;
  /** Cache-Control max-age of the JWKS (default 300 s, capped at half the grace period). */
  readonly jwksMaxAgeSec?: number;
  readonly logger?: Logger;
  readonly scryptCost?: ScryptCost;
  /** Development only: `POST /admin/clients` lets an admin add clients (src/servers/idp/client-registration.ts). */
  readonly clientRegistration?: boolean;
  /**
   * Development only: the authorization-code flow with PKCE, dynamic client registration and
   * a non-interactive sign-in of this user (src/servers/idp/authorization-code.ts).
   */
  readonly authorizationCode?: AuthorizationCodeOptions;
  /** Clock for tests. */
  readonly now?: () => Date;
}

export interface ResolvedIdpOptions {
  readonly issuer: string | undefined;
  readonly audience: string;
  readonly tokenLifetimeSec: number;
  readonly tenantClaim: string;
  readonly rotationGraceSec: number;
  readonly keysDir: string | undefined;
  readonly accountsFile: string | undefined;
  readonly accounts: AccountsFile | undefined;
  readonly failureLimit: { readonly maxFailures: number; readonly windowSec: number } | undefined;
  readonly jwksMaxAgeSec: number;
  readonly logger: Logger | undefined;
  readonly scryptCost: ScryptCost | undefined;
  readonly now: () => Date;
}

function fail(message: string): never {
  throw new IdpConfigError(`identity provider: ${message}`);
}

const positiveInteger = (value: unknown, name: string, fallback: number): number =>
  positiveIntegerOption(value, fallback, name, fail);

function nonEmpty(value: unknown, name: string, fallback: string): string {
  if (value === undefined) return fallback;
  if (typeof value !== "string" || value.length === 0) fail(`${name} must be a non-empty string`);
  return value;
}

/** An issuer is an http(s) URL without query or fragment, compared without a trailing slash. */
export function normalizeIssuer(issuer: string): string {
  let url: URL;
  try {
    url = new URL(issuer);
  } catch {
    fail("issuer must be a URL");
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") fail("issuer must be http(s)");
  if (url.search !== "" || url.hash !== "" || url.username !== "" || url.password !== "") {
    fail("issuer must not have a query, fragment or credentials");
  }
  return url.href.replace(/\/+$/, "");
}

export function resolveIdpOptions(options: IdpServerOptions = {}): ResolvedIdpOptions {
  if (typeof options !== "object" || options === null) fail("options must be an object");
  const rotationGraceSec = positiveInteger(options.rotationGraceSec, "rotationGraceSec", 3600);
  const jwksMaxAgeSec = positiveInteger(options.jwksMaxAgeSec, "jwksMaxAgeSec", 300);
  let failureLimit: ResolvedIdpOptions["failureLimit"] = { maxFailures: 5, windowSec: 60 };
  if (options.failureLimit === false) failureLimit = undefined;
  else if (options.failureLimit !== undefined) {
    failureLimit = {
      maxFailures: positiveInteger(options.failureLimit.maxFailures, "failureLimit.maxFailures", 5),
      windowSec: positiveInteger(options.failureLimit.windowSec, "failureLimit.windowSec", 60),
    };
  }
  if (options.now !== undefined && typeof options.now !== "function") fail("now must be a function");
  return {
    issuer: options.issuer === undefined ? undefined : normalizeIssuer(options.issuer),
    audience: nonEmpty(options.audience, "audience", "authority"),
    tokenLifetimeSec: positiveInteger(options.tokenLifetimeSec, "tokenLifetimeSec", 900),
    tenantClaim: nonEmpty(options.tenantClaim, "tenantClaim", "tenant"),
    rotationGraceSec,
    keysDir: options.keysDir === undefined ? undefined : nonEmpty(options.keysDir, "keysDir", ""),
    accountsFile:
      options.accountsFile === undefined ? undefined : nonEmpty(options.accountsFile, "accountsFile", ""),
    accounts: options.accounts,
    failureLimit,
    // Verifiers may keep a fetched JWKS for max-age; capping it at half the grace period
    // bounds how long a retired key outlives its grace in their caches.
    jwksMaxAgeSec: Math.max(1, Math.min(jwksMaxAgeSec, Math.floor(rotationGraceSec / 2))),
    logger: options.logger,
    scryptCost: options.scryptCost,
    now: options.now ?? (() => new Date()),
  };
}
