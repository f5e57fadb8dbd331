import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from "fastify";
import { AuthorityError, toAuthorityError } from "../../../errors.ts";
import { extractBearer } from "../../../identity/bearer.ts";
import type { Principal } from "../../../identity/principal.ts";
import { createMcpExchange, type McpBody } from "../../../mcp/http-exchange.ts";
import { createOriginPolicy } from "../../../mcp/origin.ts";
import {
  bearerChallenge,
  MCP_PATH,
  mcpResourceUrl,
  missingMcpScope,
  PROTECTED_RESOURCE_METADATA_PATH,
  protectedResourceMetadata,
} from "../../../mcp/resource-metadata.ts";
import { sendError } from "../../http/error-handling.ts";
import { errorRef } from "../../http/openapi.ts";
import { boundJsonBodies } from "../../http/server.ts";
import { optionalPrincipal } from "../authenticate.ts";
import type { AuthorityServices } from "../services.ts";

/**
 * Hosted MCP at /mcp (docs/mcp.md): Streamable HTTP in stateless mode — a fresh SDK
 * server per POST, so any replica answers any request; GET and DELETE are 405 (no
 * server-initiated stream, no session to end). Before the body is read: the Origin is
 * checked against the allowlist (403), then the bearer token (401 with a
 * `WWW-Authenticate` pointing at the RFC 9728 metadata served here too). The body is
 * parsed here, so text that is not JSON is JSON-RPC's `-32700`, not the service's body.
 */

const ALLOWED_METHODS = "POST, OPTIONS";
const CORS_REQUEST_HEADERS =
  "authorization, content-type, accept, mcp-protocol-version, mcp-method, mcp-name, last-event-id";
const CORS_EXPOSED_HEADERS = "www-authenticate, x-request-id";

/** A JSON-RPC 2.0 message (the MCP SDK's answers and this transport's own refusals). */
const jsonRpcMessage = {
  type: "object",
  required: ["jsonrpc"],
  properties: {
    jsonrpc: { type: "string", const: "2.0" },
    id: { type: ["string", "number", "null"] },
    result: {},
    error: {
      type: "object",
      required: ["code", "message"],
      properties: { code: { type: "integer" }, message: { type: "string" }, data: {} },
    },
  },
  additionalProperties: true,
} as const;

const metadataSchema = {
  type: "object",
  required: ["resource", "authorization_servers"],
  properties: {
    resource: { type: "string" },
    authorization_servers: { type: "array", items: { type: "string" } },
    bearer_methods_supported: { type: "array", items: { type: "string" } },
    scopes_supported: { type: "array", items: { type: "string" } },
    resource_name: { type: "string" },
  },
  additionalProperties: true,
} as const;

const noBody = { type: "null", description: "No body." } as const;
const security = { security: [] } as const;

function jsonRpcError(reply: FastifyReply, status: number, message: string, code = -32000): FastifyReply {
  return reply
    .code(status)
    .type("application/json")
    .send({ jsonrpc: "2.0", error: { code, message }, id: null });
}

/** The client went away: the answer will never be read, so the connection is dropped, not kept open. */
function dropped(reply: FastifyReply): FastifyReply {
  reply.raw.destroy();
  return reply;
}

/**
 * fastify's JSON parser (prototype poisoning refused) and the service's JSON bounds, as on
 * every route — a body past the bounds is the service's 400 `input_too_complex` — except
 * that text which is not JSON reaches the handler, which answers JSON-RPC's `-32700`.
 */
function parseMcpBodies(app: Parameters<FastifyPluginAsync>[0]): void {
  boundJsonBodies(app, {
    malformed: () => ({ kind: "malformed" }) satisfies McpBody,
    parsed: (value) => ({ kind: "json", value }) satisfies McpBody,
  });
}

