import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import type { FastifyInstance, FastifyReply } from "fastify";
import { positiveIntegerOption } from "../../core/positive-integer.ts";
import { IdpConfigError, OAuthError } from "./errors.ts";
import type { TokenParams, TokenSuccess } from "./token-endpoint.ts";
import type { TokenIssuer } from "./token-issuer.ts";

/**
 * The authorization-code grant with PKCE for clients that get their own tokens (an MCP client
 * in `make dev`): dynamic client registration (RFC 7591) of public clients, `GET
 * /oauth2/authorize` (S256 only, RFC 8707 `resource`), and the code exchange the token endpoint
 * hands here. Development only: there is no login page — the authorize endpoint signs in the
 * one configured dev user without asking (its consent is the operator's, given by turning this
 * on). Bounds: registered clients, redirect URIs per client, pending codes; codes are single
 * use and short-lived; redirect URIs match exactly what was registered, and nothing is ever
 * redirected to an unregistered one.
 */

export const AUTHORIZE_PATH = "/oauth2/authorize";
export const REGISTRATION_PATH = "/oauth2/register";

export interface DevUser {
  readonly subject: string;
  readonly roles: readonly string[];
  /** Extra claims (e.g. `partner_id`). */
  readonly claims?: Readonly<Record<string, unknown>>;
}

export interface AuthorizationCodeOptions {
  /** Who the authorize endpoint signs in. */
  readonly user: DevUser;
  /** Resources (RFC 8707) a token may be asked for; any absolute http(s) URL when absent. */
  readonly resources?: readonly string[];
  /** Scopes a client may ask for (default: any scope token). */
  readonly scopes?: readonly string[];
  /** Registered clients kept (default 100); registration beyond is refused. */
  readonly maxClients?: number;
}

interface RegisteredClient {
  readonly clientId: string;
  readonly redirectUris: readonly string[];
}

interface PendingCode {
  readonly clientId: string;
  readonly redirectUri: string;
  readonly challenge: string;
  readonly scopes: readonly string[];
  readonly resource: string | undefined;
  readonly expiresAtMs: number;
}

const CODE_LIFETIME_MS = 60_000;
const MAX_PENDING_CODES = 1000;
const MAX_REDIRECT_URIS = 5;
const MAX_URI_LENGTH = 512;
const MAX_STATE_LENGTH = 512;
const MAX_SCOPES = 16;
const SCOPE_TOKEN = /^[\x21\x23-\x5b\x5d-\x7e]{1,128}$/;
/** RFC 7636 §4.1: 43–128 unreserved characters (S256 challenges are exactly 43). */
const PKCE_VALUE = /^[A-Za-z0-9._~-]{43,128}$/;
const LOOPBACK_HOSTS = new Set(["localhost", "127.0.0.1", "[::1]"]);

/** An absolute https URL (http on loopback only), no fragment or credentials, bounded. */
function redirectUriProblem(value: unknown): string | undefined {
  if (typeof value !== "string" || value.length === 0 || value.length > MAX_URI_LENGTH) return "bad length";
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return "not a URL";
  }
  if (url.hash !== "" || value.includes("#") || url.username !== "" || url.password !== "") return "fragment";
  if (url.protocol === "https:") return undefined;
  if (url.protocol === "http:" && LOOPBACK_HOSTS.has(url.hostname)) return undefined;
  return "scheme";
}

function absoluteResource(value: string): boolean {
  if (value.length > MAX_URI_LENGTH) return false;
  try {
    const url = new URL(value);
    return (url.protocol === "https:" || url.protocol === "http:") && url.hash === "" && !value.includes("#");
  } catch {
    return false;
  }
}

function s256(verifier: string): string {
  return createHash("sha256").update(verifier, "ascii").digest("base64url");
}

function sameText(a: string, b: string): boolean {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  return left.length === right.length && timingSafeEqual(left, right);
}

function scopesOf(value: string | undefined, allowed: readonly string[] | undefined): string[] {
  if (value === undefined || value.trim() === "") return [];
  const scopes = [...new Set(value.trim().split(/ +/))];
  if (scopes.length > MAX_SCOPES || scopes.some((scope) => !SCOPE_TOKEN.test(scope))) {
    throw new OAuthError("invalid_scope", "the scope is malformed");
  }
  if (allowed !== undefined && scopes.some((scope) => !allowed.includes(scope))) {
    throw new OAuthError("invalid_scope", "a requested scope is not offered");
  }
  return scopes;
}

