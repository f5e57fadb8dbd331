import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import { authenticateBrokerCaller, type BrokerCaller } from "../../../bindings/broker-caller.ts";
import { VerifyError, type VerifyRequest, verifyEnvelope } from "../../../bindings/verify.ts";
import { AuthorityError } from "../../../errors.ts";
import type { AuthorityServices } from "../services.ts";

/**
 * POST /v1/authority/verify — verifies an authority envelope for the arguments an
 * upstream received and returns a decision only (docs/bindings.md, "Authority verify").
 * Bearer: a token with scope `authority/authority.broker.execute` — the authority's own
 * workload token, or the configured identity provider's access token naming the binding
 * (src/bindings/broker-caller.ts). Failures are
 * `{ error, message, requestId }` with one stable code per cause.
 */

const verifyBody = {
  type: "object",
  additionalProperties: false,
  required: ["profile", "bindingId", "operationId", "arguments", "protectedEnvelope"],
  properties: {
    profile: { type: "string", minLength: 1, maxLength: 128 },
    bindingId: { type: "string", minLength: 1, maxLength: 128 },
    operationId: { type: "string", minLength: 1, maxLength: 256 },
    arguments: { type: "object" },
    protectedEnvelope: { type: "string", minLength: 1, maxLength: 65536 },
  },
} as const;

const successSchema = {
  type: "object",
  required: ["profile", "bindingId", "operationId", "decision", "verified"],
  properties: {
    profile: { type: "string" },
    bindingId: { type: "string" },
    operationId: { type: "string" },
    decision: { type: "string" },
    verified: { type: "boolean" },
  },
} as const;

export function verifyRoutes(context: AuthorityServices): FastifyPluginAsync {
  return async (app) => {
    const workloads = new WeakMap<FastifyRequest, BrokerCaller>();

    app.post<{ Body: VerifyRequest }>(
      "/v1/authority/verify",
      {
        schema: { body: verifyBody, response: { 200: successSchema } },
        preValidation: async (request) => {
          const workload = await authenticateBrokerCaller(
            context.bindings,
            context,
            { issuer: context.config.issuer, verify: (token) => context.verifier.verify(token) },
            request.headers.authorization,
          );
          workloads.set(request, workload);
        },
      },
      async (request, reply) => {
        const workload = workloads.get(request);
        if (workload === undefined)
          throw new AuthorityError("invalid_token", "A workload bearer token is required.");
        try {
          return await verifyEnvelope(
            context.bindings,
            context.verifyOperations,
            workload,
            request.body,
            context.now(),
          );
        } catch (error) {
          // Answered from the table like every module error (toAuthorityError); an outage says when to retry.
          if (error instanceof VerifyError && error.status === 503) reply.header("retry-after", "1");
          throw error;
        }
      },
    );
  };
}
