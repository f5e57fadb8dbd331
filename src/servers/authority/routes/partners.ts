import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import {
  listOf,
  noContent,
  partnerDeletionSchema,
  partnerSchema,
  rotatedKeysSchema,
  subjectSchema,
} from "../../../admin/admin-response-schemas.ts";
import {
  idSchemas,
  type PageQuery,
  pageQuerySchema,
  pageRequestOf,
  paramsSchema,
} from "../../../admin/admin-schemas.ts";
import type { Actor } from "../../../admin/deps.ts";
import { deletePartner } from "../../../admin/partner-deletion.ts";
import { createPartner, getPartner, listPartners } from "../../../admin/partners.ts";
import { deleteSubject } from "../../../admin/subject-removal.ts";
import {
  type CreateSubjectInput,
  createSubject,
  getSubject,
  listSubjects,
  rotateSubjectKeys,
  setSubjectIdentity,
} from "../../../admin/subjects.ts";
import { AuthorityError } from "../../../errors.ts";
import {
  assertCanManagePartner,
  assertCanReadPartner,
  assertRole,
  hasRole,
  type Principal,
} from "../../../identity/principal.ts";
import { subjectTypes } from "../../../store/model.ts";
import { authenticateAll } from "../authenticate.ts";
import type { AuthorityContext } from "../context.ts";
import { resolveSubjectParams } from "./subject-params.ts";

const actorOf = (principal: Principal, request: FastifyRequest): Actor => ({
  subject: principal.subject,
  requestId: request.id,
});

const partnerParams = paramsSchema({ id: idSchemas.partner });
const subjectParams = paramsSchema({ id: idSchemas.partner, subject: idSchemas.subjectRef });

const createPartnerBody = {
  type: "object",
  additionalProperties: false,
  required: ["name"],
  properties: {
    partner_id: idSchemas.partner,
    name: { type: "string", minLength: 1, maxLength: 256 },
  },
} as const;

const createUserBody = {
  type: "object",
  additionalProperties: false,
  required: ["subject_type", "display_name"],
  properties: {
    subject_id: idSchemas.subject,
    subject_type: { enum: [...subjectTypes] },
    display_name: { type: "string", minLength: 1, maxLength: 256 },
    boundary_id: { anyOf: [idSchemas.local, { type: "null" }] },
    crypto_version: { enum: ["subject_credentials_v1", "platform_service_v2"] },
    identity: { enum: ["partner_token", "platform_vouched"] },
  },
} as const;

const identityBody = {
  type: "object",
  additionalProperties: false,
  required: ["identity"],
  properties: { identity: { enum: ["partner_token", "platform_vouched"] } },
} as const;

type BearerIdentity = "partner_token" | "platform_vouched";

/**
 * Which principals a subject created or changed by this caller stands for
 * (docs/decisions/0701-subject-ownership.md): a partner admin's subjects are reached only by
 * tokens carrying its `partner_id` claim; only a platform admin may vouch for a bare `sub`.
 */
function bearerIdentityFor(principal: Principal, asked: BearerIdentity | undefined): BearerIdentity {
  const platform = hasRole(principal, "admin");
  const identity = asked ?? (platform ? "platform_vouched" : "partner_token");
  if (identity === "platform_vouched" && !platform) {
    throw new AuthorityError(
      "insufficient_role",
      "Only a platform admin may vouch for a subject's principal.",
    );
  }
  return identity;
}

const deleteQuery = {
  type: "object",
  additionalProperties: false,
  properties: { cascade: { enum: ["true", "false"] } },
} as const;

type PartnerParams = { id: string };
type SubjectParams = { id: string; subject: string };

