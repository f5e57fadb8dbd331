import { isRecord } from "../core/own-property.ts";
import { ExecutionError } from "./errors.ts";
import { ROUTING_OVERRIDE_HEADERS, ROUTING_OVERRIDE_PARAMETERS } from "./routing-overrides.ts";

/** Resolves a secret reference to its value; the only way a secret enters the executor. */
export type SecretResolver = (ref: string) => Promise<string>;

/** Static API key, sent in a header or a query parameter. */
export interface ApiKeyProfile {
  readonly type: "static";
  readonly id: string;
  readonly kind: "api_key";
  readonly in: "header" | "query";
  readonly name: string;
  readonly secretRef: string;
}

/** Static bearer token. */
export interface BearerProfile {
  readonly type: "static";
  readonly id: string;
  readonly kind: "bearer";
  readonly secretRef: string;
}

/** How the client authenticates at the token endpoint (RFC 6749 §2.3.1). */
export type ClientAuthMethod = "client_secret_basic" | "client_secret_post";

/** Machine-to-machine OAuth (RFC 6749 §4.4). */
export interface ClientCredentialsProfile {
  readonly type: "oauth_client_credentials";
  readonly id: string;
  readonly tokenUrl: string;
  readonly clientId: string;
  readonly clientSecretRef: string;
  readonly scopes: readonly string[];
  readonly audience?: string;
  readonly clientAuth?: ClientAuthMethod;
}

/** A user's delegated OAuth grant: authorization code + PKCE (S256), with refresh. */
export interface OAuthUserProfile {
  readonly type: "oauth_user";
  readonly id: string;
  readonly authorizationUrl: string;
  readonly tokenUrl: string;
  readonly clientId: string;
  /** Absent for a public client (PKCE alone). */
  readonly clientSecretRef?: string;
  readonly scopes: readonly string[];
  readonly audience?: string;
  readonly clientAuth?: ClientAuthMethod;
  /** RFC 7009 endpoint: a disconnect revokes the grant there too. */
  readonly revocationUrl?: string;
}

/** What kind of token the end user's own token is, for the provider (RFC 8693 §3). */
export const SUBJECT_TOKEN_TYPES = {
  access_token: "urn:ietf:params:oauth:token-type:access_token",
  jwt: "urn:ietf:params:oauth:token-type:jwt",
  id_token: "urn:ietf:params:oauth:token-type:id_token",
} as const;
export type SubjectTokenType = keyof typeof SUBJECT_TOKEN_TYPES;

/**
 * On-behalf-of (RFC 8693 token exchange): the end user's verified token is exchanged at the
 * provider for one scoped to the upstream; the user's own token never reaches the upstream.
 */
export interface TokenExchangeProfile {
  readonly type: "oauth_token_exchange";
  readonly id: string;
  readonly tokenUrl: string;
  readonly clientId: string;
  /** Absent: a public client (client_id in the body). */
  readonly clientSecretRef?: string;
  readonly scopes: readonly string[];
  readonly audience?: string;
  /** RFC 8707 resource indicator of the upstream. */
  readonly resource?: string;
  readonly clientAuth?: ClientAuthMethod;
  /** Default `access_token`. */
  readonly subjectTokenType?: SubjectTokenType;
}

/**
 * Authorization only: the decision is made and enforced, and the upstream call carries no
 * credential from Authority. Reserved id: no stored profile may be called `none`.
 */
export const NO_AUTH_PROFILE_ID = "none";
export interface NoAuthProfile {
  readonly type: "none";
  readonly id: typeof NO_AUTH_PROFILE_ID;
}
export const noAuthProfile: NoAuthProfile = { type: "none", id: NO_AUTH_PROFILE_ID };

export type StaticProfile = ApiKeyProfile | BearerProfile;
export type AuthProfile =
  | StaticProfile
  | ClientCredentialsProfile
  | OAuthUserProfile
  | TokenExchangeProfile
  | NoAuthProfile;

/** Profiles whose credential is the end user's own delegated authority. */
export function isUserDelegated(profile: AuthProfile): profile is OAuthUserProfile | TokenExchangeProfile {
  return profile.type === "oauth_user" || profile.type === "oauth_token_exchange";
}

/** A stored user token set. Times are epoch milliseconds. */
export interface TokenSet {
  readonly accessToken: string;
  readonly refreshToken?: string;
  readonly expiresAt?: number;
  readonly scope?: string;
  readonly tokenType: "Bearer";
}

