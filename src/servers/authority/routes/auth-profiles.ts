import type { FastifyPluginAsync } from "fastify";
import { authProfileViewSchema, listOf, noContent } from "../../../admin/admin-response-schemas.ts";
import {
  idSchemas,
  type PageQuery,
  pageQuerySchema,
  pageRequestOf,
  paramsSchema,
} from "../../../admin/admin-schemas.ts";
import { parseAuthProfileInput } from "../../../admin/auth-profile-input.ts";
import {
  deleteAuthProfile,
  getAuthProfile,
  listAuthProfiles,
  putAuthProfile,
} from "../../../admin/auth-profiles.ts";
import { assertCanManagePartner, assertCanReadPartner } from "../../../identity/principal.ts";
import { authenticateAll } from "../authenticate.ts";
import type { AuthorityContext } from "../context.ts";

// The shape each type needs is checked by parseAuthProfileInput, which reports per field.
const profileBody = {
  type: "object",
  required: ["type"],
  properties: { type: { type: "string" } },
} as const;

const partnerParams = paramsSchema({ id: idSchemas.partner });
const profileParams = paramsSchema({ id: idSchemas.partner, profile: idSchemas.local });

type ProfileParams = { id: string; profile: string };

/** Upstream auth profiles. Secrets are write-only: sealed at rest, never returned. */
export function authProfileRoutes(context: AuthorityContext): FastifyPluginAsync {
  return async (app) => {
    const principalOf = authenticateAll(app, context);

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
  };
}
