import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import {
  assignmentSchema,
  bindingApiSchema,
  bindingAuthProfileSchema,
  bindingSchema,
  createdWorkloadClientSchema,
  evidenceSchema,
  listOf,
  policyOnlySchema,
  publicPolicySchema,
  record,
  subjectMappingSchema,
  workloadClientSchema,
} from "../../../admin/admin-response-schemas.ts";
import {
  idSchemas,
  type PageQuery,
  pageQuerySchema,
  pageRequestOf,
  paramsSchema,
} from "../../../admin/admin-schemas.ts";
import { getAuthProfile } from "../../../admin/auth-profiles.ts";
import type { Actor } from "../../../admin/deps.ts";
import {
  assignBindingApi,
  type BindingAssignInput,
  listBindingApis,
  promoteBindingShadow,
  removeBindingShadow,
  setBindingShadow,
  unassignBindingApi,
} from "../../../bindings/assignments.ts";
import {
  type CreateBindingInput,
  createBinding,
  getBinding,
  listBindings,
  setBindingAuthProfile,
  type UpdateBindingInput,
  updateBinding,
} from "../../../bindings/bindings.ts";
import { getEvidence, listEvidence } from "../../../bindings/evidence.ts";
import {
  deleteExperience,
  type ExperienceInput,
  type ExperienceUpdate,
  getExperience,
  putExperience,
  updateExperience,
} from "../../../bindings/experience.ts";
import {
  type CreateMappingInput,
  createMapping,
  getMapping,
  listMappings,
} from "../../../bindings/mappings.ts";
import {
  type CreateWorkloadClientInput,
  createWorkloadClient,
  listWorkloadClients,
  revokeWorkloadClient,
} from "../../../bindings/workload-clients.ts";
import { assertCanManagePartner, assertCanReadPartner, type Principal } from "../../../identity/principal.ts";
import { type BindingRecord, workloadScopes } from "../../../store/binding-model.ts";
import { authenticateAll } from "../authenticate.ts";
import type { AuthorityContext } from "../context.ts";
import { promoteResultSchema } from "./shadow.ts";

/**
 * The headless partner API's lifecycle routes (docs/bindings.md): bindings of a partner,
 * their workload clients, mapped external subjects, API assignments, the binding's auth
 * profile, the end-user experience, invocations and evidence. Callers: `admin`, or `partner_admin` of the
 * binding's partner; reads also `auditor`.
 */

const actorOf = (principal: Principal, request: FastifyRequest): Actor => ({
  subject: principal.subject,
  requestId: request.id,
});

const bindingId = idSchemas.local;
const subjectId = idSchemas.subject;
const partnerParams = paramsSchema({ id: idSchemas.partner });
const bindingParams = paramsSchema({ bindingId });
const clientParams = paramsSchema({ bindingId, clientId: { type: "string", minLength: 1, maxLength: 64 } });
const subjectParams = paramsSchema({ bindingId, subject: subjectId });
const subjectApiParams = paramsSchema({ bindingId, subject: subjectId, capability: idSchemas.capability });
const evidenceParams = paramsSchema({
  bindingId,
  evidenceId: { type: "string", minLength: 1, maxLength: 64 },
});

const httpUrl = { type: "string", minLength: 1, maxLength: 2048 } as const;
const jwksSchema = {
  type: "object",
  required: ["keys"],
  properties: { keys: { type: "array", minItems: 1, maxItems: 32, items: { type: "object" } } },
} as const;
const algorithmsSchema = { type: "array", minItems: 1, maxItems: 16, items: { type: "string" } } as const;
const mappingVersionSchema = { type: "string", pattern: "^[A-Za-z0-9._:-]{1,64}$" } as const;

