import { parseScopeString } from "../../identity/claims.ts";
import type { Directory, Principal } from "./directory.ts";
import { OAuthError } from "./errors.ts";
import type { FailureLimiter } from "./failure-limiter.ts";
import type { TokenIssuer } from "./token-issuer.ts";

/**
 * The token endpoint's grant logic (RFC 6749 §4.3 password, §4.4 client credentials),
 * independent of the HTTP framework: parameters in, a token response or an OAuthError out.
 */

export type TokenParams = Readonly<Record<string, string>>;

export interface TokenSuccess {
  readonly access_token: string;
  readonly token_type: "Bearer";
  readonly expires_in: number;
  readonly scope: string;
}

/**
 * Failed credential checks are counted per principal *and source address*, so a stranger who
 * guesses wrong locks out only itself, never the owner of the secret calling from elsewhere;
 * a per-source budget bounds one source spraying guesses over many principals.
 */
export interface FailureLimits {
  readonly perPrincipal: FailureLimiter;
  readonly perSource: FailureLimiter;
}

export interface TokenEndpointDeps {
  readonly directory: Directory;
  readonly issuer: TokenIssuer;
  readonly limits: FailureLimits | undefined;
}

/** The peer address of the token request (the socket's, never a forwarded header). */
export type RequestSource = string;

const MAX_PARAM_LENGTH = 4096;

/** RFC 6749 §3.2: parameters must not repeat. Values are bounded so nothing huge reaches scrypt. */
export function parseFormParams(body: string): TokenParams {
  const params: Record<string, string> = {};
  for (const [name, value] of new URLSearchParams(body)) {
    if (Object.hasOwn(params, name)) throw new OAuthError("invalid_request", `parameter ${name} is repeated`);
    if (value.length > MAX_PARAM_LENGTH)
      throw new OAuthError("invalid_request", `parameter ${name} is too long`);
    params[name] = value;
  }
  return params;
}

export function parseJsonParams(body: unknown): TokenParams {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new OAuthError("invalid_request", "the request body must be a JSON object");
  }
  const params: Record<string, string> = {};
  for (const [name, value] of Object.entries(body)) {
    if (typeof value !== "string")
      throw new OAuthError("invalid_request", `parameter ${name} must be a string`);
    if (value.length > MAX_PARAM_LENGTH)
      throw new OAuthError("invalid_request", `parameter ${name} is too long`);
    params[name] = value;
  }
  return params;
}

interface ClientCredentials {
  readonly clientId: string;
  readonly secret: string;
  readonly viaBasic: boolean;
}

function formDecode(value: string): string {
  return decodeURIComponent(value.replace(/\+/g, "%20"));
}

/** HTTP Basic client authentication; id and secret are form-urlencoded first (RFC 6749 §2.3.1). */
function parseBasic(authorization: string | undefined): ClientCredentials | undefined {
  if (authorization === undefined || authorization.length === 0) return undefined;
  const match = /^Basic ([A-Za-z0-9+/]+={0,2})$/i.exec(authorization);
  if (match === null || match[1] === undefined) {
    throw new OAuthError("invalid_client", "client authentication failed", {
      basicChallenge: /^basic\b/i.test(authorization),
    });
  }
  const decoded = Buffer.from(match[1], "base64").toString("utf8");
  const colon = decoded.indexOf(":");
  try {
    if (colon <= 0) throw new Error("no client id");
    return {
      clientId: formDecode(decoded.slice(0, colon)),
      secret: formDecode(decoded.slice(colon + 1)),
      viaBasic: true,
    };
  } catch {
    throw new OAuthError("invalid_client", "client authentication failed", { basicChallenge: true });
  }
}

function clientCredentials(
  params: TokenParams,
  authorization: string | undefined,
): ClientCredentials | undefined {
  const basic = parseBasic(authorization);
  const bodyId = params.client_id;
  const bodySecret = params.client_secret;
  if (basic !== undefined) {
    if (bodySecret !== undefined) {
      throw new OAuthError("invalid_request", "use only one client authentication method");
    }
    if (bodyId !== undefined && bodyId !== basic.clientId) {
      throw new OAuthError("invalid_request", "client_id does not match the authenticated client");
    }
    return basic;
  }
  if (bodySecret !== undefined && bodyId === undefined) {
    throw new OAuthError("invalid_request", "client_secret requires client_id");
  }
  if (bodyId !== undefined) {
    // Only confidential clients exist here: a bare client_id authenticates nothing.
    if (bodySecret === undefined) throw new OAuthError("invalid_client", "client authentication failed");
    return { clientId: bodyId, secret: bodySecret, viaBasic: false };
  }
  return undefined;
}

function refuseWhenLimited(limiter: FailureLimiter, key: string): void {
  const check = limiter.check(key);
  if (!check.allowed) {
    throw new OAuthError("rate_limited", "too many failed attempts; retry later", {
      retryAfterSec: check.retryAfterSec,
    });
  }
}

