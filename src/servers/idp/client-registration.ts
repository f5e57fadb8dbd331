import { randomBytes } from "node:crypto";
import type { FastifyInstance } from "fastify";
import { extractBearer } from "../../identity/bearer.ts";
import { createJwtVerifier, type VerifiedToken } from "../../identity/jwt-verifier.ts";
import type { Directory } from "./directory.ts";
import { IdpConfigError, OAuthError } from "./errors.ts";
import type { KeyRing } from "./keys.ts";

/**
 * `POST /admin/clients`: a platform admin adds a client-credentials client to the running
 * development identity provider, so an agent created in `make dev` can get a token
 * (docs/onboarding.md). Development only: `authority dev` turns it on; `authority idp` never
 * does. The caller proves the `admin` role with an access token this IdP issued; the secret is
 * generated here and returned once; the client lives as long as the process.
 */

export const CLIENT_REGISTRATION_PATH = "/admin/clients";

const CLIENT_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const SCOPE = /^[\x21\x23-\x5B\x5D-\x7E]{1,128}$/;

export interface ClientRegistrationDeps {
  readonly directory: Directory;
  readonly keys: KeyRing;
  readonly issuer: () => string;
  readonly audience: string;
}

interface RegistrationBody {
  readonly client_id: string;
  readonly partner_id?: string;
  readonly scopes?: readonly string[];
}

const bodySchema = {
  type: "object",
  required: ["client_id"],
  additionalProperties: false,
  properties: {
    client_id: { type: "string", pattern: CLIENT_ID.source },
    partner_id: { type: "string", minLength: 1, maxLength: 64, pattern: CLIENT_ID.source },
    scopes: { type: "array", maxItems: 32, items: { type: "string", pattern: SCOPE.source } },
  },
} as const;

async function adminOf(
  deps: ClientRegistrationDeps,
  authorization: string | undefined,
): Promise<VerifiedToken> {
  let token: string | undefined;
  try {
    token = extractBearer(authorization);
  } catch {
    token = undefined;
  }
  if (token === undefined)
    throw new OAuthError("invalid_token", "a bearer token is required", { status: 401 });
  let verified: VerifiedToken;
  try {
    verified = await createJwtVerifier({
      issuer: deps.issuer(),
      audience: deps.audience,
      jwks: deps.keys.jwks(),
      requireTokenUse: "access",
    }).verify(token);
  } catch {
    throw new OAuthError("invalid_token", "the bearer token is not valid", { status: 401 });
  }
  if (!verified.roles.includes("admin")) {
    throw new OAuthError("insufficient_scope", "adding a client needs the admin role", { status: 403 });
  }
  return verified;
}

export function registerClientRegistration(app: FastifyInstance, deps: ClientRegistrationDeps): void {
  app.post<{ Body: RegistrationBody }>(
    CLIENT_REGISTRATION_PATH,
    {
      schema: { body: bodySchema },
      // Authenticate before the body is looked at: an anonymous caller learns nothing.
      onRequest: async (request) => {
        await adminOf(deps, request.headers.authorization);
      },
      // The validator strips unknown properties; a `roles` asked for must be refused, not dropped.
      preValidation: async (request) => {
        const body = request.body;
        if (typeof body !== "object" || body === null || Array.isArray(body)) return;
        const unknown = Object.keys(body).find((key) => !Object.hasOwn(bodySchema.properties, key));
        if (unknown !== undefined) {
          throw new OAuthError("invalid_request", `unknown property ${JSON.stringify(unknown)}`);
        }
      },
    },
    async (request, reply) => {
      const { client_id: clientId, partner_id: partnerId, scopes } = request.body;
      if (deps.directory.hasClient(clientId)) {
        throw new OAuthError("invalid_request", `client ${clientId} already exists`, { status: 409 });
      }
      const clientSecret = randomBytes(32).toString("base64url");
      try {
        await deps.directory.addClient({
          clientId,
          clientSecret,
          ...(scopes === undefined ? {} : { scopes }),
          ...(partnerId === undefined ? {} : { claims: { partner_id: partnerId } }),
        });
      } catch (error) {
        if (error instanceof IdpConfigError) throw new OAuthError("invalid_request", error.message);
        throw error;
      }
      return reply
        .code(201)
        .header("cache-control", "no-store")
        .send({
          client_id: clientId,
          client_secret: clientSecret,
          token_endpoint: `${deps.issuer()}/oauth2/token`,
          ...(partnerId === undefined ? {} : { partner_id: partnerId }),
        });
    },
  );
}
