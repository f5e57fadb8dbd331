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
  checkedAssignment,
  getAssignment,
  getPolicy,
  listPolicies,
  MAX_POLICY_TTL_SECONDS,
  revokePolicy,
  unassignCapability,
} from "../../../admin/policies.ts";
import { replayAssignment } from "../../../admin/policy-replay.ts";
import { createReplaySlots, REPLAY_RETRY_AFTER_SEC } from "../../../admin/replay-slots.ts";
import { replayShadows } from "../../../admin/shadow-policies.ts";
import { redactionRuleSchema } from "../../../core/index.ts";
import { rolloutCovers } from "../../../core/parameter-constraints.ts";
import { permissionIdSchema } from "../../../core/schemas/common.ts";
import { AuthorityError } from "../../../errors.ts";
import { assertCanManagePartner, assertCanReadPartner, type Principal } from "../../../identity/principal.ts";
import { authenticateAll } from "../authenticate.ts";
import type { AuthorityServices } from "../services.ts";
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

/** `?dry_run=true`: the change is replayed over the recorded window and nothing is written. */
const assignQuery = {
  type: "object",
  additionalProperties: false,
  properties: {
    dry_run: { type: "string", enum: ["true", "false"] },
    since: { type: "string", minLength: 1, maxLength: 64 },
    until: { type: "string", minLength: 1, maxLength: 64 },
    examples: { type: "string", pattern: "^(?:100|[1-9]?[0-9])$" },
  },
} as const;
type AssignQuery = { dry_run?: "true" | "false"; since?: string; until?: string; examples?: string };

/** `?replay=shadow`: the view with what promoting each shadow would flip (decision 2921). */
const viewQuery = {
  type: "object",
  additionalProperties: false,
  properties: {
    replay: { type: "string", enum: ["shadow"] },
    since: assignQuery.properties.since,
    until: assignQuery.properties.until,
    examples: assignQuery.properties.examples,
  },
} as const;
type ViewQuery = { replay?: "shadow"; since?: string; until?: string; examples?: string };

const text = { type: "string" } as const;
const replayFlipsSchema = {
  type: "object",
  required: ["count", "examples"],
  properties: {
    count: { type: "integer" },
    examples: {
      type: "array",
      items: {
        type: "object",
        required: ["requestId", "time", "transport", "method", "path", "recorded", "replayed"],
        properties: {
          requestId: text,
          time: text,
          transport: text,
          method: text,
          path: text,
          recorded: { type: "object", properties: { decision: text, reason: { type: ["string", "null"] } } },
          replayed: {
            type: "object",
            properties: { decision: text, reason: { type: ["string", "null"] }, rule: text },
          },
        },
      },
    },
  },
} as const;
/** The dry run's answer (src/admin/policy-replay.ts AssignmentReplay). */
const assignmentReplaySchema = {
  type: "object",
  required: ["dry_run", "subject_id", "capability_id", "window", "records", "truncated", "replay"],
  properties: {
    dry_run: { type: "boolean", const: true },
    subject_id: text,
    capability_id: text,
    window: { type: "object", properties: { since: text, until: text } },
    records: { type: "integer" },
    truncated: { type: "boolean" },
    replay: {
      type: "object",
      required: ["replayed", "unchanged", "allow_to_deny", "deny_to_allow", "skipped"],
      properties: {
        replayed: { type: "integer" },
        unchanged: { type: "integer" },
        allow_to_deny: replayFlipsSchema,
        deny_to_allow: replayFlipsSchema,
        skipped: { type: "object", additionalProperties: { type: "integer" } },
      },
    },
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

/** The dry run's view of the decision runtime: the capability as a decision resolves it, the rollout gate. */
const replayDepsOf = (services: AuthorityServices) => ({
  store: services.store,
  now: services.now,
  resolveCapability: (partnerId: string, capabilityId: string) =>
    services.decisions.capabilities.resolve(partnerId, capabilityId),
  constraintsEnforced: (partnerId: string) => rolloutCovers(services.decisions.constraintsRollout, partnerId),
});

/**
 * Policy administration. Responses carry public policy records only (toPublicPolicyRecord):
 * never the encrypted artifact.
 */
export function policyRoutes(context: AuthorityServices): FastifyPluginAsync {
  // One set of replay slots per app: the bound is per replica (decision 2861).
  const replaySlots = createReplaySlots();
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

    app.get<{ Params: SubjectParams; Querystring: ViewQuery }>(
      "/partners/:id/caab/subjects/:subject/policy",
      { schema: { response: { 200: publicPolicySchema }, params: subjectParams, querystring: viewQuery } },
      async (request, reply) => {
        const principal = principalOf(request);
        const { id, subject } = request.params;
        assertCanReadPartner(principal, id);
        const { replay, since, until, examples } = request.query;
        if (replay === undefined) return getPolicy(context, id, subject);
        // A replay is a dry run's work: a partner admin's, in the partner's replay slot.
        assertCanManagePartner(principal, id);
        const view = await getPolicy(context, id, subject);
        const release = replaySlots.acquire(id);
        if (release === undefined) {
          reply.header("retry-after", String(REPLAY_RETRY_AFTER_SEC));
          throw new AuthorityError("replay_busy");
        }
        try {
          const window = {
            ...(since === undefined ? {} : { since }),
            ...(until === undefined ? {} : { until }),
            ...(examples === undefined ? {} : { examples: Number(examples) }),
          };
          return { ...view, shadow_replay: await replayShadows(replayDepsOf(context), id, subject, window) };
        } finally {
          release();
        }
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

    app.put<{ Params: AssignmentParams; Body: AssignInput; Querystring: AssignQuery }>(
      "/partners/:id/caab/subjects/:subject/policies/:capability",
      {
        schema: {
          response: { 200: { anyOf: [assignmentReplaySchema, assignResultSchema] } },
          params: assignmentParams,
          body: assignBody,
          querystring: assignQuery,
        },
      },
      async (request, reply) => {
        const principal = principalOf(request);
        const { id, subject, capability } = request.params;
        assertCanManagePartner(principal, id);
        const actor = actorOf(principal, request);
        const { dry_run: dryRun, since, until, examples } = request.query;
        if (dryRun !== "true") return assignCapability(context, actor, id, subject, capability, request.body);
        const checked = await checkedAssignment(context, actor, id, subject, capability, request.body);
        const release = replaySlots.acquire(id);
        if (release === undefined) {
          reply.header("retry-after", String(REPLAY_RETRY_AFTER_SEC));
          throw new AuthorityError("replay_busy");
        }
        try {
          return await replayAssignment(replayDepsOf(context), checked.subject, checked.assignment, {
            ...(since === undefined ? {} : { since }),
            ...(until === undefined ? {} : { until }),
            ...(examples === undefined ? {} : { examples: Number(examples) }),
          });
        } finally {
          release();
        }
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
