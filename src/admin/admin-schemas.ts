/**
 * JSON Schemas of the admin API's shared request pieces (ids in paths, paging). Plain
 * data, so route files and docs use the same rules as the domain services.
 */
import { idPatterns } from "../core/ids.ts";
import type { PageRequest } from "./store-scan.ts";

const id = (pattern: string) => ({ type: "string", pattern }) as const;

export const idSchemas = {
  partner: id(idPatterns.partner),
  subject: id(idPatterns.subject),
  /** A subject named in a path: its id, or `<partner>~<id>` (a partner's namespace). */
  subjectRef: id(idPatterns.subjectRef),
  local: id(idPatterns.local),
  capability: id(idPatterns.capability),
} as const;

/** Query strings arrive as text (the servers do not coerce types), so limit is a digit string. */
export const pageQuerySchema = {
  type: "object",
  additionalProperties: false,
  properties: {
    limit: { type: "string", pattern: "^(?:[1-9][0-9]{0,2}|1000)$" },
    after: { type: "string", minLength: 1, maxLength: 256 },
  },
} as const;

export interface PageQuery {
  readonly limit?: string;
  readonly after?: string;
}

export function pageRequestOf(query: PageQuery): PageRequest {
  return {
    ...(query.limit === undefined ? {} : { limit: Number(query.limit) }),
    ...(query.after === undefined ? {} : { after: query.after }),
  };
}

export const paramsSchema = (properties: Record<string, unknown>) =>
  ({
    type: "object",
    additionalProperties: false,
    required: Object.keys(properties),
    properties,
  }) as const;
