/**
 * Management tools: the admin API's domain services (src/admin) offered as MCP tools,
 * chosen by the caller's role. Read-only tools go to `admin`, `partner_admin` and
 * `auditor`; changing tools to `admin` and `partner_admin` only. Partner scope is checked
 * by the same assertions the HTTP routes use, so a partner admin reaches only its own
 * partner, whichever transport it uses.
 */
import type { Tool } from "@modelcontextprotocol/server";
import { listAuthProfiles } from "../admin/auth-profiles.ts";
import { getCapability, listCapabilities } from "../admin/capabilities.ts";
import type { AdminDeps } from "../admin/deps.ts";
import { getPartner, listPartners } from "../admin/partners.ts";
import { getPolicy, listPolicies, revokePolicy } from "../admin/policies.ts";
import type { PageRequest } from "../admin/store-scan.ts";
import { listSubjects, subjectIdIn } from "../admin/subjects.ts";
import { idPatterns } from "../core/ids.ts";
import { compileSchema } from "../core/schema-validator.ts";
import { AuthorityError } from "../errors.ts";
import {
  assertCanManagePartner,
  assertCanReadPartner,
  hasRole,
  type Principal,
  type Role,
} from "../identity/principal.ts";

export interface ManagementCall {
  readonly principal: Principal;
  readonly requestId: string;
}

export interface ManagementTool {
  readonly tool: Tool;
  readonly roles: readonly Role[];
  /** Validates the arguments, checks partner scope, runs the domain service. */
  run(deps: AdminDeps, call: ManagementCall, args: unknown): Promise<Record<string, unknown>>;
}

const READERS: readonly Role[] = ["admin", "partner_admin", "auditor"];
const MANAGERS: readonly Role[] = ["admin", "partner_admin"];

const partnerId = { type: "string", pattern: idPatterns.partner, description: "Partner id." } as const;
const subjectId = {
  type: "string",
  pattern: idPatterns.subjectRef,
  description: "Subject id (or `<partner>~<id>`, its id in the partner's namespace).",
} as const;
const capabilityId = {
  type: "string",
  pattern: idPatterns.capability,
  description: "Capability id.",
} as const;
const paging = {
  limit: { type: "integer", minimum: 1, maximum: 1000, description: "Page size (default 100)." },
  after: { type: "string", maxLength: 256, description: "The `next` cursor of the previous page." },
} as const;

function objectSchema(properties: Record<string, unknown>, required: readonly string[] = []) {
  return {
    type: "object",
    properties,
    ...(required.length > 0 ? { required: [...required] } : {}),
    additionalProperties: false,
  } as const;
}

function pageOf(args: { limit?: number; after?: string }): PageRequest {
  return {
    ...(args.limit === undefined ? {} : { limit: args.limit }),
    ...(args.after === undefined ? {} : { after: args.after }),
  };
}

interface Spec<A> {
  readonly name: string;
  readonly title: string;
  readonly description: string;
  readonly inputSchema: Record<string, unknown>;
  readonly changes: boolean;
  readonly handler: (deps: AdminDeps, call: ManagementCall, args: A) => Promise<Record<string, unknown>>;
}

function define<A>(spec: Spec<A>): ManagementTool {
  const check = compileSchema<A>(spec.inputSchema);
  return {
    roles: spec.changes ? MANAGERS : READERS,
    tool: {
      name: spec.name,
      title: spec.title,
      description: spec.description,
      inputSchema: spec.inputSchema as Tool["inputSchema"],
      annotations: spec.changes
        ? {
            title: spec.title,
            readOnlyHint: false,
            destructiveHint: true,
            idempotentHint: true,
            openWorldHint: false,
          }
        : { title: spec.title, readOnlyHint: true, openWorldHint: false },
    },
    async run(deps, call, args) {
      const checked = check(args ?? {});
      if (!checked.ok) {
        throw new AuthorityError("invalid_request", "The arguments do not match the tool's input schema.", {
          details: { problems: checked.messages },
        });
      }
      return spec.handler(deps, call, checked.value);
    },
  };
}

