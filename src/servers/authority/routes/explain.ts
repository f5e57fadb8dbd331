import type { FastifyPluginAsync } from "fastify";
import { record } from "../../../admin/admin-response-schemas.ts";
import { idSchemas, paramsSchema } from "../../../admin/admin-schemas.ts";
import { subjectIdIn } from "../../../admin/subjects.ts";
import { AuthorityError } from "../../../errors.ts";
import { assertCanReadPartner } from "../../../identity/principal.ts";
import { explainRequest } from "../../../pipeline/explain.ts";
import { authenticateAll } from "../authenticate.ts";
import type { AuthorityServices } from "../services.ts";

/**
 * POST /partners/{id}/explain: the trace of what the pipeline would decide for one request
 * of a subject on a capability of this partner, nothing executed or recorded
 * (src/pipeline/explain.ts). Read roles, in the partner's scope: another partner's subject is
 * not_found, like an unknown one; a capability the partner lacks is explained as the decision's
 * unknown_capability. docs/admin-api.md.
 */

interface ExplainBody {
  readonly subject_id: string;
  readonly capability_id: string;
  readonly method: string;
  readonly path: string;
  readonly query?: Record<string, unknown>;
  readonly headers?: Record<string, unknown>;
  readonly body?: unknown;
}

const section = { type: "object", maxProperties: 256 } as const;

const explainBody = {
  type: "object",
  additionalProperties: false,
  required: ["subject_id", "capability_id", "method", "path"],
  properties: {
    subject_id: idSchemas.subjectRef,
    capability_id: idSchemas.capability,
    method: { type: "string", pattern: "^[A-Z]{1,16}$" },
    path: { type: "string", minLength: 1, maxLength: 2048, pattern: "^/" },
    query: section,
    headers: section,
    body: {},
  },
} as const;

const scalar = { type: ["string", "number", "boolean", "null"] } as const;

const explainResponse = {
  type: "object",
  additionalProperties: false,
  required: ["steps", "result"],
  properties: {
    steps: {
      type: "array",
      items: {
        type: "object",
        additionalProperties: false,
        required: ["step", "outcome", "inputs"],
        properties: {
          step: {
            type: "string",
            enum: ["subject", "capability", "policy", "decision", "input_schema", "constraints"],
          },
          outcome: { type: "string", enum: ["passed", "denied", "skipped"] },
          inputs: { type: "object", additionalProperties: scalar },
          reason: { type: "string" },
        },
      },
    },
    result: record(["status", "permission_id"], {
      status: { type: "string", enum: ["allowed", "denied"] },
      permission_id: { type: ["string", "null"] },
      reason: { type: "string" },
      rule: { type: "string" },
      remedy: record(["action"]),
      log_only: record(["reason", "rule"], { reason: { type: "string" }, rule: { type: "string" } }),
    }),
  },
} as const;

export function explainRoutes(services: AuthorityServices): FastifyPluginAsync {
  return async (app) => {
    const principalOf = authenticateAll(app, services);
    app.post<{ Params: { id: string }; Body: ExplainBody }>(
      "/partners/:id/explain",
      {
        schema: {
          params: paramsSchema({ id: idSchemas.partner }),
          body: explainBody,
          response: { 200: explainResponse },
        },
      },
      async (request) => {
        const partnerId = request.params.id;
        assertCanReadPartner(principalOf(request), partnerId);
        const { subject_id, capability_id, method, path, ...args } = request.body;
        const trace = await explainRequest(services.decisions, {
          partnerId,
          subjectId: await subjectIdIn(services, partnerId, subject_id),
          capabilityId: capability_id,
          method,
          path,
          now: services.now(),
          args,
        });
        if (trace === undefined) throw new AuthorityError("not_found", "No such subject in this partner.");
        return trace;
      },
    );
  };
}
