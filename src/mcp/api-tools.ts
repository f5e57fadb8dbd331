/**
 * The imported-API tools of one verified policy document: one tool per allowed operation
 * snapshot, named by `toolNameFor`, plus the index from tool name back to the capability
 * and permission it stands for. Pure: a cached index describes a document, it never
 * grants anything — every call decides again on a freshly loaded policy.
 */
import type { Tool } from "@modelcontextprotocol/server";
import type { HttpMethod } from "../core/http-method.ts";
import { isMcpToolSnapshot, type OperationSnapshot } from "../core/operation-snapshot.ts";
import { hasConstraints } from "../core/parameter-constraints.ts";
import { buildPermissionId, type PermissionId } from "../core/permission-id.ts";
import type { PolicyDocument } from "../core/policy-document.ts";
import { toolNameFor } from "../core/tool-name.ts";
import { toolInputSchema } from "./tool-input-schema.ts";

/** What a tool name stands for; enough to run `decide()` with the snapshot's method and template. */
export interface ApiToolTarget {
  readonly name: string;
  readonly capabilityId: string;
  readonly permissionId: PermissionId;
  readonly method: HttpMethod;
  /** The snapshot's path template, braces kept. */
  readonly pathTemplate: string;
  /**
   * `api`: an imported HTTP operation, called with `{ path, query, headers, body }` and answered
   * with `{ status, headers, body, redaction_events }`. `downstream_mcp`: a downstream MCP
   * server's tool, called with the tool's own arguments and answered with its (redacted) result.
   */
  readonly kind: "api" | "downstream_mcp";
  /** The snapshot carries signed constraints: listed only where the rollout covers the partner. */
  readonly constrained: boolean;
}

export interface ApiToolIndex {
  readonly tools: readonly Tool[];
  /**
   * The tools without signed constraints, in the same order: what is listed outside the
   * parameter-scoping rollout. Built with the index (once per policy version), not per listing.
   */
  readonly unconstrainedTools: readonly Tool[];
  readonly byName: ReadonlyMap<string, ApiToolTarget>;
  /** Permissions left out because their name collided with an earlier tool (fail closed; logged). */
  readonly collisions: readonly PermissionId[];
}

/** Longest description text taken from a snapshot (the method and path line is added after it). */
export const MAX_DESCRIPTION_LENGTH = 1024;

const READ_ONLY: ReadonlySet<string> = new Set(["GET", "HEAD", "OPTIONS"]);
const IDEMPOTENT: ReadonlySet<string> = new Set(["GET", "HEAD", "OPTIONS", "PUT", "DELETE"]);

/**
 * The shape of every API tool result's `structuredContent`. Kept small (it is repeated in
 * every listed tool) and given one `$id`, so a client compiles it once for all tools.
 */
export const apiToolOutputSchema = {
  $id: "urn:authority:mcp:api-tool-result",
  type: "object",
  properties: {
    status: { type: "integer" },
    headers: { type: "object" },
    body: {},
    redaction_events: { type: "array", items: { type: "object" } },
  },
  required: ["status", "headers", "body", "redaction_events"],
} as const;

function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

export function toolDescription(snapshot: OperationSnapshot): string {
  const summary = snapshot.summary?.trim() ?? "";
  const description = snapshot.description?.trim() ?? "";
  const parts = [summary, description].filter((part, i, all) => part !== "" && all.indexOf(part) === i);
  const line = `${snapshot.method} ${snapshot.path}`;
  const text = clip(parts.join("\n\n"), MAX_DESCRIPTION_LENGTH);
  return text === "" ? line : `${text}\n\n${line}`;
}

export function toolAnnotations(snapshot: OperationSnapshot): NonNullable<Tool["annotations"]> {
  const method = snapshot.method;
  const readOnly = READ_ONLY.has(method);
  const title = snapshot.summary?.trim();
  return {
    ...(title ? { title: clip(title, 200) } : {}),
    readOnlyHint: readOnly,
    ...(readOnly ? {} : { destructiveHint: method === "DELETE" }),
    idempotentHint: IDEMPOTENT.has(method),
    openWorldHint: true,
  };
}

/**
 * A downstream MCP tool as reviewed: its own input and output schemas, description, title
 * and hints from the snapshot — never what the downstream says now.
 */