const createBindingBody = {
  type: "object",
  additionalProperties: false,
  required: ["issuer", "audience", "tenant_value"],
  properties: {
    binding_id: bindingId,
    issuer: httpUrl,
    jwks_url: httpUrl,
    jwks: jwksSchema,
    audience: { type: "string", minLength: 1, maxLength: 1024 },
    tenant_claim: { type: "string", minLength: 1, maxLength: 64 },
    tenant_value: { type: "string", minLength: 1, maxLength: 1024 },
    algorithms: algorithmsSchema,
    mapping_version: mappingVersionSchema,
    active: { type: "boolean" },
    auth_profile_ref: { anyOf: [idSchemas.local, { type: "null" }] },
  },
} as const;

const updateBindingBody = {
  type: "object",
  additionalProperties: false,
  minProperties: 1,
  properties: {
    jwks_url: httpUrl,
    jwks: jwksSchema,
    audience: { type: "string", minLength: 1, maxLength: 1024 },
    tenant_claim: { type: "string", minLength: 1, maxLength: 64 },
    tenant_value: { type: "string", minLength: 1, maxLength: 1024 },
    algorithms: algorithmsSchema,
    mapping_version: mappingVersionSchema,
    active: { type: "boolean" },
  },
} as const;

const createClientBody = {
  type: "object",
  additionalProperties: false,
  required: ["name"],
  properties: {
    name: { type: "string", minLength: 1, maxLength: 256 },
    scopes: { type: "array", minItems: 1, items: { enum: [...workloadScopes] } },
  },
} as const;

const createMappingBody = {
  type: "object",
  additionalProperties: false,
  required: ["external_subject"],
  properties: {
    external_subject: { type: "string", minLength: 1, maxLength: 1024 },
    display_name: { type: "string", minLength: 1, maxLength: 256 },
    boundary_id: { anyOf: [idSchemas.local, { type: "null" }] },
  },
} as const;

const assignBody = {
  type: "object",
  additionalProperties: false,
  required: ["subject_id", "capability_id", "allowed_permission_ids"],
  properties: {
    subject_id: subjectId,
    capability_id: idSchemas.capability,
    allowed_permission_ids: {
      type: "array",
      minItems: 1,
      maxItems: 1000,
      items: { type: "string", minLength: 1, maxLength: 2048 },
    },
    response_redactions: {
      type: "object",
      additionalProperties: { type: "array", maxItems: 100, items: { type: "object" } },
    },
    expires_at: { type: "string", minLength: 1, maxLength: 64 },
    ttl_seconds: { type: "integer", minimum: 1 },
  },
} as const;

/** The assignment's body without the ids the shadow's path names. */
const { subject_id: _subject, capability_id: _capability, ...shadowProperties } = assignBody.properties;
const shadowBody = {
  type: "object",
  additionalProperties: false,
  required: ["allowed_permission_ids"],
  properties: shadowProperties,
} as const;
type ShadowBody = Omit<BindingAssignInput, "subject_id" | "capability_id">;
type SubjectApiParams = BindingParams & { subject: string; capability: string };
const shadowResultSchema = record(["shadow_policy"], {
  shadow_policy: { anyOf: [publicPolicySchema, { type: "null" }] },
  assignment: assignmentSchema,
});

const authProfileBody = {
  type: "object",
  additionalProperties: false,
  required: ["auth_profile_ref"],
  properties: { auth_profile_ref: { anyOf: [idSchemas.local, { type: "null" }] } },
} as const;

