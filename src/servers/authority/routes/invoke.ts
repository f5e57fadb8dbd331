import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import { idSchemas, paramsSchema } from "../../../admin/admin-schemas.ts";
import { RECEIPT_HEADER } from "../../../audit/receipts.ts";
import {
  type AuthenticatedUser,
  type AuthenticatedWorkload,
  authenticateUser,
  authenticateWorkload,
  USER_ASSERTION_HEADER,
} from "../../../bindings/authenticate.ts";
import { IDEMPOTENCY_HEADER, readIdempotencyKey } from "../../../bindings/idempotency.ts";
import { type InvokeBody, runInvoke } from "../../../bindings/invoke.ts";
import { AuthorityError } from "../../../errors.ts";
import { INVOKE_SCOPE } from "../../../store/binding-model.ts";
import { denyOrErrorRef } from "../../http/openapi.ts";
import type { AuthorityServices } from "../services.ts";

/**
 * POST /v1/bindings/{bindingId}/invoke — one governed operation for the binding's
 * external user (docs/bindings.md, "Binding invoke"). Authentication (steps 1–4) runs
 * before the body is validated; the Idempotency-Key is required.
 */

const plainObject = { type: "object" } as const;

/** Shared with broker execute: how a caller names the operation and passes its arguments. */
export const operationProperties = {
  capability_id: idSchemas.capability,
  method: { type: "string", minLength: 1, maxLength: 16 },
  path: { type: "string", minLength: 1, maxLength: 8192 },
  permission_id: { type: "string", minLength: 1, maxLength: 2048 },
  arguments: {
    type: "object",
    additionalProperties: false,
    properties: { path: plainObject, query: plainObject, headers: plainObject, body: {} },
  },
} as const;

const invokeBody = {
  type: "object",
  // A subject (or anything else) chosen by the caller is refused: the subject is derived.
  additionalProperties: false,
  // No capability_id is the spec's Deny `missing_capability` (recorded), not a schema 400.
  properties: operationProperties,
} as const;

/** The Allow outcome with the upstream's (redacted) result and the evidence record's id. */
export const invokeAllowedSchema = {
  type: "object",
  required: ["status", "permissionId", "requestId", "result", "evidenceId"],
  properties: {
    status: { type: "string", const: "allowed" },
    permissionId: { type: "string" },
    requestId: { type: "string" },
    result: {
      type: "object",
      required: ["status", "headers", "body", "redaction_events"],
      properties: {
        status: { type: "integer" },
        headers: {
          type: "object",
          additionalProperties: { anyOf: [{ type: "string" }, { type: "array", items: { type: "string" } }] },
        },
        body: {},
        redaction_events: { type: "array", items: { type: "object" } },
      },
    },
    evidenceId: { type: "string" },
  },
} as const;

/** A governed call answers the allow body, or the Deny outcome / error body with its status. */
export const invokeResponses = {
  200: invokeAllowedSchema,
  "4XX": denyOrErrorRef,
  "5XX": denyOrErrorRef,
} as const;

interface Authenticated {
  readonly workload: AuthenticatedWorkload;
  readonly user: AuthenticatedUser;
}

export function invokeRoutes(context: AuthorityServices): FastifyPluginAsync {
  return async (app) => {
    const authenticated = new WeakMap<FastifyRequest, Authenticated>();

    app.post<{ Params: { bindingId: string }; Body: InvokeBody }>(
      "/v1/bindings/:bindingId/invoke",
      {
        schema: {
          params: paramsSchema({ bindingId: idSchemas.local }),
          body: invokeBody,
          response: invokeResponses,
        },
        // Steps 1–4 before the body is looked at: a stranger learns nothing from a 400.
        preValidation: async (request: FastifyRequest<{ Params: { bindingId: string } }>) => {
          const runtime = context.bindings;
          const workload = await authenticateWorkload(runtime, request.headers.authorization, {
            scope: INVOKE_SCOPE,
            routeBindingId: request.params.bindingId,
          });
          const user = await authenticateUser(
            runtime,
            workload.binding,
            request.headers[USER_ASSERTION_HEADER],
          );
          authenticated.set(request, { workload, user });
        },
      },
      async (request, reply) => {
        const auth = authenticated.get(request);
        if (auth === undefined)
          throw new AuthorityError("invalid_token", "A workload bearer token is required.");
        const idempotencyKey = readIdempotencyKey(request.headers[IDEMPOTENCY_HEADER]);
        const result = await runInvoke(context.bindings, context, {
          transport: "invoke",
          requestId: request.id,
          workload: auth.workload,
          user: auth.user,
          body: request.body,
          idempotencyKey,
        });
        if (result.replayed) reply.header("idempotent-replayed", "true");
        if (result.receipt !== undefined) reply.header(RECEIPT_HEADER, result.receipt);
        if (result.statusCode === 503) reply.header("retry-after", "1");
        return reply.code(result.statusCode).type("application/json").send(result.body);
      },
    );
  };
}
