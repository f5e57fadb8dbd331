/**
 * Downstream MCP servers as capabilities: an admin previews a server's tools (listed through
 * the egress gate with the partner's auth profile), reviews them — every description and
 * schema, and the diff against the capability's current catalog — and imports exactly what it
 * reviewed: the import lists the tools again and stores them only when they hash to the
 * reviewed `catalog_hash`, so a server that changes its tools between review and import gets
 * nothing stored (409). A later change of the server's tools is a new catalog version, made
 * only by another reviewed import, and reaches a subject only when it is assigned again.
 */
import { buildCatalogVersion, type CatalogDiff } from "../catalog/catalog-version.ts";
import { importMcpTools, McpImportError, type McpToolRules } from "../catalog/mcp-import.ts";
import { hashCanonical } from "../core/canonical-json.ts";
import type { OperationSnapshot } from "../core/operation-snapshot.ts";
import { buildPermissionId, type PermissionId } from "../core/permission-id.ts";
import { AuthorityError } from "../errors.ts";
import {
  checkUpstreams,
  currentCatalogVersion,
  type ImportOutcome,
  storeCatalogImport,
} from "./capabilities.ts";
import type { Actor, AdminDeps } from "./deps.ts";
import { getPartner } from "./partners.ts";

/** What listing a downstream server gave (src/mcp/downstream-client.ts). */
export interface DownstreamToolListing {
  readonly tools: readonly unknown[];
  readonly server: { readonly name?: string; readonly version?: string };
}

/**
 * Lists a downstream server's tools with the partner's auth profile, through the egress gate.
 * Throws AuthorityError for a server that cannot be listed (never its own words).
 */
export type DownstreamToolLister = (request: {
  readonly partnerId: string;
  readonly url: string;
  readonly authProfileRef: string;
}) => Promise<DownstreamToolListing>;

export interface McpServerInput {
  /** The server's Streamable HTTP endpoint. */
  readonly url: string;
  /** Default "none" for a preview. */
  readonly auth_profile_ref?: string;
  /** The admin's rules by tool name: x-authority-constraints, -redactions, -auth-profile. */
  readonly tool_rules?: Readonly<Record<string, McpToolRules>>;
  /** Diff against this capability's current catalog (preview) / the capability to import into. */
  readonly capability_id?: string;
}

export interface McpImportInput extends McpServerInput {
  readonly capability_id: string;
  readonly name: string;
  readonly auth_profile_ref: string;
  /** The `catalog_hash` of the reviewed preview: the import stores only exactly that. */
  readonly catalog_hash: string;
}

export interface ReviewedTool {
  readonly permission_id: PermissionId;
  readonly tool: string;
  readonly summary?: string;
  readonly description?: string;
  readonly input_schema: unknown;
  readonly output_schema: unknown;
  readonly auth_profile_ref: string;
  readonly parameter_constraints: OperationSnapshot["parameter_constraints"];
  readonly response_rules: OperationSnapshot["response_rules"];
}

export interface McpPreview {
  readonly url: string;
  readonly server: DownstreamToolListing["server"];
  readonly tool_count: number;
  readonly tools: readonly ReviewedTool[];
  /** What the import must name to store exactly these snapshots. */
  readonly catalog_hash: string;
  /** The version an import would store, and its diff against the current one. */
  readonly catalog_version: string;
  readonly previous_version: string | null;
  readonly diff: CatalogDiff;
  /** For each changed tool, the snapshot fields that differ (description, input_schema, …). */
  readonly changes: readonly { readonly permission_id: PermissionId; readonly fields: readonly string[] }[];
  readonly warnings: readonly string[];
}

const MAX_URL_LENGTH = 2048;

/** An endpoint an admin may name: absolute http(s), no credentials, no fragment, no template braces. */
function checkServerUrl(raw: string): string {
  const bad = (message: string) =>
    new AuthorityError("invalid_request", message, { details: { reason: "invalid_mcp_server_url" } });
  if (typeof raw !== "string" || raw.length === 0 || raw.length > MAX_URL_LENGTH || /[{}\s]/.test(raw))
    throw bad("url must be an absolute http(s) URL of at most 2048 characters.");
  if (!URL.canParse(raw)) throw bad("url must be an absolute http(s) URL.");
  const url = new URL(raw);
  if (url.protocol !== "http:" && url.protocol !== "https:") throw bad("url must use http or https.");
  if (url.username !== "" || url.password !== "") throw bad("url must not carry credentials.");
  if (url.hash !== "") throw bad("url must not have a fragment.");
  return url.toString();
}

function reviewedTools(capabilityId: string, operations: readonly OperationSnapshot[]): ReviewedTool[] {
  return operations.map((op) => ({
    permission_id: buildPermissionId(capabilityId, op.method, op.path),
    tool: op.mcp_tool?.name ?? op.operation_id,
    ...(op.summary === undefined ? {} : { summary: op.summary }),
    ...(op.description === undefined ? {} : { description: op.description }),
    input_schema: op.input_schema.body,
    output_schema: op.response_schema,
    auth_profile_ref: op.auth_profile_ref,
    parameter_constraints: op.parameter_constraints,
    response_rules: op.response_rules,
  }));
}

