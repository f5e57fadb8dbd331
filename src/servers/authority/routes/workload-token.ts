import type { FastifyPluginAsync } from "fastify";
import { idSchemas, paramsSchema } from "../../../admin/admin-schemas.ts";
import { getBinding } from "../../../bindings/bindings.ts";
import { authenticateWorkloadClient } from "../../../bindings/workload-clients.ts";
import { AuthorityError } from "../../../errors.ts";
import { type WorkloadScope, workloadScopes } from "../../../store/binding-model.ts";
import type { AuthorityServices } from "../services.ts";

/**
 * The workload credential flow (docs/bindings.md, "Token flow"):
 *
 *   POST /v1/bindings/{bindingId}/token   client credentials → binding-scoped access token
 *   GET  /.well-known/jwks.json            the authority's public key for those tokens
 *
 * The token request is RFC 6749 §4.4: `grant_type=client_credentials`, the client
 * authenticated with HTTP Basic (client_secret_basic) or `client_id` + `client_secret`
 * in the body (client_secret_post), an optional `scope` (subset of the client's scopes).
 * Bodies may be form-encoded or JSON.
 */

interface TokenBody {
  readonly grant_type: string;
  readonly client_id?: string;
  readonly client_secret?: string;
  readonly scope?: string;
}

const tokenBody = {
  type: "object",
  required: ["grant_type"],
  properties: {
    grant_type: { type: "string", maxLength: 64 },
    client_id: { type: "string", minLength: 1, maxLength: 128 },
    client_secret: { type: "string", minLength: 1, maxLength: 512 },
    scope: { type: "string", maxLength: 1024 },
  },
} as const;

const tokenResponse = {
  type: "object",
  required: ["access_token", "token_type", "expires_in", "scope"],
  properties: {
    access_token: { type: "string" },
    token_type: { type: "string" },
    expires_in: { type: "integer" },
    scope: { type: "string" },
  },
} as const;

const clientFailure = () => new AuthorityError("invalid_token", "Client authentication failed.");

/** RFC 6749 §2.3.1: id and secret are form-encoded, then joined with ":" and Base64-encoded. */
function basicCredentials(header: string | undefined): { id: string; secret: string } | undefined {
  if (header === undefined) return undefined;
  const match = /^Basic ([A-Za-z0-9+/]+=*)$/i.exec(header);
  if (match === null) throw clientFailure();
  const decoded = Buffer.from(match[1] ?? "", "base64").toString("utf8");
  const colon = decoded.indexOf(":");
  if (colon < 0) throw clientFailure();
  try {
    return {
      id: decodeURIComponent(decoded.slice(0, colon).replaceAll("+", " ")),
      secret: decodeURIComponent(decoded.slice(colon + 1).replaceAll("+", " ")),
    };
  } catch {
    throw clientFailure();
  }
}

function requestedScopes(scope: string | undefined, granted: readonly WorkloadScope[]): WorkloadScope[] {
  if (scope === undefined || scope.trim() === "") return [...granted];
  const wanted = [...new Set(scope.split(" ").filter((s) => s.length > 0))];
  const known = workloadScopes as readonly string[];
  const refused = wanted.filter((s) => !known.includes(s) || !granted.includes(s as WorkloadScope));
  if (refused.length > 0) {
    throw new AuthorityError("invalid_request", "A requested scope is not granted to this client.", {
      details: { refused_scopes: refused },
    });
  }
  return wanted as WorkloadScope[];
}

export function workloadTokenRoutes(context: AuthorityServices): FastifyPluginAsync {
  return async (app) => {
    app.addContentTypeParser(
      "application/x-www-form-urlencoded",
      { parseAs: "string" },
      (_request, body, done) => {
        const params = new URLSearchParams(typeof body === "string" ? body : body.toString("utf8"));
        const out: Record<string, string> = {};
        for (const [name, value] of params) {
          // A repeated parameter is ambiguous (RFC 6749 §3.2): refuse the request.
          if (Object.hasOwn(out, name)) {
            done(new AuthorityError("invalid_request", "A token request parameter is repeated."), undefined);
            return;
          }
          out[name] = value;
        }
        done(null, out);
      },
    );

    app.post<{ Params: { bindingId: string }; Body: TokenBody }>(
      "/v1/bindings/:bindingId/token",
      {
        schema: {
          params: paramsSchema({ bindingId: idSchemas.local }),
          body: tokenBody,
          response: { 200: tokenResponse },
        },
      },
      async (request, reply) => {
        const runtime = context.bindings;
        const body = request.body;
        if (body.grant_type !== "client_credentials") {
          throw new AuthorityError("invalid_request", "grant_type must be client_credentials.");
        }
        const basic = basicCredentials(request.headers.authorization);
        if (basic !== undefined && (body.client_id !== undefined || body.client_secret !== undefined)) {
          throw new AuthorityError("invalid_request", "Authenticate the client one way only.");
        }
        const id = basic?.id ?? body.client_id;
        const secret = basic?.secret ?? body.client_secret;
        if (id === undefined || secret === undefined) throw clientFailure();
        const client = await authenticateWorkloadClient(context, request.params.bindingId, id, secret);
        if (client === undefined) throw clientFailure();
        const binding = await getBinding(context, client.binding_id);
        if (!binding.active) throw new AuthorityError("insufficient_role", "The binding is not active.");
        const scopes = requestedScopes(body.scope, client.scopes);
        const issued = await runtime.tokens.issue(client, scopes);
        return reply.header("cache-control", "no-store").header("pragma", "no-cache").send(issued);
      },
    );

    const jwksSchema = {
      type: "object",
      required: ["keys"],
      properties: { keys: { type: "array", items: { type: "object", additionalProperties: true } } },
    };
    app.get(
      "/.well-known/jwks.json",
      { schema: { security: [], response: { 200: jwksSchema } } },
      async (_request, reply) => {
        const jwks = await context.bindings.tokens.jwks();
        return reply
          .header("cache-control", "public, max-age=300")
          .type("application/jwk-set+json")
          .send(JSON.stringify(jwks));
      },
    );
  };
}
