import type { FastifyInstance, FastifyPluginAsync, FastifyRequest } from "fastify";
import {
  assignmentSchema,
  assignResultSchema,
  listOf,
  policyOnlySchema,
  publicPolicySchema,
  revokeResultSchema,
} from "../../../admin/admin-response-schemas.ts";
import {
  idSchemas,
  type PageQuery,
  pageQuerySchema,
  pageRequestOf,
  paramsSchema,
} from "../../../admin/admin-schemas.ts";
import type { Actor } from "../../../admin/deps.ts";
import {
  type AssignInput,
  assignCapability,
  getAssignment,
  getPolicy,
  listPolicies,
  MAX_POLICY_TTL_SECONDS,
  revokePolicy,
  unassignCapability,
} from "../../../admin/policies.ts";
import { redactionRuleSchema } from "../../../core/index.ts";
import { permissionIdSchema } from "../../../core/schemas/common.ts";
import { assertCanManagePartner, assertCanReadPartner, type Principal } from "../../../identity/principal.ts";
import { authenticateAll } from "../authenticate.ts";
import type { AuthorityContext } from "../context.ts";
import { resolveSubjectParams } from "./subject-params.ts";

export const actorOf = (principal: Principal, request: FastifyRequest): Actor => ({
  subject: principal.subject,
  requestId: request.id,
});

const partnerParams = paramsSchema({ id: idSchemas.partner });
const subjectParams = paramsSchema({ id: idSchemas.partner, subject: idSchemas.subjectRef });
export const assignmentParams = paramsSchema({
  id: idSchemas.partner,
  subject: idSchemas.subjectRef,
  capability: idSchemas.capability,
});

export const assignBody = {
  type: "object",
  additionalProperties: false,
  required: ["allowed_permission_ids"],
  properties: {
    allowed_permission_ids: {
      type: "array",
      minItems: 1,
      maxItems: 4096,
      uniqueItems: true,
      items: permissionIdSchema,
    },
    response_redactions: {
      type: "object",
      propertyNames: permissionIdSchema,
      additionalProperties: { type: "array", maxItems: 256, items: redactionRuleSchema },
    },
    expires_at: { type: "string", minLength: 1, maxLength: 64 },
    ttl_seconds: { type: "integer", minimum: 1, maximum: MAX_POLICY_TTL_SECONDS },
    auth_profile_ref: { type: "string", minLength: 1, maxLength: 256, pattern: "^[\\x21-\\x7e]+$" },
  },
} as const;

type SubjectParams = { id: string; subject: string };
export type AssignmentParams = SubjectParams & { capability: string };

/** `GET` of one assignment-like record (the assignment, its shadow), read roles. */
export function assignmentReadRoute(
  app: FastifyInstance,
  principalOf: (request: FastifyRequest) => Principal,
  url: string,
  read: (partnerId: string, subjectId: string, capabilityId: string) => Promise<unknown>,
): void {
  app.get<{ Params: AssignmentParams }>(
    url,
    { schema: { response: { 200: assignmentSchema }, params: assignmentParams } },
    async (request) => {
      assertCanReadPartner(principalOf(request), request.params.id);
      const { id, subject, capability } = request.params;
      return read(id, subject, capability);
    },
  );
}

/**
 * Policy administration. Responses carry public policy records only (toPublicPolicyRecord):
 * never the encrypted artifact.
 */
export function policyRoutes(context: AuthorityContext): FastifyPluginAsync {
  return async (app) => {
    const principalOf = authenticateAll(app, context);
    resolveSubjectParams(app, context);

    app.get<{ Params: { id: string }; Querystring: PageQuery }>(
      "/partners/:id/caab/policies",
      {
        schema: {
          response: { 200: listOf(publicPolicySchema) },
          params: partnerParams,
          querystring: pageQuerySchema,
        },
      },
      async (request) => {
        assertCanReadPartner(principalOf(request), request.params.id);
        return listPolicies(context, request.params.id, pageRequestOf(request.query));
      },
    );

    app.get<{ Params: SubjectParams }>(
      "/partners/:id/caab/subjects/:subject/policy",
      { schema: { response: { 200: publicPolicySchema }, params: subjectParams } },
      async (request) => {
        assertCanReadPartner(principalOf(request), request.params.id);
        return getPolicy(context, request.params.id, request.params.subject);
      },
    );

    app.post<{ Params: SubjectParams }>(
      "/partners/:id/caab/subjects/:subject/policy/revoke",
      { schema: { response: { 200: revokeResultSchema }, params: subjectParams } },
      async (request) => {
        const principal = principalOf(request);
        assertCanManagePartner(principal, request.params.id);
        return revokePolicy(context, actorOf(principal, request), request.params.id, request.params.subject);
      },
    );

    assignmentReadRoute(
      app,
      principalOf,
      "/partners/:id/caab/subjects/:subject/policies/:capability",
      (...ids) => getAssignment(context, ...ids),
    );

    app.put<{ Params: AssignmentParams; Body: AssignInput }>(
      "/partners/:id/caab/subjects/:subject/policies/:capability",
      { schema: { response: { 200: assignResultSchema }, params: assignmentParams, body: assignBody } },
      async (request) => {
        const principal = principalOf(request);
        const { id, subject, capability } = request.params;
        assertCanManagePartner(principal, id);
        return assignCapability(context, actorOf(principal, request), id, subject, capability, request.body);
      },
    );

    app.delete<{ Params: AssignmentParams }>(
      "/partners/:id/caab/subjects/:subject/policies/:capability",
      { schema: { response: { 200: policyOnlySchema }, params: assignmentParams } },
      async (request) => {
        const principal = principalOf(request);
        const { id, subject, capability } = request.params;
        assertCanManagePartner(principal, id);
        return {
          policy: await unassignCapability(context, actorOf(principal, request), id, subject, capability),
        };
      },
    );
  };
}