const text = (max: number) => ({ type: "string", minLength: 1, maxLength: max }) as const;
const nullableText = (max: number) => ({ anyOf: [text(max), { type: "null" }] }) as const;
const experienceTool = {
  type: "object",
  additionalProperties: false,
  required: ["permission_id"],
  properties: {
    permission_id: text(2048),
    display_name: nullableText(128),
    description: nullableText(1024),
  },
} as const;
const experienceCapability = {
  type: "object",
  additionalProperties: false,
  required: ["capability_id"],
  properties: {
    capability_id: idSchemas.capability,
    tools: { anyOf: [{ type: "array", maxItems: 1000, items: experienceTool }, { type: "null" }] },
  },
} as const;
const experienceFields = {
  enabled: { type: "boolean" },
  display_name: nullableText(256),
  capabilities: { type: "array", maxItems: 100, items: experienceCapability },
  consent: {
    anyOf: [
      {
        type: "object",
        additionalProperties: false,
        required: ["text", "version"],
        properties: { text: text(16_384), version: { type: "string", pattern: "^[A-Za-z0-9._:-]{1,64}$" } },
      },
      { type: "null" },
    ],
  },
} as const;
const putExperienceBody = {
  type: "object",
  additionalProperties: false,
  required: ["capabilities"],
  properties: experienceFields,
} as const;
const patchExperienceBody = {
  type: "object",
  additionalProperties: false,
  minProperties: 1,
  properties: experienceFields,
} as const;
/** The stored experience as answered (response schema: nothing else leaves). */
const experienceResponse = {
  type: "object",
  additionalProperties: false,
  required: [
    "binding_id",
    "partner_id",
    "enabled",
    "display_name",
    "capabilities",
    "consent",
    "revision",
    "created_at",
    "updated_at",
  ],
  properties: {
    binding_id: { type: "string" },
    partner_id: { type: "string" },
    ...experienceFields,
    revision: { type: "integer" },
    created_at: { type: "string" },
    updated_at: { type: "string" },
  },
} as const;

type BindingParams = { bindingId: string };

