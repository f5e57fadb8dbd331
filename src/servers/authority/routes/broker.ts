import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import { idSchemas } from "../../../admin/admin-schemas.ts";
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
import { BROKER_EXECUTE_SCOPE } from "../../../store/binding-model.ts";
import type { AuthorityServices } from "../services.ts";
import { invokeResponses, operationProperties } from "./invoke.ts";

/**
 * POST /v1/broker/execute — the older broker path, on the same engine as binding invoke
 * (docs/bindings.md, "Broker execute"). Workload token with scope
 * `authority/authority.broker.execute` plus the user assertion; the binding is the
 * client's own (a `binding_id` in the body must name it); `operation_id` may name the
 * operation; Idempotency-Key is optional (honoured when sent).
 */

interface BrokerBody extends InvokeBody {
  readonly binding_id?: string;
}

const brokerBody = {
  type: "object",
  additionalProperties: false,
  required: ["capability_id"],
  properties: {
    ...operationProperties,
    binding_id: idSchemas.local,
    operation_id: { type: "string", minLength: 1, maxLength: 256 },
  },
} as const;

interface Authenticated {
  readonly workload: AuthenticatedWorkload;
  readonly user: AuthenticatedUser;
}

function bodyBindingId(body: unknown): string | undefined {
  if (typeof body !== "object" || body === null) return undefined;
  const value = (body as { binding_id?: unknown }).binding_id;
  return typeof value === "string" ? value : undefined;
}

export function brokerRoutes(context: AuthorityServices): FastifyPluginAsync {
  return async (app) => {
    const authenticated = new WeakMap<FastifyRequest, Authenticated>();

    app.post<{ Body: BrokerBody }>(
      "/v1/broker/execute",
      {
        schema: { body: brokerBody, response: invokeResponses },
        preValidation: async (request) => {
          const runtime = context.bindings;
          const routeBindingId = bodyBindingId(request.body);
          const workload = await authenticateWorkload(runtime, request.headers.authorization, {
            scope: BROKER_EXECUTE_SCOPE,
            ...(routeBindingId === undefined ? {} : { routeBindingId }),
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
        const header = request.headers[IDEMPOTENCY_HEADER];
        const idempotencyKey = header === undefined ? undefined : readIdempotencyKey(header);
        const { binding_id: _bindingId, ...body } = request.body;
        const result = await runInvoke(context.bindings, context, {
          transport: "broker",
          requestId: request.id,
          workload: auth.workload,
          user: auth.user,
          body,
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