const tools: readonly ManagementTool[] = [
  define<{ limit?: number; after?: string }>({
    name: "list_partners",
    title: "List partners",
    description:
      "Partners this caller may see: every partner for admins and auditors, its own for a partner admin.",
    inputSchema: objectSchema(paging),
    changes: false,
    async handler(deps, call, args) {
      const { principal } = call;
      if (hasRole(principal, "admin") || hasRole(principal, "auditor")) {
        return { ...(await listPartners(deps, pageOf(args))) };
      }
      if (principal.partnerId === undefined) return { items: [] };
      return { items: [await getPartner(deps, principal.partnerId)] };
    },
  }),
  define<{ partner_id: string }>({
    name: "get_partner",
    title: "Get a partner",
    description: "One partner record.",
    inputSchema: objectSchema({ partner_id: partnerId }, ["partner_id"]),
    changes: false,
    async handler(deps, call, args) {
      assertCanReadPartner(call.principal, args.partner_id);
      return { partner: await getPartner(deps, args.partner_id) };
    },
  }),
  define<{ partner_id: string; limit?: number; after?: string }>({
    name: "list_subjects",
    title: "List subjects",
    description: "The partner's subjects (agents, users, services, external identities).",
    inputSchema: objectSchema({ partner_id: partnerId, ...paging }, ["partner_id"]),
    changes: false,
    async handler(deps, call, args) {
      assertCanReadPartner(call.principal, args.partner_id);
      return { ...(await listSubjects(deps, args.partner_id, pageOf(args))) };
    },
  }),
  define<{ partner_id: string; limit?: number; after?: string }>({
    name: "list_capabilities",
    title: "List capabilities",
    description: "The partner's imported API catalogs with their current catalog version.",
    inputSchema: objectSchema({ partner_id: partnerId, ...paging }, ["partner_id"]),
    changes: false,
    async handler(deps, call, args) {
      assertCanReadPartner(call.principal, args.partner_id);
      return { ...(await listCapabilities(deps, args.partner_id, pageOf(args))) };
    },
  }),
  define<{ partner_id: string; capability_id: string; catalog_version?: string }>({
    name: "get_capability",
    title: "Get a capability",
    description: "One capability with a catalog version (default: the current one) and its operations.",
    inputSchema: objectSchema(
      {
        partner_id: partnerId,
        capability_id: capabilityId,
        catalog_version: { type: "string", pattern: "^[1-9][0-9]{0,14}$", description: "Catalog version." },
      },
      ["partner_id", "capability_id"],
    ),
    changes: false,
    async handler(deps, call, args) {
      assertCanReadPartner(call.principal, args.partner_id);
      return {
        capability: await getCapability(deps, args.partner_id, args.capability_id, args.catalog_version),
      };
    },
  }),
  define<{ partner_id: string; limit?: number; after?: string }>({
    name: "list_auth_profiles",
    title: "List auth profiles",
    description: "The partner's upstream auth profiles (settings only; secrets are never shown).",
    inputSchema: objectSchema({ partner_id: partnerId, ...paging }, ["partner_id"]),
    changes: false,
    async handler(deps, call, args) {
      assertCanReadPartner(call.principal, args.partner_id);
      return { ...(await listAuthProfiles(deps, args.partner_id, pageOf(args))) };
    },
  }),
  define<{ partner_id: string; limit?: number; after?: string }>({
    name: "list_policies",
    title: "List policy records",
    description: "The partner's public policy records (hash, versions, allowlist, expiry, revocation state).",
    inputSchema: objectSchema({ partner_id: partnerId, ...paging }, ["partner_id"]),
    changes: false,
    async handler(deps, call, args) {
      assertCanReadPartner(call.principal, args.partner_id);
      return { ...(await listPolicies(deps, args.partner_id, pageOf(args))) };
    },
  }),
  define<{ partner_id: string; subject_id: string }>({
    name: "get_policy_record",
    title: "Get a policy record",
    description: "A subject's public policy record; never the encrypted artifact.",
    inputSchema: objectSchema({ partner_id: partnerId, subject_id: subjectId }, ["partner_id", "subject_id"]),
    changes: false,
    async handler(deps, call, args) {
      assertCanReadPartner(call.principal, args.partner_id);
      const subject = await subjectIdIn(deps, args.partner_id, args.subject_id);
      return { policy: await getPolicy(deps, args.partner_id, subject) };
    },
  }),
  define<{ partner_id: string; subject_id: string }>({
    name: "revoke_policy",
    title: "Revoke a policy",
    description:
      "Revokes a subject's policy: every later call under it is denied, on every path, whatever a client cached.",
    inputSchema: objectSchema({ partner_id: partnerId, subject_id: subjectId }, ["partner_id", "subject_id"]),
    changes: true,
    async handler(deps, call, args) {
      assertCanManagePartner(call.principal, args.partner_id);
      const actor = { subject: call.principal.subject, requestId: call.requestId };
      const subject = await subjectIdIn(deps, args.partner_id, args.subject_id);
      return { ...(await revokePolicy(deps, actor, args.partner_id, subject)) };
    },
  }),
];

export const managementTools: readonly ManagementTool[] = tools;

export interface ManagementToolSet {
  /** The tools this principal's roles allow, in a fixed order. */
  toolsFor(principal: Principal): ManagementTool[];
  /** The tool, only when this principal may use it; otherwise as unknown as any other name. */
  find(principal: Principal, name: string): ManagementTool | undefined;
}

export function createManagementToolSet(all: readonly ManagementTool[] = managementTools): ManagementToolSet {
  const byName = new Map(all.map((tool) => [tool.tool.name, tool]));
  const allowed = (principal: Principal, tool: ManagementTool): boolean =>
    tool.roles.some((role) => hasRole(principal, role));
  return {
    toolsFor: (principal) => all.filter((tool) => allowed(principal, tool)),
    find(principal, name) {
      const tool = byName.get(name);
      return tool !== undefined && allowed(principal, tool) ? tool : undefined;
    },
  };
}
