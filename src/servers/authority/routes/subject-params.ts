import type { FastifyInstance } from "fastify";
import type { AdminDeps } from "../../../admin/deps.ts";
import { subjectIdIn } from "../../../admin/subjects.ts";

/**
 * A subject named in a path (`:subject` beside the partner's `:id`) is the partner's own when
 * it has one of that id in its namespace (`<partner>~<id>`, decision 2503): every handler of
 * the group sees the stored id, whichever of the two names the caller used.
 */
export function resolveSubjectParams(app: FastifyInstance, deps: Pick<AdminDeps, "store">): void {
  app.addHook("preHandler", async (request) => {
    const params = request.params as { id?: string; subject?: string };
    if (params.id !== undefined && params.subject !== undefined) {
      params.subject = await subjectIdIn(deps, params.id, params.subject);
    }
  });
}