/** The route group: settings and service from the composition root (services.ts). */
export function mcpRoutes(context: AuthorityServices): FastifyPluginAsync {
  const { config, service } = context.mcp;
  const origins = createOriginPolicy(config.allowedOrigins);
  const metadata = protectedResourceMetadata({
    publicUrl: context.config.publicUrl,
    issuer: context.config.issuer,
    scopes: config.scopesSupported,
  });
  const principals = new WeakMap<FastifyRequest, Principal>();
  /** The bearer already verified for `principal`, for token-exchange profiles (never forwarded). */
  const callerToken = (request: FastifyRequest, principal: Principal) => {
    const value = extractBearer(request.headers.authorization);
    if (value === undefined) return {};
    return {
      token: {
        value,
        ...(principal.expiresAt === undefined ? {} : { expiresAt: principal.expiresAt.getTime() }),
      },
    };
  };
  const exchange = createMcpExchange({ service, publicUrl: context.config.publicUrl });

  /** CORS for allowed browser origins; false (and a 403 sent) for a foreign one. */
  const checkOrigin = (request: FastifyRequest, reply: FastifyReply): boolean => {
    const origin = request.headers.origin;
    if (!origins.allows(origin)) {
      jsonRpcError(reply, 403, "Forbidden: this Origin is not allowed.");
      return false;
    }
    if (typeof origin === "string") {
      reply.header("access-control-allow-origin", origin);
      reply.header("access-control-expose-headers", CORS_EXPOSED_HEADERS);
      reply.header("vary", "origin");
    }
    return true;
  };

  const resource = mcpResourceUrl(context.config.publicUrl);
  // The scope /mcp asks clients for, and requires of tokens issued for its resource URL.
  const requiredScope = config.scopesSupported[0] ?? "authority/mcp";
  const verifier = context.mcpVerifier ?? context.verifier;

  const authenticate = async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    if (!checkOrigin(request, reply)) return reply;
    try {
      const principal = await optionalPrincipal(request, context, verifier);
      if (principal === undefined) throw new AuthorityError("invalid_token", "A bearer token is required.");
      const missing = missingMcpScope(principal, resource, requiredScope);
      if (missing !== undefined) {
        throw new AuthorityError("insufficient_scope", `This token lacks the scope ${missing}.`, {
          details: { scope: missing },
        });
      }
      principals.set(request, principal);
    } catch (error) {
      const failure = toAuthorityError(error);
      const publicUrl = context.config.publicUrl;
      if (failure.status === 401) {
        // RFC 6750 §3.1: no error code when the request carried no credentials at all.
        const presented = request.headers.authorization !== undefined;
        reply.header(
          "www-authenticate",
          bearerChallenge(publicUrl, presented ? "invalid_token" : undefined, requiredScope),
        );
      } else if (failure.code === "insufficient_scope") {
        reply.header("www-authenticate", bearerChallenge(publicUrl, "insufficient_scope", requiredScope));
      }
      return sendError(reply, request, failure);
    }
  };

  return async (app) => {
    parseMcpBodies(app);
    for (const path of [`${PROTECTED_RESOURCE_METADATA_PATH}${MCP_PATH}`, PROTECTED_RESOURCE_METADATA_PATH]) {
      app.get(path, { schema: { ...security, response: { 200: metadataSchema } } }, async (_request, reply) =>
        reply
          .header("cache-control", "public, max-age=300")
          .header("access-control-allow-origin", "*")
          .send(metadata),
      );
    }

    app.options(
      MCP_PATH,
      { schema: { ...security, response: { 204: noBody, 403: jsonRpcMessage } } },
      async (request, reply) => {
        if (!checkOrigin(request, reply)) return reply;
        return reply
          .code(204)
          .header("access-control-allow-methods", ALLOWED_METHODS)
          .header("access-control-allow-headers", CORS_REQUEST_HEADERS)
          .header("access-control-max-age", "600")
          .send();
      },
    );

    for (const method of ["GET", "DELETE"] as const) {
      app.route({
        method,
        url: MCP_PATH,
        schema: { ...security, response: { 405: jsonRpcMessage } },
        handler: async (_request, reply) =>
          jsonRpcError(
            reply.header("allow", ALLOWED_METHODS),
            405,
            "Method not allowed: this server is stateless.",
          ),
      });
    }

    app.post(
      MCP_PATH,
      {
        onRequest: authenticate,
        schema: {
          body: { description: "A JSON-RPC 2.0 request, notification or batch (MCP Streamable HTTP)." },
          response: {
            200: jsonRpcMessage,
            202: noBody,
            "4XX": { anyOf: [errorRef, jsonRpcMessage] },
            "5XX": { anyOf: [errorRef, jsonRpcMessage] },
          },
        },
      },
      async (request, reply) => {
        const principal = principals.get(request);
        if (principal === undefined) throw new AuthorityError("invalid_token", "A bearer token is required.");
        const body = request.body as McpBody;
        if (body.kind === "malformed") return jsonRpcError(reply, 400, "Parse error.", -32700);
        const refusal = exchange.refuseBatch(body.value, request.headers["mcp-protocol-version"]);
        if (refusal !== undefined) return jsonRpcError(reply, 400, refusal, -32600);
        const aborted = new AbortController();
        reply.raw.on("close", () => {
          // A client that went away mid-call: abort the handlers (the upstream call stops too).
          if (!reply.raw.writableFinished) aborted.abort();
        });
        try {
          const answer = await exchange.answer({
            headers: request.headers,
            body: body.value,
            caller: {
              principal,
              requestId: request.id,
              signal: aborted.signal,
              ...callerToken(request, principal),
            },
          });
          reply.code(answer.status);
          for (const [name, value] of answer.headers) reply.header(name, value);
          if (aborted.signal.aborted) return dropped(reply);
          return reply.send(answer.body.length === 0 ? undefined : answer.body);
        } catch (error) {
          if (aborted.signal.aborted) return dropped(reply);
          request.log.error({ err: error }, "mcp request failed");
          return jsonRpcError(reply, 500, "Internal error.", -32603);
        }
      },
    );
  };
}
