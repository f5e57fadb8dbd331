import type { FastifyPluginAsync } from "fastify";
import { diagnosticsSchema } from "../../../admin/admin-response-schemas.ts";
import { collectDiagnostics } from "../../../admin/diagnostics.ts";
import { displayUrl, oauthFacts } from "../../../admin/platform-diagnostics.ts";
import { assertRole } from "../../../identity/principal.ts";
import { mcpFacts } from "../../../mcp/diagnostics-facts.ts";
import { requirePrincipal } from "../authenticate.ts";
import type { AuthorityContext } from "../context.ts";

/**
 * GET /admin/diagnostics (admin or auditor): store, counts, configuration facts, MCP and
 * OAuth configuration, platform resources (probed), warnings.
 */
export function diagnosticsRoutes(context: AuthorityContext): FastifyPluginAsync {
  return async (app) => {
    app.get("/admin/diagnostics", { schema: { response: { 200: diagnosticsSchema } } }, async (request) => {
      assertRole(await requirePrincipal(request, context), "admin", "auditor");
      const config = context.config;
      return collectDiagnostics(
        context,
        {
          issuer: displayUrl(config.issuer) ?? "(invalid)",
          audience: config.audience,
          public_url: displayUrl(config.publicUrl) ?? "(invalid)",
          service_identity: config.serviceIdentity,
          key_custody: config.policyProtection.mode,
          body_limit_bytes: config.bodyLimitBytes,
          parameter_scoping: {
            enabled: config.parameterScoping.enabled,
            partner_allowlist: config.parameterScoping.partnerAllowlist,
          },
        },
        {
          mcp: mcpFacts(config),
          oauth: oauthFacts(config, context.platform, context.verifier.jwksStatus?.bind(context.verifier)),
          endpoints: context.platform,
        },
      );
    });
  };
}
