import type { FastifyPluginAsync } from "fastify";
import {
  authProfileViewSchema,
  disconnectedUserGrantSchema,
  listOf,
  noContent,
  startedUserGrantSchema,
  userGrantSchema,
} from "../../../admin/admin-response-schemas.ts";
import {
  idSchemas,
  type PageQuery,
  pageQuerySchema,
  pageRequestOf,
  paramsSchema,
} from "../../../admin/admin-schemas.ts";
import { authProfileTypes, parseAuthProfileInput } from "../../../admin/auth-profile-input.ts";
import {
  deleteAuthProfile,
  getAuthProfile,
  listAuthProfiles,
  putAuthProfile,
} from "../../../admin/auth-profiles.ts";
import {
  type CompleteUserGrantInput,
  completeUserGrant,
  disconnectUserGrant,
  getUserGrant,
  refreshUserGrant,
  startUserGrant,
} from "../../../admin/user-grants.ts";
import { assertCanManagePartner, assertCanReadPartner } from "../../../identity/principal.ts";
import { authenticateAll } from "../authenticate.ts";
import type { AuthorityServices } from "../services.ts";
import { resolveSubjectParams } from "./subject-params.ts";

// The shape each type needs is checked by parseAuthProfileInput, which reports per field.
const profileBody = {
  type: "object",
  required: ["type"],
  properties: { type: { type: "string" } },
  description: `One shape per type (docs/admin-api.md, "Auth profiles"): ${authProfileTypes.join(", ")}.`,
} as const;

const grantParams = paramsSchema({
  id: idSchemas.partner,
  profile: idSchemas.local,
  subject: idSchemas.subjectRef,
});
type GrantParams = { id: string; profile: string; subject: string };

// No redirect URI, return URL or scope here: the profile fixes them (no open redirect).
const emptyBody = { type: "object", additionalProperties: false, properties: {} } as const;
const completeBody = {
  type: "object",
  additionalProperties: false,
  required: ["state"],
  properties: {
    state: { type: "string", minLength: 1, maxLength: 256 },
    code: { type: "string", minLength: 1, maxLength: 4096 },
    error: { type: "string", minLength: 1, maxLength: 256 },
  },
} as const;

const targetOf = (params: GrantParams) => ({
  partnerId: params.id,
  profileId: params.profile,
  subjectId: params.subject,
});

const partnerParams = paramsSchema({ id: idSchemas.partner });
const profileParams = paramsSchema({ id: idSchemas.partner, profile: idSchemas.local });

type ProfileParams = { id: string; profile: string };

/** Upstream auth profiles. Secrets are write-only: sealed at rest, never returned. */
export function authProfileRoutes(context: AuthorityServices): FastifyPluginAsync {
  return async (app) => {
    const principalOf = authenticateAll(app, context);
    resolveSubjectParams(app, context);
    const grants = context.userGrants;
    const actorOf = (request: { id: string }, principal: { subject: string }) => ({
      subject: principal.subject,
      requestId: request.id,
    });

    app.get<{ Params: { id: string }; Querystring: PageQuery }>(
      "/partners/:id/caab/auth-profiles",
      {
        schema: {
          response: { 200: listOf(authProfileViewSchema) },
          params: partnerParams,
          querystring: pageQuerySchema,
        },
      },
      async (request) => {
        assertCanReadPartner(principalOf(request), request.params.id);
        return listAuthProfiles(context, request.params.id, pageRequestOf(request.query));
      },
    );

    app.get<{ Params: ProfileParams }>(
      "/partners/:id/caab/auth-profiles/:profile",
      { schema: { response: { 200: authProfileViewSchema }, params: profileParams } },
      async (request) => {
        assertCanReadPartner(principalOf(request), request.params.id);
        return getAuthProfile(context, request.params.id, request.params.profile);
      },
    );

    app.put<{ Params: ProfileParams; Body: unknown }>(
      "/partners/:id/caab/auth-profiles/:profile",
      {
        schema: {
          response: { 200: authProfileViewSchema, 201: authProfileViewSchema },
          params: profileParams,
          body: profileBody,
        },
      },
      async (request, reply) => {
        assertCanManagePartner(principalOf(request), request.params.id);
        const input = parseAuthProfileInput(request.body);
        const outcome = await putAuthProfile(context, request.params.id, request.params.profile, input);
        reply.code(outcome.created ? 201 : 200);
        return outcome.profile;
      },
    );

    app.delete<{ Params: ProfileParams }>(
      "/partners/:id/caab/auth-profiles/:profile",
      { schema: { response: { 204: noContent }, params: profileParams } },
      async (request, reply) => {
        assertCanManagePartner(principalOf(request), request.params.id);
        await deleteAuthProfile(context, request.params.id, request.params.profile);
        return reply.code(204).send();
      },
    );

    // User grants (oauth_user, and disconnect for oauth_token_exchange): docs/admin-api.md.
    const grantPath = "/partners/:id/caab/auth-profiles/:profile/grants/:subject";

    app.post<{ Params: GrantParams; Body: Record<string, never> }>(
      `${grantPath}/start`,
      { schema: { params: grantParams, body: emptyBody, response: { 201: startedUserGrantSchema } } },
      async (request, reply) => {
        const principal = principalOf(request);
        assertCanManagePartner(principal, request.params.id);
        const started = await startUserGrant(
          context,
          grants,
          actorOf(request, principal),
          targetOf(request.params),
        );
        reply.code(201);
        return started;
      },
    );

    app.post<{ Params: GrantParams; Body: CompleteUserGrantInput }>(
      `${grantPath}/complete`,
      { schema: { params: grantParams, body: completeBody, response: { 200: userGrantSchema } } },
      async (request) => {
        const principal = principalOf(request);
        assertCanManagePartner(principal, request.params.id);
        return completeUserGrant(
          context,
          grants,
          actorOf(request, principal),
          targetOf(request.params),
          request.body,
        );
      },
    );

    app.get<{ Params: GrantParams }>(
      grantPath,
      { schema: { params: grantParams, response: { 200: userGrantSchema } } },
      async (request) => {
        assertCanReadPartner(principalOf(request), request.params.id);
        return getUserGrant(context, grants, targetOf(request.params));
      },
    );

    app.post<{ Params: GrantParams; Body: Record<string, never> }>(
      `${grantPath}/refresh`,
      { schema: { params: grantParams, body: emptyBody, response: { 200: userGrantSchema } } },
      async (request) => {
        const principal = principalOf(request);
        assertCanManagePartner(principal, request.params.id);
        return refreshUserGrant(context, grants, actorOf(request, principal), targetOf(request.params));
      },
    );

    app.delete<{ Params: GrantParams }>(
      grantPath,
      { schema: { params: grantParams, response: { 200: disconnectedUserGrantSchema } } },
      async (request) => {
        const principal = principalOf(request);
        assertCanManagePartner(principal, request.params.id);
        return disconnectUserGrant(context, grants, actorOf(request, principal), targetOf(request.params));
      },
    );
  };
}
