import type { FastifyPluginAsync } from "fastify";
import type { AuthorityContext } from "../context.ts";
import { authProfileRoutes } from "./auth-profiles.ts";
import { boundaryRoutes } from "./boundaries.ts";
import { capabilityRoutes } from "./capabilities.ts";
import { diagnosticsRoutes } from "./diagnostics.ts";
import { partnerRoutes } from "./partners.ts";
import { policyRoutes } from "./policies.ts";

/** Every route group of the authority service, one file each. */
export const routeGroups: ReadonlyArray<(context: AuthorityContext) => FastifyPluginAsync> = [
  partnerRoutes,
  capabilityRoutes,
  policyRoutes,
  boundaryRoutes,
  authProfileRoutes,
  diagnosticsRoutes,
];
