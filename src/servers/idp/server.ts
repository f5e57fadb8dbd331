import type { AddressInfo } from "node:net";
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from "fastify";
import { loadAccounts, loadAccountsFile } from "./accounts-file.ts";
import { type AuthorizationCodeFlow, registerAuthorizationCodeFlow } from "./authorization-code.ts";
import { registerClientRegistration } from "./client-registration.ts";
import { createDirectory, type Directory } from "./directory.ts";
import { IdpConfigError, OAuthError } from "./errors.ts";
import { createFailureLimiter } from "./failure-limiter.ts";
import { createKeyRing, type KeyRing, SIGNING_ALG } from "./keys.ts";
import { type IdpServerOptions, normalizeIssuer, resolveIdpOptions } from "./options.ts";
import {
  type FailureLimits,
  handleTokenRequest,
  parseFormParams,
  parseJsonParams,
  type TokenParams,
} from "./token-endpoint.ts";
import {
  createTokenIssuer,
  type IssuedToken,
  type IssueTokenRequest,
  reservedClaimNames,
} from "./token-issuer.ts";

/**
 * The development identity provider: an OAuth 2.0 token endpoint (password and client
 * credentials grants) issuing ES256 JWT access tokens, with JWKS and discovery documents.
 * Production points the authority at any OIDC issuer instead; nothing else depends on
 * this server beyond the standard documents it publishes.
 */

export const TOKEN_PATH = "/oauth2/token";
export const JWKS_PATH = "/.well-known/jwks.json";
export const DISCOVERY_PATH = "/.well-known/openid-configuration";
/** RFC 8414 authorization-server metadata: the same document as the OpenID one. */
export const AS_METADATA_PATH = "/.well-known/oauth-authorization-server";

export interface ListenAddress {
  readonly host?: string;
  readonly port?: number;
}

export interface IdpServer {
  readonly app: FastifyInstance;
  /** The issuer URL; known after listen() when not configured. */
  readonly issuer: string;
  readonly tokenEndpoint: string;
  readonly jwksUri: string;
  readonly keys: KeyRing;
  readonly directory: Directory;
  /** Starts serving; returns the base URL actually bound. */
  listen(address?: ListenAddress): Promise<string>;
  close(): Promise<void>;
  /** Makes a new signing key current; the previous one stays published for the grace period. */
  rotateSigningKey(): Promise<string>;
  /** Signs a token directly (tests, the demo); no credential check. */
  issueToken(request: IssueTokenRequest): Promise<IssuedToken>;
}

const BODY_LIMIT = 16 * 1024;

function urlHost(host: string): string {
  if (host === "0.0.0.0" || host === "::" || host === "") return "127.0.0.1";
  return host.includes(":") ? `[${host}]` : host;
}

function sendOAuthError(reply: FastifyReply, error: OAuthError): FastifyReply {
  reply.code(error.status).header("cache-control", "no-store").header("pragma", "no-cache");
  if (error.basicChallenge) reply.header("www-authenticate", 'Basic realm="authority-idp", charset="UTF-8"');
  if (error.retryAfterSec !== undefined) reply.header("retry-after", String(error.retryAfterSec));
  return reply.send(error.toJSON());
}

function tokenParams(request: FastifyRequest): TokenParams {
  const type = (request.headers["content-type"] ?? "").split(";")[0]?.trim().toLowerCase();
  if (type === "application/x-www-form-urlencoded" && typeof request.body === "string") {
    return parseFormParams(request.body);
  }
  if (type === "application/json") return parseJsonParams(request.body);
  throw new OAuthError("invalid_request", "send application/x-www-form-urlencoded or application/json");
}

/** One source may fail this many times more than one principal before it is refused altogether. */
const SOURCE_BUDGET_FACTOR = 10;

function failureLimitsFor(
  limit: { readonly maxFailures: number; readonly windowSec: number } | undefined,
  now: () => Date,
): FailureLimits | undefined {
  if (limit === undefined) return undefined;
  const windowMs = limit.windowSec * 1000;
  return {
    perPrincipal: createFailureLimiter({ maxFailures: limit.maxFailures, windowMs, now }),
    perSource: createFailureLimiter({ maxFailures: limit.maxFailures * SOURCE_BUDGET_FACTOR, windowMs, now }),
  };
}

