import type { FastifyPluginAsync } from "fastify";
import type { AuthorityServices } from "../services.ts";
import { auditRoutes } from "./audit.ts";
import { authProfileRoutes } from "./auth-profiles.ts";
import { authorizeRoutes } from "./authorize.ts";
import { bindingRoutes } from "./bindings.ts";
import { boundaryRoutes } from "./boundaries.ts";
import { brokerRoutes } from "./broker.ts";
import { capabilityRoutes } from "./capabilities.ts";
import { diagnosticsRoutes } from "./diagnostics.ts";
import { explainRoutes } from "./explain.ts";
import { invokeRoutes } from "./invoke.ts";
import { mcpRoutes } from "./mcp.ts";
import { partnerRoutes } from "./partners.ts";
import { policyRoutes } from "./policies.ts";
import { shadowRoutes } from "./shadow.ts";
import { sidecarRoutes } from "./sidecar.ts";
import { verifyRoutes } from "./verify.ts";
import { workloadTokenRoutes } from "./workload-token.ts";

/** Every route group of the authority service, one file each; each takes what it uses from the services. */
export const routeGroups: ReadonlyArray<(services: AuthorityServices) => FastifyPluginAsync> = [
  authorizeRoutes,
  auditRoutes,
  partnerRoutes,
  capabilityRoutes,
  policyRoutes,
  shadowRoutes,
  boundaryRoutes,
  authProfileRoutes,
  diagnosticsRoutes,
  explainRoutes,
  sidecarRoutes,
  mcpRoutes,
  bindingRoutes,
  workloadTokenRoutes,
  invokeRoutes,
  verifyRoutes,
  brokerRoutes,
];
