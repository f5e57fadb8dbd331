import type { FastifyPluginAsync } from "fastify";
import {
  boundarySchema,
  boundaryUpdateSchema,
  listOf,
  noContent,
} from "../../../admin/admin-response-schemas.ts";
import {
  idSchemas,
  type PageQuery,
  pageQuerySchema,
  pageRequestOf,
  paramsSchema,
} from "../../../admin/admin-schemas.ts";
import {
  type BoundaryInput,
  type CreateBoundaryInput,
  createBoundary,
  deleteBoundary,
  getBoundary,
  listBoundaries,
  updateBoundary,
} from "../../../admin/boundaries.ts";
import { getPartner } from "../../../admin/partners.ts";
import { assertCanManagePartner, assertCanReadPartner } from "../../../identity/principal.ts";
import { authenticateAll } from "../authenticate.ts";
import type { AuthorityContext } from "../context.ts";

const boundaryFields = {
  name: { type: "string", minLength: 1, maxLength: 256 },
  allowed_capabilities: { type: "array", maxItems: 1024, items: idSchemas.capability },
  allowed_permission_patterns: {
    type: "array",
    maxItems: 1024,
    items: { type: "string", minLength: 1, maxLength: 2048, pattern: "^[\\x21-\\x7e]+$" },
  },
  max_policy_ttl_seconds: { anyOf: [{ type: "integer", minimum: 1 }, { type: "null" }] },
} as const;

const boundaryBody = {
  type: "object",
  additionalProperties: false,
  required: ["name", "allowed_capabilities", "allowed_permission_patterns"],
  properties: boundaryFields,
} as const;

const createBody = {
  type: "object",
  additionalProperties: false,
  required: ["boundary_id", "name", "allowed_capabilities", "allowed_permission_patterns"],
  properties: { boundary_id: idSchemas.local, ...boundaryFields },
} as const;

const partnerParams = paramsSchema({ id: idSchemas.partner });
const boundaryParams = paramsSchema({ id: idSchemas.partner, boundary: idSchemas.local });

type BoundaryParams = { id: string; boundary: string };

/** Permission boundaries: the most a subject under them may ever be assigned. */
export function boundaryRoutes(context: AuthorityContext): FastifyPluginAsync {
  return async (app) => {
    const principalOf = authenticateAll(app, context);

    app.get<{ Params: { id: string }; Querystring: PageQuery }>(
      "/partners/:id/permission-boundaries",
      {
        schema: {
          response: { 200: listOf(boundarySchema) },
          params: partnerParams,
          querystring: pageQuerySchema,
        },
      },
      async (request) => {
        assertCanReadPartner(principalOf(request), request.params.id);
        return listBoundaries(context, request.params.id, pageRequestOf(request.query));
      },
    );

    app.post<{ Params: { id: string }; Body: CreateBoundaryInput }>(
      "/partners/:id/permission-boundaries",
      { schema: { response: { 201: boundarySchema }, params: partnerParams, body: createBody } },
      async (request, reply) => {
        assertCanManagePartner(principalOf(request), request.params.id);
        reply.code(201);
        return createBoundary(context, request.params.id, request.body);
      },
    );

    app.get<{ Params: BoundaryParams }>(
      "/partners/:id/permission-boundaries/:boundary",
      { schema: { response: { 200: boundarySchema }, params: boundaryParams } },
      async (request) => {
        assertCanReadPartner(principalOf(request), request.params.id);
        await getPartner(context, request.params.id);
        return getBoundary(context, request.params.id, request.params.boundary);
      },
    );

    app.put<{ Params: BoundaryParams; Body: BoundaryInput }>(
      "/partners/:id/permission-boundaries/:boundary",
      { schema: { response: { 200: boundaryUpdateSchema }, params: boundaryParams, body: boundaryBody } },
      async (request) => {
        assertCanManagePartner(principalOf(request), request.params.id);
        return updateBoundary(context, request.params.id, request.params.boundary, request.body);
      },
    );

    app.delete<{ Params: BoundaryParams }>(
      "/partners/:id/permission-boundaries/:boundary",
      { schema: { response: { 204: noContent }, params: boundaryParams } },
      async (request, reply) => {
        assertCanManagePartner(principalOf(request), request.params.id);
        await deleteBoundary(context, request.params.id, request.params.boundary);
        return reply.code(204).send();
      },
    );
  };
}
