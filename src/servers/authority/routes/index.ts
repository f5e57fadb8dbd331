import type { FastifyPluginAsync } from "fastify";
import type { AuthorityContext } from "../context.ts";

/** Every route group of the authority service, one file each. */
export const routeGroups: ReadonlyArray<(context: AuthorityContext) => FastifyPluginAsync> = [];