export function bindingRoutes(context: AuthorityContext): FastifyPluginAsync {
  return async (app) => {
    const principalOf = authenticateAll(app, context);

    /** The binding, when the caller may read (or manage) its partner. */
    async function bindingFor(
      request: FastifyRequest<{ Params: BindingParams }>,
      manage: boolean,
    ): Promise<BindingRecord> {
      const principal = principalOf(request);
      const binding = await getBinding(context, request.params.bindingId);
      if (manage) assertCanManagePartner(principal, binding.partner_id);
      else assertCanReadPartner(principal, binding.partner_id);
      return binding;
    }

    app.post<{ Params: { id: string }; Body: CreateBindingInput }>(
      "/partners/:id/bindings",
      { schema: { response: { 201: bindingSchema }, params: partnerParams, body: createBindingBody } },
      async (request, reply) => {
        assertCanManagePartner(principalOf(request), request.params.id);
        reply.code(201);
        return createBinding(context, request.params.id, request.body);
      },
    );

    app.get<{ Params: { id: string }; Querystring: PageQuery }>(
      "/partners/:id/bindings",
      {
        schema: {
          response: { 200: listOf(bindingSchema) },
          params: partnerParams,
          querystring: pageQuerySchema,
        },
      },
      async (request) => {
        assertCanReadPartner(principalOf(request), request.params.id);
        return listBindings(context, request.params.id, pageRequestOf(request.query));
      },
    );

    app.get<{ Params: BindingParams }>(
      "/v1/bindings/:bindingId",
      { schema: { response: { 200: bindingSchema }, params: bindingParams } },
      async (request) => bindingFor(request, false),
    );

    app.patch<{ Params: BindingParams; Body: UpdateBindingInput }>(
      "/v1/bindings/:bindingId",
      { schema: { response: { 200: bindingSchema }, params: bindingParams, body: updateBindingBody } },
      async (request) => updateBinding(context, await bindingFor(request, true), request.body),
    );

    app.post<{ Params: BindingParams; Body: CreateWorkloadClientInput }>(
      "/v1/bindings/:bindingId/workload-clients",
      {
        schema: {
          response: { 201: createdWorkloadClientSchema },
          params: bindingParams,
          body: createClientBody,
        },
      },
      async (request, reply) => {
        const created = await createWorkloadClient(context, await bindingFor(request, true), request.body);
        reply.code(201).header("cache-control", "no-store");
        return created;
      },
    );

    app.get<{ Params: BindingParams; Querystring: PageQuery }>(
      "/v1/bindings/:bindingId/workload-clients",
      {
        schema: {
          response: { 200: listOf(workloadClientSchema) },
          params: bindingParams,
          querystring: pageQuerySchema,
        },
      },
      async (request) =>
        listWorkloadClients(context, await bindingFor(request, false), pageRequestOf(request.query)),
    );

    app.delete<{ Params: BindingParams & { clientId: string } }>(
      "/v1/bindings/:bindingId/workload-clients/:clientId",
      { schema: { response: { 200: workloadClientSchema }, params: clientParams } },
      async (request) =>
        revokeWorkloadClient(context, await bindingFor(request, true), request.params.clientId),
    );

    app.post<{ Params: BindingParams; Body: CreateMappingInput }>(
      "/v1/bindings/:bindingId/subjects",
      { schema: { response: { 201: subjectMappingSchema }, params: bindingParams, body: createMappingBody } },
      async (request, reply) => {
        const created = await createMapping(context, await bindingFor(request, true), request.body);
        reply.code(201);
        return created;
      },
    );

    app.get<{ Params: BindingParams; Querystring: PageQuery }>(
      "/v1/bindings/:bindingId/subjects",
      {
        schema: {
          response: { 200: listOf(subjectMappingSchema) },
          params: bindingParams,
          querystring: pageQuerySchema,
        },
      },
      async (request) =>
        listMappings(context, await bindingFor(request, false), pageRequestOf(request.query)),
    );

    app.get<{ Params: BindingParams & { subject: string } }>(
      "/v1/bindings/:bindingId/subjects/:subject",
      { schema: { response: { 200: subjectMappingSchema }, params: subjectParams } },
      async (request) => getMapping(context, await bindingFor(request, false), request.params.subject),
    );

    app.post<{ Params: BindingParams; Body: BindingAssignInput }>(
      "/v1/bindings/:bindingId/apis",
      { schema: { response: { 200: bindingApiSchema }, params: bindingParams, body: assignBody } },
      async (request) => {
        const binding = await bindingFor(request, true);
        return assignBindingApi(context, actorOf(principalOf(request), request), binding, request.body);
      },
    );

    app.get<{ Params: BindingParams & { subject: string } }>(
      "/v1/bindings/:bindingId/subjects/:subject/apis",
      { schema: { response: { 200: bindingApiSchema }, params: subjectParams } },
      async (request) => ({
        items: await listBindingApis(context, await bindingFor(request, false), request.params.subject),
      }),
    );

    app.delete<{ Params: BindingParams & { subject: string; capability: string } }>(
      "/v1/bindings/:bindingId/subjects/:subject/apis/:capability",
      { schema: { response: { 200: policyOnlySchema }, params: subjectApiParams } },
      async (request) => {
        const binding = await bindingFor(request, true);
        const policy = await unassignBindingApi(
          context,
          actorOf(principalOf(request), request),
          binding,
          request.params.subject,
          request.params.capability,
        );
        return { policy };
      },
    );

    // A headless subject's shadow (decision 2761), checked like its assignment above.
    const shadowPath = "/v1/bindings/:bindingId/subjects/:subject/apis/:capability/shadow";
    app.put<{ Params: SubjectApiParams; Body: ShadowBody }>(
      shadowPath,
      { schema: { response: { 200: shadowResultSchema }, params: subjectApiParams, body: shadowBody } },
      async (request) => {
        const binding = await bindingFor(request, true);
        const { subject, capability } = request.params;
        return setBindingShadow(context, actorOf(principalOf(request), request), binding, {
          ...request.body,
          subject_id: subject,
          capability_id: capability,
        });
      },
    );

    app.delete<{ Params: SubjectApiParams }>(
      shadowPath,
      { schema: { response: { 200: shadowResultSchema }, params: subjectApiParams } },
      async (request) => {
        const binding = await bindingFor(request, true);
        const { subject, capability } = request.params;
        return removeBindingShadow(
          context,
          actorOf(principalOf(request), request),
          binding,
          subject,
          capability,
        );
      },
    );

    app.post<{ Params: SubjectApiParams }>(
      `${shadowPath}/promote`,
      { schema: { response: { 200: promoteResultSchema }, params: subjectApiParams } },
      async (request) => {
        const binding = await bindingFor(request, true);
        const { subject, capability } = request.params;
        return promoteBindingShadow(
          context,
          actorOf(principalOf(request), request),
          binding,
          subject,
          capability,
        );
      },
    );

    app.get<{ Params: BindingParams }>(
      "/v1/bindings/:bindingId/auth-profiles",
      { schema: { response: { 200: bindingAuthProfileSchema }, params: bindingParams } },
      async (request) => {
        const binding = await bindingFor(request, false);
        const ref = binding.auth_profile_ref;
        return {
          auth_profile_ref: ref,
          profile: ref === null ? null : await getAuthProfile(context, binding.partner_id, ref),
        };
      },
    );

    app.put<{ Params: BindingParams; Body: { auth_profile_ref: string | null } }>(
      "/v1/bindings/:bindingId/auth-profiles",
      { schema: { response: { 200: bindingSchema }, params: bindingParams, body: authProfileBody } },
      async (request) =>
        setBindingAuthProfile(context, await bindingFor(request, true), request.body.auth_profile_ref),
    );

    app.put<{ Params: BindingParams; Body: ExperienceInput }>(
      "/v1/bindings/:bindingId/experience",
      {
        schema: {
          params: bindingParams,
          body: putExperienceBody,
          response: { 200: experienceResponse, 201: experienceResponse },
        },
      },
      async (request, reply) => {
        const binding = await bindingFor(request, true);
        const actor = actorOf(principalOf(request), request);
        const written = await putExperience(context, actor, binding, request.body);
        reply.code(written.created ? 201 : 200);
        return written.experience;
      },
    );

    app.get<{ Params: BindingParams }>(
      "/v1/bindings/:bindingId/experience",
      { schema: { params: bindingParams, response: { 200: experienceResponse } } },
      async (request) => getExperience(context, await bindingFor(request, false)),
    );

    app.patch<{ Params: BindingParams; Body: ExperienceUpdate }>(
      "/v1/bindings/:bindingId/experience",
      { schema: { params: bindingParams, body: patchExperienceBody, response: { 200: experienceResponse } } },
      async (request) => {
        const binding = await bindingFor(request, true);
        return updateExperience(context, actorOf(principalOf(request), request), binding, request.body);
      },
    );

    app.delete<{ Params: BindingParams }>(
      "/v1/bindings/:bindingId/experience",
      { schema: { params: bindingParams, response: { 200: experienceResponse } } },
      async (request) => {
        const binding = await bindingFor(request, true);
        return deleteExperience(context, actorOf(principalOf(request), request), binding);
      },
    );

    app.get<{ Params: BindingParams; Querystring: PageQuery }>(
      "/v1/bindings/:bindingId/invocations",
      {
        schema: {
          response: { 200: listOf(evidenceSchema) },
          params: bindingParams,
          querystring: pageQuerySchema,
        },
      },
      async (request) => {
        const binding = await bindingFor(request, false);
        return listEvidence(context.store, binding.binding_id, pageRequestOf(request.query));
      },
    );

    app.get<{ Params: BindingParams & { evidenceId: string } }>(
      "/v1/bindings/:bindingId/evidence/:evidenceId",
      { schema: { response: { 200: evidenceSchema }, params: evidenceParams } },
      async (request) => {
        const binding = await bindingFor(request, false);
        return getEvidence(context.store, binding.binding_id, request.params.evidenceId);
      },
    );
  };
}