/** Where user token sets live; the authority service backs it with the Store. */
export interface TokenSetStore {
  get(key: string): Promise<TokenSet | undefined>;
  put(key: string, tokenSet: TokenSet): Promise<void>;
  delete(key: string): Promise<void>;
}

/** Thrown by parseAuthProfile; the message names the field, never a value. */
export class AuthProfileError extends Error {
  readonly code = "auth_profile_invalid";
  readonly field: string;

  constructor(field: string, problem: string) {
    super(`auth profile ${field}: ${problem}`);
    this.name = "AuthProfileError";
    this.field = field;
  }
}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const SCOPE = /^[\x21\x23-\x5b\x5d-\x7e]+$/;
// Headers the transport owns or that carry the caller's identity: an API key may not use them.
const RESERVED_HEADERS: ReadonlySet<string> = new Set([
  "host",
  "content-length",
  "content-type",
  "transfer-encoding",
  "connection",
  "keep-alive",
  "upgrade",
  "te",
  "trailer",
  "expect",
  "proxy-authorization",
  "cookie",
]);

/**
 * On ext_authz Envoy sets the injected header on the upstream request: a name Envoy, the
 * authority or an upstream router reads as an instruction would let a partner admin steer them.
 */
function isInjectableHeader(name: string): boolean {
  const lower = name.toLowerCase();
  return (
    TOKEN.test(name) &&
    !RESERVED_HEADERS.has(lower) &&
    !ROUTING_OVERRIDE_HEADERS.has(lower) &&
    !lower.startsWith("x-envoy-") &&
    !lower.startsWith("x-authority-") &&
    !lower.startsWith("x-forwarded-") &&
    lower !== "forwarded"
  );
}

function text(record: Record<string, unknown>, field: string, max = 2048): string {
  const value = record[field];
  if (typeof value !== "string" || value.length === 0 || value.length > max) {
    throw new AuthProfileError(field, `must be a non-empty string of at most ${max} characters`);
  }
  return value;
}

function optionalText(record: Record<string, unknown>, field: string): string | undefined {
  return record[field] === undefined ? undefined : text(record, field);
}

function isLoopback(hostname: string): boolean {
  return hostname === "localhost" || hostname === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(hostname);
}

/** OAuth endpoints must be HTTPS; plain HTTP is accepted only on loopback (development, tests). */
function endpoint(record: Record<string, unknown>, field: string): string {
  const value = text(record, field);
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new AuthProfileError(field, "must be an absolute URL");
  }
  if (url.username !== "" || url.password !== "" || url.hash !== "") {
    throw new AuthProfileError(field, "must not carry credentials or a fragment");
  }
  if (url.protocol === "https:") return value;
  if (url.protocol === "http:" && isLoopback(url.hostname)) return value;
  throw new AuthProfileError(field, "must use https (http only on loopback)");
}

function scopes(record: Record<string, unknown>): string[] {
  const value = record.scopes ?? [];
  if (!Array.isArray(value) || value.length > 100) throw new AuthProfileError("scopes", "must be an array");
  return value.map((scope) => {
    if (typeof scope !== "string" || !SCOPE.test(scope)) {
      throw new AuthProfileError("scopes", "each scope must be a non-empty scope-token");
    }
    return scope;
  });
}

function optionalEndpoint(record: Record<string, unknown>, field: string): string | undefined {
  return record[field] === undefined ? undefined : endpoint(record, field);
}

/** RFC 8707 §2: an absolute URI without a fragment. */
function optionalResource(record: Record<string, unknown>): string | undefined {
  const value = optionalText(record, "resource");
  if (value === undefined) return undefined;
  if (!URL.canParse(value) || new URL(value).hash !== "")
    throw new AuthProfileError("resource", "must be an absolute URI without a fragment");
  return value;
}

function subjectTokenType(record: Record<string, unknown>): SubjectTokenType | undefined {
  const value = record.subjectTokenType;
  if (value === undefined || (typeof value === "string" && Object.hasOwn(SUBJECT_TOKEN_TYPES, value)))
    return value as SubjectTokenType | undefined;
  throw new AuthProfileError("subjectTokenType", "must be access_token, jwt or id_token");
}

function clientAuth(record: Record<string, unknown>): ClientAuthMethod | undefined {
  const value = record.clientAuth;
  if (value === undefined || value === "client_secret_basic" || value === "client_secret_post") return value;
  throw new AuthProfileError("clientAuth", "must be client_secret_basic or client_secret_post");
}