/** Runs one credential check under the failure limits; `undefined` from the check is a failure. */
async function limited<T>(
  limits: FailureLimits | undefined,
  source: RequestSource,
  principalKey: string,
  check: () => Promise<T | undefined>,
): Promise<T | undefined> {
  if (limits === undefined) return check();
  const key = `${principalKey}|${source}`;
  const sourceKey = `source|${source}`;
  refuseWhenLimited(limits.perSource, sourceKey);
  refuseWhenLimited(limits.perPrincipal, key);
  const result = await check();
  if (result === undefined) {
    limits.perPrincipal.recordFailure(key);
    limits.perSource.recordFailure(sourceKey);
  } else {
    limits.perPrincipal.reset(key);
  }
  return result;
}

async function authenticateClient(
  deps: TokenEndpointDeps,
  source: RequestSource,
  credentials: ClientCredentials,
): Promise<Principal> {
  const principal = await limited(deps.limits, source, `client:${credentials.clientId}`, () =>
    deps.directory.authenticateClient(credentials.clientId, credentials.secret),
  );
  if (principal === undefined) {
    throw new OAuthError("invalid_client", "client authentication failed", {
      basicChallenge: credentials.viaBasic,
    });
  }
  return principal;
}

function grantedScopes(params: TokenParams, allowed: readonly string[]): string[] {
  if (params.scope === undefined) return [...allowed];
  const requested = parseScopeString(params.scope);
  if (requested === undefined) throw new OAuthError("invalid_scope", "scope is malformed");
  if (requested.length === 0) return [...allowed];
  const denied = requested.filter((s) => !allowed.includes(s));
  if (denied.length > 0) throw new OAuthError("invalid_scope", "a requested scope is not allowed");
  return requested;
}

/** `audience` (common IdP extension) or `resource` (RFC 8707); must be one the principal may receive. */
function grantedAudience(params: TokenParams, principal: Principal): string {
  const { audience, resource } = params;
  if (audience !== undefined && resource !== undefined && audience !== resource) {
    throw new OAuthError("invalid_target", "audience and resource differ");
  }
  const requested = audience ?? resource;
  const fallback = principal.audiences[0];
  if (requested === undefined || requested.length === 0) {
    if (fallback === undefined) throw new OAuthError("invalid_target", "no audience is configured");
    return fallback;
  }
  if (!principal.audiences.includes(requested)) {
    throw new OAuthError("invalid_target", "the requested audience is not allowed");
  }
  return requested;
}

async function issueFor(
  deps: TokenEndpointDeps,
  principal: Principal,
  params: TokenParams,
  clientId: string | undefined,
): Promise<TokenSuccess> {
  const scopes = grantedScopes(params, principal.scopes);
  const audience = grantedAudience(params, principal);
  const token = await deps.issuer.issue({
    subject: principal.subject,
    scopes,
    audience,
    roles: principal.roles,
    claims: principal.claims,
    ...(clientId === undefined ? {} : { clientId }),
    ...(principal.tenant === undefined ? {} : { tenant: principal.tenant }),
  });
  return {
    access_token: token.accessToken,
    token_type: "Bearer",
    expires_in: token.expiresIn,
    scope: token.scope,
  };
}

async function clientCredentialsGrant(
  deps: TokenEndpointDeps,
  source: RequestSource,
  params: TokenParams,
  authorization: string | undefined,
): Promise<TokenSuccess> {
  const credentials = clientCredentials(params, authorization);
  if (credentials === undefined) throw new OAuthError("invalid_client", "client authentication is required");
  const principal = await authenticateClient(deps, source, credentials);
  return issueFor(deps, principal, params, credentials.clientId);
}

async function passwordGrant(
  deps: TokenEndpointDeps,
  source: RequestSource,
  params: TokenParams,
  authorization: string | undefined,
): Promise<TokenSuccess> {
  const { username, password } = params;
  if (username === undefined || username.length === 0 || password === undefined) {
    throw new OAuthError("invalid_request", "username and password are required");
  }
  const credentials = clientCredentials(params, authorization);
  if (credentials !== undefined) await authenticateClient(deps, source, credentials);
  const account = await limited(deps.limits, source, `user:${username}`, () =>
    deps.directory.authenticateServiceAccount(username, password),
  );
  if (account === undefined) throw new OAuthError("invalid_grant", "the username or password is incorrect");
  return issueFor(deps, account, params, credentials?.clientId);
}

export async function handleTokenRequest(
  params: TokenParams,
  authorization: string | undefined,
  source: RequestSource,
  deps: TokenEndpointDeps,
): Promise<TokenSuccess> {
  const grantType = params.grant_type;
  if (grantType === undefined || grantType.length === 0) {
    throw new OAuthError("invalid_request", "grant_type is required");
  }
  switch (grantType) {
    case "client_credentials":
      return clientCredentialsGrant(deps, source, params, authorization);
    case "password":
      return passwordGrant(deps, source, params, authorization);
    default:
      throw new OAuthError("unsupported_grant_type", "the grant type is not supported");
  }
}