/** Partners and their users (subjects). See docs/admin-api.md. */
export function partnerRoutes(context: AuthorityContext): FastifyPluginAsync {
  return async (app) => {
    const principalOf = authenticateAll(app, context);
    resolveSubjectParams(app, context);

    app.get<{ Querystring: PageQuery }>(
      "/partners",
      { schema: { response: { 200: listOf(partnerSchema) }, querystring: pageQuerySchema } },
      async (request) => {
        const principal = principalOf(request);
        assertRole(principal, "admin", "auditor", "partner_admin");
        if (hasRole(principal, "admin") || hasRole(principal, "auditor")) {
          return listPartners(context, pageRequestOf(request.query));
        }
        // A partner admin sees exactly its own partner.
        const own = principal.partnerId;
        if (own === undefined) return { items: [] };
        try {
          return { items: [await getPartner(context, own)] };
        } catch (error) {
          if (error instanceof AuthorityError && error.code === "not_found") return { items: [] };
          throw error;
        }
      },
    );

    app.post<{ Body: { partner_id?: string; name: string } }>(
      "/partners",
      { schema: { response: { 201: partnerSchema }, body: createPartnerBody } },
      async (request, reply) => {
        assertRole(principalOf(request), "admin");
        reply.code(201);
        return createPartner(context, request.body);
      },
    );

    app.get<{ Params: PartnerParams }>(
      "/partners/:id",
      { schema: { response: { 200: partnerSchema }, params: partnerParams } },
      async (request) => {
        assertCanReadPartner(principalOf(request), request.params.id);
        return getPartner(context, request.params.id);
      },
    );

    app.delete<{ Params: PartnerParams; Querystring: { cascade?: "true" | "false" } }>(
      "/partners/:id",
      {
        schema: { response: { 200: partnerDeletionSchema }, params: partnerParams, querystring: deleteQuery },
      },
      async (request) => {
        const principal = principalOf(request);
        assertRole(principal, "admin");
        return deletePartner(context, actorOf(principal, request), request.params.id, {
          cascade: request.query.cascade === "true",
        });
      },
    );

    app.post<{
      Params: PartnerParams;
      Body: Omit<CreateSubjectInput, "identity"> & { identity?: BearerIdentity };
    }>(
      "/partners/:id/users",
      { schema: { response: { 201: subjectSchema }, params: partnerParams, body: createUserBody } },
      async (request, reply) => {
        const principal = principalOf(request);
        assertCanManagePartner(principal, request.params.id);
        const { identity, ...input } = request.body;
        const external = input.subject_type === "external";
        if (external && identity !== undefined) {
          throw new AuthorityError(
            "invalid_request",
            "An external subject is reached only through its binding.",
          );
        }
        reply.code(201);
        return createSubject(context, request.params.id, {
          ...input,
          identity: external ? "binding" : bearerIdentityFor(principal, identity),
        });
      },
    );

    app.patch<{ Params: SubjectParams; Body: { identity: BearerIdentity } }>(
      "/partners/:id/users/:subject",
      { schema: { response: { 200: subjectSchema }, params: subjectParams, body: identityBody } },
      async (request) => {
        const principal = principalOf(request);
        assertCanManagePartner(principal, request.params.id);
        const identity = bearerIdentityFor(principal, request.body.identity);
        return setSubjectIdentity(
          context,
          actorOf(principal, request),
          request.params.id,
          request.params.subject,
          identity,
        );
      },
    );

    app.get<{ Params: PartnerParams; Querystring: PageQuery }>(
      "/partners/:id/users",
      {
        schema: {
          response: { 200: listOf(subjectSchema) },
          params: partnerParams,
          querystring: pageQuerySchema,
        },
      },
      async (request) => {
        assertCanReadPartner(principalOf(request), request.params.id);
        return listSubjects(context, request.params.id, pageRequestOf(request.query));
      },
    );

    app.get<{ Params: SubjectParams }>(
      "/partners/:id/users/:subject",
      { schema: { response: { 200: subjectSchema }, params: subjectParams } },
      async (request) => {
        assertCanReadPartner(principalOf(request), request.params.id);
        return getSubject(context, request.params.id, request.params.subject);
      },
    );

    app.post<{ Params: SubjectParams }>(
      "/partners/:id/users/:subject/rotate-keys",
      { schema: { response: { 200: rotatedKeysSchema }, params: subjectParams } },
      async (request) => {
        const principal = principalOf(request);
        assertCanManagePartner(principal, request.params.id);
        const rotated = await rotateSubjectKeys(context, request.params.id, request.params.subject);
        request.log.info({ subject: rotated.subject_id }, "subject keys rotated at the crypto service");
        return rotated;
      },
    );

    app.delete<{ Params: SubjectParams }>(
      "/partners/:id/users/:subject",
      { schema: { response: { 204: noContent }, params: subjectParams } },
      async (request, reply) => {
        const principal = principalOf(request);
        assertCanManagePartner(principal, request.params.id);
        await deleteSubject(context, actorOf(principal, request), request.params.id, request.params.subject);
        return reply.code(204).send();
      },
    );
  };
}