function single(query: Record<string, unknown>, name: string): string | undefined {
  const value = query[name];
  if (value === undefined) return undefined;
  if (typeof value !== "string") throw new OAuthError("invalid_request", `parameter ${name} is repeated`);
  return value;
}

export interface AuthorizationCodeFlow {
  /** The `authorization_code` grant of the token endpoint. */
  exchange(params: TokenParams): Promise<TokenSuccess>;
  /** Fields the discovery documents add. */
  metadata(issuer: string): Record<string, unknown>;
}

export function registerAuthorizationCodeFlow(
  app: FastifyInstance,
  deps: {
    readonly issuer: () => string;
    readonly tokens: TokenIssuer;
    readonly options: AuthorizationCodeOptions;
    readonly now: () => Date;
  },
): AuthorizationCodeFlow {
  const { options, tokens, now } = deps;
  if (typeof options.user?.subject !== "string" || options.user.subject.length === 0) {
    throw new IdpConfigError("identity provider: authorizationCode.user.subject is required");
  }
  const maxClients = positiveIntegerOption(
    options.maxClients,
    100,
    "identity provider: authorizationCode.maxClients",
    (message) => {
      throw new IdpConfigError(message);
    },
  );
  const clients = new Map<string, RegisteredClient>();
  const codes = new Map<string, PendingCode>();

  const dropExpiredCodes = (): void => {
    const nowMs = now().getTime();
    for (const [code, pending] of codes) if (pending.expiresAtMs <= nowMs) codes.delete(code);
  };

  app.post(REGISTRATION_PATH, async (request, reply) => {
    const body = request.body;
    if (typeof body !== "object" || body === null || Array.isArray(body)) {
      return reply
        .code(400)
        .send({ error: "invalid_client_metadata", error_description: "a JSON object is required" });
    }
    const metadata = body as Record<string, unknown>;
    const uris = metadata.redirect_uris;
    if (!Array.isArray(uris) || uris.length === 0 || uris.length > MAX_REDIRECT_URIS) {
      return reply.code(400).send({
        error: "invalid_redirect_uri",
        error_description: `1 to ${MAX_REDIRECT_URIS} redirect_uris are required`,
      });
    }
    if (uris.some((uri) => redirectUriProblem(uri) !== undefined)) {
      return reply.code(400).send({
        error: "invalid_redirect_uri",
        error_description:
          "redirect URIs must be absolute https URLs (http only on loopback), without fragment",
      });
    }
    if (clients.size >= maxClients) {
      return reply
        .code(429)
        .send({ error: "invalid_client_metadata", error_description: "registration limit reached" });
    }
    const clientId = `dyn_${randomBytes(16).toString("base64url")}`;
    const redirectUris = [...new Set(uris as string[])];
    clients.set(clientId, { clientId, redirectUris });
    const name = typeof metadata.client_name === "string" ? metadata.client_name.slice(0, 128) : undefined;
    return reply
      .code(201)
      .header("cache-control", "no-store")
      .send({
        client_id: clientId,
        client_id_issued_at: Math.floor(now().getTime() / 1000),
        redirect_uris: redirectUris,
        grant_types: ["authorization_code"],
        response_types: ["code"],
        token_endpoint_auth_method: "none",
        ...(name === undefined ? {} : { client_name: name }),
      });
  });

  app.get(AUTHORIZE_PATH, async (request, reply) => {
    const query = request.query as Record<string, unknown>;
    // Until client and redirect URI are known good, errors are shown here, never redirected.
    const clientId = single(query, "client_id");
    const client = clientId === undefined ? undefined : clients.get(clientId);
    if (client === undefined) throw new OAuthError("invalid_request", "unknown client_id");
    const asked = single(query, "redirect_uri");
    const redirectUri = asked ?? (client.redirectUris.length === 1 ? client.redirectUris[0] : undefined);
    if (redirectUri === undefined || !client.redirectUris.includes(redirectUri)) {
      throw new OAuthError("invalid_request", "redirect_uri does not match a registered one");
    }
    const state = single(query, "state");
    const back = (params: Record<string, string>): FastifyReply => {
      const target = new URL(redirectUri);
      for (const [name, value] of Object.entries(params)) target.searchParams.set(name, value);
      if (state !== undefined) target.searchParams.set("state", state);
      target.searchParams.set("iss", deps.issuer());
      return reply.header("cache-control", "no-store").redirect(target.toString(), 302);
    };
    const refuse = (error: string, description: string) => back({ error, error_description: description });
    try {
      if (state !== undefined && state.length > MAX_STATE_LENGTH)
        return refuse("invalid_request", "state is too long");
      if (single(query, "response_type") !== "code") {
        return refuse("unsupported_response_type", "only response_type=code is supported");
      }
      const challenge = single(query, "code_challenge");
      const method = single(query, "code_challenge_method");
      // PKCE is required, and only S256: `plain` would hand the verifier to whoever sees the URL.
      if (challenge === undefined || !PKCE_VALUE.test(challenge) || method !== "S256") {
        return refuse("invalid_request", "PKCE with code_challenge_method=S256 is required");
      }
      const resource = single(query, "resource");
      if (
        resource !== undefined &&
        (!absoluteResource(resource) ||
          (options.resources !== undefined && !options.resources.includes(resource)))
      ) {
        return refuse("invalid_target", "the resource is not one this server issues tokens for");
      }
      const scopes = scopesOf(single(query, "scope"), options.scopes);
      dropExpiredCodes();
      if (codes.size >= MAX_PENDING_CODES) return refuse("temporarily_unavailable", "too many pending codes");
      const code = randomBytes(32).toString("base64url");
      codes.set(code, {
        clientId: client.clientId,
        redirectUri,
        challenge,
        scopes,
        resource,
        expiresAtMs: now().getTime() + CODE_LIFETIME_MS,
      });
      request.log.info(
        { clientId: client.clientId, subject: options.user.subject },
        "authorization code issued",
      );
      return back({ code });
    } catch (error) {
      if (error instanceof OAuthError) return refuse(error.code, error.description);
      throw error;
    }
  });

  return {
    async exchange(params) {
      const code = params.code ?? "";
      const pending = codes.get(code);
      // Single use: the code is gone whatever happens next.
      codes.delete(code);
      if (pending === undefined || pending.expiresAtMs <= now().getTime()) {
        throw new OAuthError("invalid_grant", "the code is invalid, used or expired");
      }
      if (params.client_id !== pending.clientId)
        throw new OAuthError("invalid_grant", "the code was issued to another client");
      if (params.redirect_uri !== pending.redirectUri) {
        throw new OAuthError("invalid_grant", "redirect_uri differs from the authorization request");
      }
      const verifier = params.code_verifier;
      if (
        verifier === undefined ||
        !PKCE_VALUE.test(verifier) ||
        !sameText(s256(verifier), pending.challenge)
      ) {
        throw new OAuthError("invalid_grant", "the code_verifier does not match");
      }
      // RFC 8707 §2.2: the token's resource is the one authorized, asked again or not at all.
      if (params.resource !== undefined && params.resource !== pending.resource) {
        throw new OAuthError("invalid_target", "the resource differs from the authorization request");
      }
      const issued = await tokens.issue({
        subject: options.user.subject,
        roles: options.user.roles,
        scopes: pending.scopes,
        clientId: pending.clientId,
        ...(pending.resource === undefined ? {} : { audience: pending.resource }),
        ...(options.user.claims === undefined ? {} : { claims: options.user.claims }),
      });
      return {
        access_token: issued.accessToken,
        token_type: "Bearer",
        expires_in: issued.expiresIn,
        scope: issued.scope,
      };
    },
    metadata(issuer) {
      return {
        authorization_endpoint: `${issuer}${AUTHORIZE_PATH}`,
        registration_endpoint: `${issuer}${REGISTRATION_PATH}`,
        response_types_supported: ["code"],
        response_modes_supported: ["query"],
        code_challenge_methods_supported: ["S256"],
        authorization_response_iss_parameter_supported: true,
      };
    },
  };
}
