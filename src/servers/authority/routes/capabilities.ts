import type { FastifyPluginAsync } from "fastify";
import {
  capabilityDetailSchema,
  capabilityViewSchema,
  importResultSchema,
  listOf,
  previewSchema,
} from "../../../admin/admin-response-schemas.ts";
import {
  idSchemas,
  type PageQuery,
  pageQuerySchema,
  pageRequestOf,
  paramsSchema,
} from "../../../admin/admin-schemas.ts";
import {
  getCapability,
  type ImportInput,
  type ImportOutcome,
  importOpenApi,
  listCapabilities,
  type PreviewInput,
  previewOpenApi,
} from "../../../admin/capabilities.ts";
import type { Actor } from "../../../admin/deps.ts";
import {
  importMcpServer,
  type McpImportInput,
  type McpServerInput,
  previewMcpServer,
} from "../../../admin/mcp-servers.ts";
import { assertCanManagePartner, assertCanReadPartner, assertRole } from "../../../identity/principal.ts";
import { authenticateAll } from "../authenticate.ts";
import type { AuthorityServices } from "../services.ts";

// The document is an object (JSON) or text (JSON or YAML); the catalog module checks the rest.
const documentSchema = { anyOf: [{ type: "object" }, { type: "string", minLength: 1 }] } as const;
const formatSchema = { enum: ["json", "yaml"] } as const;
const profileRefSchema = {
  type: "string",
  minLength: 1,
  maxLength: 256,
  pattern: "^[\\x21-\\x7e]+$",
} as const;
const baseUrlSchema = { type: "string", minLength: 1, maxLength: 2048 } as const;

const previewBody = {
  type: "object",
  additionalProperties: false,
  required: ["document"],
  properties: {
    document: documentSchema,
    format: formatSchema,
    capability_id: idSchemas.capability,
    upstream_base_url: baseUrlSchema,
    auth_profile_ref: profileRefSchema,
  },
} as const;

const importBody = {
  type: "object",
  additionalProperties: false,
  required: ["capability_id", "name", "document", "auth_profile_ref"],
  properties: {
    capability_id: idSchemas.capability,
    name: { type: "string", minLength: 1, maxLength: 256 },
    document: documentSchema,
    format: formatSchema,
    upstream_base_url: baseUrlSchema,
    auth_profile_ref: profileRefSchema,
  },
} as const;

const mcpUrlSchema = { type: "string", minLength: 1, maxLength: 2048 } as const;
// Per tool: the OpenAPI operation extensions (core checks their contents).
const toolRulesSchema = {
  type: "object",
  maxProperties: 2000,
  additionalProperties: {
    type: "object",
    additionalProperties: false,
    properties: {
      "x-authority-constraints": { type: "array", maxItems: 256 },
      "x-authority-redactions": { type: "array", maxItems: 256 },
      "x-authority-auth-profile": profileRefSchema,
    },
  },
} as const;

const mcpPreviewBody = {
  type: "object",
  additionalProperties: false,
  required: ["url"],
  properties: {
    url: mcpUrlSchema,
    capability_id: idSchemas.capability,
    auth_profile_ref: profileRefSchema,
    tool_rules: toolRulesSchema,
  },
} as const;

const mcpImportBody = {
  type: "object",
  additionalProperties: false,
  required: ["capability_id", "name", "url", "auth_profile_ref", "catalog_hash"],
  properties: {
    ...mcpPreviewBody.properties,
    name: { type: "string", minLength: 1, maxLength: 256 },
    catalog_hash: { type: "string", minLength: 1, maxLength: 128 },
  },
} as const;

const partnerParams = paramsSchema({ id: idSchemas.partner });
const capabilityParams = paramsSchema({ id: idSchemas.partner, capability: idSchemas.capability });
const versionQuery = {
  type: "object",
  additionalProperties: false,
  properties: { version: { type: "string", pattern: "^[1-9][0-9]{0,14}$" } },
} as const;

/** OpenAPI preview and import, and the capability catalogs they produce. */
export function capabilityRoutes(context: AuthorityServices): FastifyPluginAsync {
  return async (app) => {
    const principalOf = authenticateAll(app, context);

    app.post<{ Body: PreviewInput }>(
      "/admin/apis/preview-openapi",
      { schema: { response: { 200: previewSchema }, body: previewBody } },
      async (request) => {
        assertRole(principalOf(request), "admin", "partner_admin");
        return previewOpenApi(request.body, context.egress);
      },
    );

    /** An import into the partner's catalog: a new version answers 201, an unchanged one 200. */
    function importRoute<Body>(
      path: string,
      body: object,
      run: (actor: Actor, partnerId: string, input: Body) => Promise<ImportOutcome>,
    ): void {
      app.post<{ Params: { id: string }; Body: Body }>(
        path,
        {
          schema: {
            response: { 200: importResultSchema, 201: importResultSchema },
            params: partnerParams,
            body,
          },
        },
        async (request, reply) => {
          const principal = principalOf(request);
          assertCanManagePartner(principal, request.params.id);
          const actor = { subject: principal.subject, requestId: request.id };
          const outcome = await run(actor, request.params.id, request.body as Body);
          reply.code(outcome.is_new_version ? 201 : 200);
          return outcome;
        },
      );
    }

    importRoute<ImportInput>(
      "/partners/:id/api-specs/import-openapi",
      importBody,
      (actor, partnerId, input) => importOpenApi(context, actor, partnerId, input),
    );

    app.post<{ Params: { id: string }; Body: McpServerInput }>(
      "/partners/:id/api-specs/preview-mcp",
      { schema: { response: { 200: previewSchema }, params: partnerParams, body: mcpPreviewBody } },
      async (request) => {
        // The listing carries the partner's credentials: only who may manage the partner.
        assertCanManagePartner(principalOf(request), request.params.id);
        return previewMcpServer(context, request.params.id, request.body, context.mcp.downstreamTools);
      },
    );

    importRoute<McpImportInput>(
      "/partners/:id/api-specs/import-mcp",
      mcpImportBody,
      (actor, partnerId, input) =>
        importMcpServer(context, actor, partnerId, input, context.mcp.downstreamTools),
    );

    app.get<{ Params: { id: string }; Querystring: PageQuery }>(
      "/partners/:id/capabilities",
      {
        schema: {
          response: { 200: listOf(capabilityViewSchema) },
          params: partnerParams,
          querystring: pageQuerySchema,
        },
      },
      async (request) => {
        assertCanReadPartner(principalOf(request), request.params.id);
        return listCapabilities(context, request.params.id, pageRequestOf(request.query));
      },
    );

    app.get<{ Params: { id: string; capability: string }; Querystring: { version?: string } }>(
      "/partners/:id/capabilities/:capability",
      {
        schema: {
          response: { 200: capabilityDetailSchema },
          params: capabilityParams,
          querystring: versionQuery,
        },
      },
      async (request) => {
        assertCanReadPartner(principalOf(request), request.params.id);
        return getCapability(context, request.params.id, request.params.capability, request.query.version);
      },
    );
  };
}
