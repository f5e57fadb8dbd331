import type { FastifyPluginAsync } from "fastify";
import {
  assignmentSchema,
  listOf,
  publicPolicySchema,
  record,
} from "../../../admin/admin-response-schemas.ts";
import { idSchemas, paramsSchema } from "../../../admin/admin-schemas.ts";
import { disableLogOnly, enableLogOnly, listLogOnly } from "../../../admin/log-only.ts";
import type { AssignInput } from "../../../admin/policies.ts";
import {
  getShadowAssignment,
  getShadowPolicy,
  promoteShadow,
  removeShadowAssignment,
  setShadowAssignment,
} from "../../../admin/shadow-policies.ts";
import { assertCanManagePartner, assertCanReadPartner, assertRole } from "../../../identity/principal.ts";
import { authenticateAll } from "../authenticate.ts";
import type { AuthorityContext } from "../context.ts";
import {
  type AssignmentParams,
  actorOf,
  assignBody,
  assignmentParams,
  assignmentReadRoute,
} from "./policies.ts";
import { resolveSubjectParams } from "./subject-params.ts";

const subjectParams = paramsSchema({ id: idSchemas.partner, subject: idSchemas.subjectRef });
const capabilityParams = paramsSchema({ partner: idSchemas.partner, capability: idSchemas.capability });

const nullablePolicy = { anyOf: [publicPolicySchema, { type: "null" }] } as const;
const shadowResultSchema = record(["shadow_policy"], {
  shadow_policy: nullablePolicy,
  assignment: assignmentSchema,
});
/** A promotion's answer (the partner route and the binding route). */
export const promoteResultSchema = record(["policy", "assignment", "shadow_policy"], {
  policy: publicPolicySchema,
  assignment: assignmentSchema,
  shadow_policy: nullablePolicy,
});
const logOnlySchema = record(["partner_id", "capability_id", "reason", "set_by", "set_at"]);
const logOnlyBody = {
  type: "object",
  additionalProperties: false,
  required: ["reason"],
  properties: { reason: { type: "string", minLength: 1, maxLength: 512 } },
} as const;

type CapabilityParams = { partner: string; capability: string };

/**
 * Shadow policies (partner-managed, like assignments) and the platform-wide log-only mode
 * (platform admins only: a partner admin can never set it, for another partner or its own).
 * docs/admin-api.md "Shadow policies and log-only mode"; decision 2761.
 */
export function shadowRoutes(context: AuthorityContext): FastifyPluginAsync {
  return async (app) => {
    const principalOf = authenticateAll(app, context);
    resolveSubjectParams(app, context);
    const shadowPath = "/partners/:id/caab/subjects/:subject/policies/:capability/shadow";

    assignmentReadRoute(app, principalOf, shadowPath, (...ids) => getShadowAssignment(context, ...ids));

    app.put<{ Params: AssignmentParams; Body: AssignInput }>(
      shadowPath,
      { schema: { response: { 200: shadowResultSchema }, params: assignmentParams, body: assignBody } },
      async (request) => {
        const principal = principalOf(request);
        const { id, subject, capability } = request.params;
        assertCanManagePartner(principal, id);
        return setShadowAssignment(
          context,
          actorOf(principal, request),
          id,
          subject,
          capability,
          request.body,
        );
      },
    );

    app.delete<{ Params: AssignmentParams }>(
      shadowPath,
      { schema: { response: { 200: shadowResultSchema }, params: assignmentParams } },
      async (request) => {
        const principal = principalOf(request);
        const { id, subject, capability } = request.params;
        assertCanManagePartner(principal, id);
        return removeShadowAssignment(context, actorOf(principal, request), id, subject, capability);
      },
    );

    app.post<{ Params: AssignmentParams }>(
      `${shadowPath}/promote`,
      { schema: { response: { 200: promoteResultSchema }, params: assignmentParams } },
      async (request) => {
        const principal = principalOf(request);
        const { id, subject, capability } = request.params;
        assertCanManagePartner(principal, id);
        return promoteShadow(context, actorOf(principal, request), id, subject, capability);
      },
    );

    app.get<{ Params: { id: string; subject: string } }>(
      "/partners/:id/caab/subjects/:subject/shadow-policy",
      { schema: { response: { 200: publicPolicySchema }, params: subjectParams } },
      async (request) => {
        assertCanReadPartner(principalOf(request), request.params.id);
        return getShadowPolicy(context, request.params.id, request.params.subject);
      },
    );

    app.get("/admin/log-only", { schema: { response: { 200: listOf(logOnlySchema) } } }, async (request) => {
      assertRole(principalOf(request), "admin", "auditor");
      return { items: await listLogOnly(context) };
    });

    app.put<{ Params: CapabilityParams; Body: { reason: string } }>(
      "/admin/log-only/:partner/:capability",
      { schema: { response: { 200: logOnlySchema }, params: capabilityParams, body: logOnlyBody } },
      async (request) => {
        const principal = principalOf(request);
        assertRole(principal, "admin");
        const { partner, capability } = request.params;
        return enableLogOnly(context, actorOf(principal, request), partner, capability, request.body.reason);
      },
    );

    app.delete<{ Params: CapabilityParams }>(
      "/admin/log-only/:partner/:capability",
      {
        schema: {
          response: { 200: record(["disabled"], { disabled: { type: "boolean" } }) },
          params: capabilityParams,
        },
      },
      async (request) => {
        const principal = principalOf(request);
        assertRole(principal, "admin");
        const { partner, capability } = request.params;
        return { disabled: await disableLogOnly(context, actorOf(principal, request), partner, capability) };
      },
    );
  };
}