/** Which fields of each changed snapshot differ: what the reviewer must read again. */
function changedFields(
  capabilityId: string,
  before: readonly OperationSnapshot[],
  after: readonly OperationSnapshot[],
  changed: readonly PermissionId[],
): McpPreview["changes"] {
  const byId = (ops: readonly OperationSnapshot[]) =>
    new Map(ops.map((op) => [buildPermissionId(capabilityId, op.method, op.path), op]));
  const old = byId(before);
  const now = byId(after);
  return changed.map((permissionId) => {
    const a = (old.get(permissionId) ?? {}) as Record<string, unknown>;
    const b = (now.get(permissionId) ?? {}) as Record<string, unknown>;
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
    const fields = keys.filter((key) => hashCanonical(a[key] ?? null) !== hashCanonical(b[key] ?? null));
    return { permission_id: permissionId, fields };
  });
}

interface Listed {
  readonly url: string;
  readonly listing: DownstreamToolListing;
  readonly operations: readonly OperationSnapshot[];
  readonly warnings: readonly string[];
}

async function listAndConvert(
  deps: AdminDeps,
  partnerId: string,
  input: McpServerInput,
  capabilityId: string,
  lister: DownstreamToolLister,
): Promise<Listed> {
  await getPartner(deps, partnerId);
  const url = checkServerUrl(input.url);
  const authProfileRef = input.auth_profile_ref ?? "none";
  // The origin first, as for an OpenAPI upstream (names resolved now); every connection again.
  const egressWarnings = await checkUpstreams(
    [{ upstream_url_template: url } as OperationSnapshot],
    deps.egress,
  );
  const listing = await lister({ partnerId, url, authProfileRef });
  try {
    const result = importMcpTools(listing.tools, {
      capabilityId,
      authProfileRef,
      downstreamUrl: url,
      ...(input.tool_rules === undefined ? {} : { toolRules: input.tool_rules }),
    });
    return { url, listing, operations: result.operations, warnings: [...result.warnings, ...egressWarnings] };
  } catch (error) {
    if (error instanceof McpImportError) {
      throw new AuthorityError(
        "invalid_request",
        "The downstream MCP server's tool list cannot be imported.",
        {
          details: { reason: error.code, problems: error.problems },
        },
      );
    }
    throw error;
  }
}

/** What importing the server now would store, and how it differs from the current catalog; writes nothing. */
export async function previewMcpServer(
  deps: AdminDeps,
  partnerId: string,
  input: McpServerInput,
  lister: DownstreamToolLister,
): Promise<McpPreview> {
  const capabilityId = input.capability_id ?? "preview";
  const { url, listing, operations, warnings } = await listAndConvert(
    deps,
    partnerId,
    input,
    capabilityId,
    lister,
  );
  const { version: previous } =
    input.capability_id === undefined ? {} : await currentCatalogVersion(deps.store, partnerId, capabilityId);
  const version = buildCatalogVersion(previous, { capability_id: capabilityId, operations });
  return {
    url,
    server: listing.server,
    tool_count: operations.length,
    tools: reviewedTools(capabilityId, operations),
    catalog_hash: version.catalog_hash,
    catalog_version: version.catalog_version,
    previous_version: version.previous_version,
    diff: version.diff,
    changes: changedFields(capabilityId, previous?.operations ?? [], operations, version.diff.changed),
    warnings,
  };
}

/**
 * Imports the server's tools as the capability's next catalog version — only when they are
 * exactly what was reviewed (`catalog_hash` of the preview); otherwise 409 with the new hash
 * and diff, and nothing stored.
 */
export async function importMcpServer(
  deps: AdminDeps,
  actor: Actor,
  partnerId: string,
  input: McpImportInput,
  lister: DownstreamToolLister,
): Promise<ImportOutcome> {
  const { url, listing, operations, warnings } = await listAndConvert(
    deps,
    partnerId,
    input,
    input.capability_id,
    lister,
  );
  const { version: previous } = await currentCatalogVersion(deps.store, partnerId, input.capability_id);
  const version = buildCatalogVersion(previous, { capability_id: input.capability_id, operations });
  if (version.catalog_hash !== input.catalog_hash) {
    throw new AuthorityError(
      "conflict",
      "The server's tools are not the ones reviewed; preview them again.",
      {
        details: { reason: "catalog_changed", catalog_hash: version.catalog_hash, diff: version.diff },
      },
    );
  }
  return storeCatalogImport(deps, actor, partnerId, {
    capability_id: input.capability_id,
    name: input.name,
    auth_profile_ref: input.auth_profile_ref,
    upstream_base_url: url,
    // A listed server has no OpenAPI version: "mcp" says where the catalog came from.
    source: {
      openapi: "mcp",
      title: listing.server.name ?? new URL(url).host,
      api_version: listing.server.version ?? "",
    },
    operations,
    warnings,
  });
}