function withOptional<T extends object>(base: T, extra: Record<string, unknown>): T {
  const out: Record<string, unknown> = { ...(base as object) };
  for (const [key, value] of Object.entries(extra)) if (value !== undefined) out[key] = value;
  return out as T;
}

/** Validates an auth profile document (from the admin API or the Store). */
export function parseAuthProfile(value: unknown): AuthProfile {
  if (!isRecord(value)) throw new AuthProfileError("(root)", "must be an object");
  const id = text(value, "id", 256);
  switch (value.type) {
    case "none":
      if (id !== NO_AUTH_PROFILE_ID)
        throw new AuthProfileError("id", `must be ${NO_AUTH_PROFILE_ID} for type none`);
      return noAuthProfile;
    case "static": {
      const secretRef = text(value, "secretRef");
      if (value.kind === "bearer") return { type: "static", id, kind: "bearer", secretRef };
      if (value.kind !== "api_key") throw new AuthProfileError("kind", "must be api_key or bearer");
      const where = value.in;
      if (where !== "header" && where !== "query")
        throw new AuthProfileError("in", "must be header or query");
      const name = text(value, "name", 256);
      if (where === "header" && !isInjectableHeader(name)) {
        throw new AuthProfileError(
          "name",
          "must be a header name that the transport, Envoy, the authority and routing overrides do not own",
        );
      }
      if (where === "query" && ROUTING_OVERRIDE_PARAMETERS.has(name.toLowerCase())) {
        throw new AuthProfileError("name", "must not be a routing-override parameter");
      }
      return { type: "static", id, kind: "api_key", in: where, name, secretRef };
    }
    case "oauth_client_credentials":
      return withOptional<ClientCredentialsProfile>(
        {
          type: "oauth_client_credentials",
          id,
          tokenUrl: endpoint(value, "tokenUrl"),
          clientId: text(value, "clientId"),
          clientSecretRef: text(value, "clientSecretRef"),
          scopes: scopes(value),
        },
        { audience: optionalText(value, "audience"), clientAuth: clientAuth(value) },
      );
    case "oauth_user":
      return withOptional<OAuthUserProfile>(
        {
          type: "oauth_user",
          id,
          authorizationUrl: endpoint(value, "authorizationUrl"),
          tokenUrl: endpoint(value, "tokenUrl"),
          clientId: text(value, "clientId"),
          scopes: scopes(value),
        },
        {
          clientSecretRef: optionalText(value, "clientSecretRef"),
          audience: optionalText(value, "audience"),
          clientAuth: clientAuth(value),
          revocationUrl: optionalEndpoint(value, "revocationUrl"),
        },
      );
    case "oauth_token_exchange":
      return withOptional<TokenExchangeProfile>(
        {
          type: "oauth_token_exchange",
          id,
          tokenUrl: endpoint(value, "tokenUrl"),
          clientId: text(value, "clientId"),
          scopes: scopes(value),
        },
        {
          clientSecretRef: optionalText(value, "clientSecretRef"),
          audience: optionalText(value, "audience"),
          resource: optionalResource(value),
          clientAuth: clientAuth(value),
          subjectTokenType: subjectTokenType(value),
        },
      );
    default:
      throw new AuthProfileError(
        "type",
        "must be static, oauth_client_credentials, oauth_user or oauth_token_exchange",
      );
  }
}

// Visible ASCII only: a secret with CR/LF or controls could split or smuggle headers.
const HEADER_SAFE = /^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/;

export function unavailable(issue: string, oauthError?: string): ExecutionError {
  return new ExecutionError("auth_profile_unavailable", {
    details: oauthError === undefined ? { issue } : { issue, oauth_error: oauthError },
  });
}

/** The end user has no usable grant: the client must connect first (docs/errors.md). */
export function grantRequired(issue: string, oauthError?: string): ExecutionError {
  return new ExecutionError("user_grant_required", {
    details: oauthError === undefined ? { issue } : { issue, oauth_error: oauthError },
  });
}

/** Checks that a credential can travel in a header; the value is never echoed. */
export function headerSafe(value: string): string {
  if (value.length > 16384 || !HEADER_SAFE.test(value)) throw unavailable("credential_not_header_safe");
  return value;
}

/** Resolves a reference; any failure (or an empty value) is `auth_profile_unavailable`. */
export async function resolveSecret(resolver: SecretResolver, ref: string): Promise<string> {
  let value: string;
  try {
    value = await resolver(ref);
  } catch {
    throw unavailable("secret_unavailable");
  }
  if (typeof value !== "string" || value.length === 0) throw unavailable("secret_unavailable");
  return value;
}