function downstreamToolFor(name: string, snapshot: OperationSnapshot): Tool {
  const reviewed = snapshot.mcp_tool?.annotations ?? {};
  const title = snapshot.summary?.trim();
  const description = snapshot.description?.trim() ?? "";
  return {
    name,
    ...(title ? { title: clip(title, 200) } : {}),
    description: description === "" ? (title ?? name) : clip(description, MAX_DESCRIPTION_LENGTH),
    inputSchema: (snapshot.input_schema.body ?? { type: "object" }) as Tool["inputSchema"],
    ...(snapshot.response_schema === null
      ? {}
      : { outputSchema: snapshot.response_schema as Tool["outputSchema"] }),
    annotations: { ...reviewed, ...(title ? { title: clip(title, 200) } : {}) },
  };
}

/** A downstream tool keeps its reviewed name when it fits the hosted names and no earlier tool has it. */
const PLAIN_NAME = /^[A-Za-z0-9_.-]{1,64}$/; // at most MAX_TOOL_NAME_LENGTH
/**
 * The shape of a hashed name (toolNameFor: "_" + TOOL_NAME_HASH_LENGTH hex): kept for those, so a
 * downstream can never take an API tool's name, whichever of them the document lists first.
 */
const HASHED_NAME = /_[0-9a-f]{8}$/;
const keepsPlainName = (name: string): boolean => PLAIN_NAME.test(name) && !HASHED_NAME.test(name);

function toolFor(name: string, snapshot: OperationSnapshot): Tool {
  const annotations = toolAnnotations(snapshot);
  return {
    name,
    ...(annotations.title === undefined ? {} : { title: annotations.title }),
    description: toolDescription(snapshot),
    inputSchema: toolInputSchema(snapshot.input_schema) as Tool["inputSchema"],
    outputSchema: apiToolOutputSchema as unknown as Tool["outputSchema"],
    annotations,
  };
}

function permissionOf(capabilityId: string, snapshot: OperationSnapshot): PermissionId | undefined {
  try {
    return buildPermissionId(capabilityId, snapshot.method, snapshot.path);
  } catch {
    return undefined;
  }
}

/**
 * Tools for every operation snapshot whose permission ID the document allows, in document
 * order (capabilities sorted by id, operations as reviewed). Whether the document may be
 * used at all (verified, active, this subject's) is the caller's check.
 */
export function buildApiToolIndex(
  document: PolicyDocument,
  reserved: ReadonlySet<string> = new Set(),
): ApiToolIndex {
  const tools: Tool[] = [];
  const unconstrainedTools: Tool[] = [];
  const byName = new Map<string, ApiToolTarget>();
  const collisions: PermissionId[] = [];
  const seen = new Set<string>();
  for (const entry of document.apis) {
    const allowed = new Set<string>(entry.allowed_permission_ids);
    for (const snapshot of entry.operations) {
      const permissionId = permissionOf(entry.capability_id, snapshot);
      if (permissionId === undefined || !allowed.has(permissionId) || seen.has(permissionId)) continue;
      seen.add(permissionId);
      const downstream = isMcpToolSnapshot(snapshot);
      const taken = (candidate: string) => byName.has(candidate) || reserved.has(candidate);
      let name = toolNameFor(permissionId, snapshot.operation_id);
      if (downstream && keepsPlainName(snapshot.mcp_tool.name) && !taken(snapshot.mcp_tool.name))
        name = snapshot.mcp_tool.name;
      // Two bases cut to the same text with the same 32-bit suffix: try the path-derived base.
      if (taken(name)) name = toolNameFor(permissionId);
      if (taken(name)) {
        collisions.push(permissionId);
        continue;
      }
      const constrained = hasConstraints(snapshot.parameter_constraints);
      byName.set(name, {
        name,
        capabilityId: entry.capability_id,
        permissionId,
        method: snapshot.method,
        pathTemplate: snapshot.path,
        kind: downstream ? "downstream_mcp" : "api",
        constrained,
      });
      const tool = downstream ? downstreamToolFor(name, snapshot) : toolFor(name, snapshot);
      tools.push(tool);
      if (!constrained) unconstrainedTools.push(tool);
    }
  }
  return { tools, unconstrainedTools, byName, collisions };
}