export async function createIdpServer(options: IdpServerOptions = {}): Promise<IdpServer> {
  const config = resolveIdpOptions(options);
  let issuer = config.issuer;
  const currentIssuer = (): string => {
    if (issuer === undefined) throw new IdpConfigError("identity provider: issuer is unknown until listen()");
    return issuer;
  };

  const keys = await createKeyRing({
    graceMs: config.rotationGraceSec * 1000,
    now: config.now,
    ...(config.keysDir === undefined ? {} : { keysDir: config.keysDir }),
  });
  const directory = createDirectory({
    defaultAudience: config.audience,
    reservedClaims: reservedClaimNames(config.tenantClaim),
    ...(config.scryptCost === undefined ? {} : { scryptCost: config.scryptCost }),
  });
  if (config.accountsFile !== undefined) await loadAccountsFile(directory, config.accountsFile);
  if (config.accounts !== undefined) await loadAccounts(directory, config.accounts);

  const tokenIssuer = createTokenIssuer({
    issuer: currentIssuer,
    keys,
    defaultAudience: config.audience,
    lifetimeSec: config.tokenLifetimeSec,
    tenantClaim: config.tenantClaim,
    now: config.now,
  });
  const limits = failureLimitsFor(config.failureLimit, config.now);

  const loggerInstance: FastifyBaseLogger | undefined = config.logger;
  const app: FastifyInstance =
    loggerInstance === undefined
      ? Fastify({ bodyLimit: BODY_LIMIT, logger: false })
      : Fastify({ bodyLimit: BODY_LIMIT, loggerInstance });
  app.addContentTypeParser(
    "application/x-www-form-urlencoded",
    { parseAs: "string" },
    (_request, body, done) => done(null, body),
  );
  app.setErrorHandler((error, request, reply) => {
    if (error instanceof OAuthError) return sendOAuthError(reply, error);
    const status = (error as { statusCode?: unknown }).statusCode;
    if (typeof status === "number" && status >= 400 && status < 500) {
      // Framework rejections (bad JSON, wrong media type, body too large) keep their status
      // but speak RFC 6749 and reveal nothing else.
      return sendOAuthError(reply, new OAuthError("invalid_request", "the request is malformed", { status }));
    }
    request.log.error({ err: error }, "identity provider request failed");
    return reply
      .code(500)
      .header("cache-control", "no-store")
      .send({ error: "server_error", error_description: "internal error" });
  });

  const codeFlow: AuthorizationCodeFlow | undefined =
    options.authorizationCode === undefined
      ? undefined
      : registerAuthorizationCodeFlow(app, {
          issuer: currentIssuer,
          tokens: tokenIssuer,
          options: options.authorizationCode,
          now: config.now,
        });

  app.post(TOKEN_PATH, async (request, reply) => {
    const params = tokenParams(request);
    const response =
      codeFlow !== undefined && params.grant_type === "authorization_code"
        ? await codeFlow.exchange(params)
        : await handleTokenRequest(
            params,
            request.headers.authorization,
            request.socket.remoteAddress ?? "unknown",
            {
              directory,
              issuer: tokenIssuer,
              limits,
            },
          );
    return reply.header("cache-control", "no-store").header("pragma", "no-cache").send(response);
  });

  if (options.clientRegistration === true) {
    registerClientRegistration(app, { directory, keys, issuer: currentIssuer, audience: config.audience });
  }

  app.get(JWKS_PATH, async (_request, reply) =>
    reply
      .header("content-type", "application/jwk-set+json")
      .header("cache-control", `public, max-age=${config.jwksMaxAgeSec}`)
      .send(JSON.stringify(keys.jwks())),
  );

  const discovery = (_request: FastifyRequest, reply: FastifyReply) => {
    const base = currentIssuer();
    return reply.header("cache-control", "public, max-age=300").send({
      issuer: base,
      token_endpoint: `${base}${TOKEN_PATH}`,
      jwks_uri: `${base}${JWKS_PATH}`,
      grant_types_supported:
        codeFlow === undefined
          ? ["client_credentials", "password"]
          : ["authorization_code", "client_credentials", "password"],
      // Without the code flow there is no authorization endpoint: tokens come only from the token endpoint.
      response_types_supported: [],
      ...codeFlow?.metadata(base),
      subject_types_supported: ["public"],
      token_endpoint_auth_methods_supported:
        codeFlow === undefined
          ? ["client_secret_basic", "client_secret_post"]
          : ["none", "client_secret_basic", "client_secret_post"],
      id_token_signing_alg_values_supported: [SIGNING_ALG],
      access_token_signing_alg_values_supported: [SIGNING_ALG],
      scopes_supported: directory.scopes(),
      claims_supported: [
        "iss",
        "sub",
        "aud",
        "exp",
        "iat",
        "nbf",
        "jti",
        "scope",
        "client_id",
        "token_use",
        "roles",
        config.tenantClaim,
      ],
    });
  };
  app.get(DISCOVERY_PATH, discovery);
  app.get(AS_METADATA_PATH, discovery);

  let listening = false;
  return {
    app,
    get issuer() {
      return currentIssuer();
    },
    get tokenEndpoint() {
      return `${currentIssuer()}${TOKEN_PATH}`;
    },
    get jwksUri() {
      return `${currentIssuer()}${JWKS_PATH}`;
    },
    keys,
    directory,
    async listen(address = {}) {
      if (listening) throw new IdpConfigError("identity provider: already listening");
      listening = true;
      await app.listen({ host: address.host ?? "127.0.0.1", port: address.port ?? 0 });
      const bound = app.server.address() as AddressInfo;
      const base = `http://${urlHost(bound.address)}:${bound.port}`;
      issuer ??= normalizeIssuer(base);
      return base;
    },
    async close() {
      await app.close();
    },
    rotateSigningKey: () => keys.rotate(),
    issueToken: (request) => tokenIssuer.issue(request),
  };
}
