import type { FastifyInstance } from "fastify";
import { installHttpMetrics } from "../http/metrics.ts";
import { installOpenApi, serializeWithoutFiltering } from "../http/openapi.ts";
import { createHttpServer } from "../http/server.ts";
import type { AuthorityContext } from "./context.ts";
import { routeGroups } from "./routes/index.ts";

/** The authority service's HTTP app: every route group on the shared fastify base. */
export async function createAuthorityApp(context: AuthorityContext): Promise<FastifyInstance> {
  const app = createHttpServer({
    name: "authority",
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
  installHttpMetrics(app, { namespace: "authority" });
  for (const group of routeGroups) await app.register(group(context));
  return app;
}
