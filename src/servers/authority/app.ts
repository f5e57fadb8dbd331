import type { FastifyInstance } from "fastify";
import type { Registry } from "prom-client";
import { installHttpMetrics } from "../http/metrics.ts";
import { installOpenApi, serializeWithoutFiltering } from "../http/openapi.ts";
import { createHttpServer } from "../http/server.ts";
import { routeGroups } from "./routes/index.ts";
import type { AuthorityServices } from "./services.ts";

/**
 * The authority service's HTTP app: every route group on the shared fastify base, each given
 * the services the composition root built (services.ts); the app builds none of its own.
 */
export async function createAuthorityApp(
  context: AuthorityServices,
  /** Where /metrics reads from; the process's other series (retention) register there too. */
  registry: Registry,
): Promise<FastifyInstance> {
  const app = createHttpServer({
    logger: context.logger,
    bodyLimit: context.config.bodyLimitBytes,
  });
  app.addHook("onSend", async (_request, reply) => {
    // 401s name the scheme, as RFC 6750 asks.
    if (reply.statusCode === 401 && !reply.hasHeader("www-authenticate")) {
      reply.header("www-authenticate", `Bearer realm="authority"`);
    }
  });
  // Response schemas describe bodies (and the tests check them); they never drop a field.
  serializeWithoutFiltering(app);
  await installOpenApi(app, {
    title: "Authority service API",
    version: "0.1.0",
    description:
      "Admin, runtime (authorize, invoke, verify, broker, MCP) and sidecar API of the authority service. docs/admin-api.md.",
    securitySchemes: { bearer: { type: "http", scheme: "bearer", bearerFormat: "JWT" } },
    security: [{ bearer: [] }],
  });
  installHttpMetrics(app, { namespace: "authority", registry });
  for (const group of routeGroups) await app.register(group(context));
  return app;
}
