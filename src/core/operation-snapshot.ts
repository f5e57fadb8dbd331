import { CoreError } from "./core-error.ts";
import type { HttpMethod } from "./http-method.ts";
import type { ParameterConstraint } from "./parameter-constraints.ts";
import { isValidPathTemplate } from "./path-template.ts";
import type { RedactionRule } from "./redaction.ts";
import { compileSchema } from "./schema-validator.ts";
import { operationSnapshotSchema } from "./schemas/operation-snapshot.schema.ts";

/** A JSON Schema document, kept as data (the execute layer compiles it). */
export type JsonSchemaObject = Readonly<Record<string, unknown>>;

/** Schemas of one operation's inputs, by location. path/query/headers are object schemas. */
export interface OperationInputSchema {
  readonly path: JsonSchemaObject;
  readonly query: JsonSchemaObject;
  readonly headers: JsonSchemaObject;
  /** Null when the operation takes no JSON body. */
  readonly body: JsonSchemaObject | null;
}

/** The hints a downstream MCP tool declared, as reviewed (booleans and a title; nothing executable). */
export interface McpToolAnnotations {
  readonly title?: string;
  readonly readOnlyHint?: boolean;
  readonly destructiveHint?: boolean;
  readonly idempotentHint?: boolean;
  readonly openWorldHint?: boolean;
}

/**
 * Marks a snapshot as one tool of a downstream MCP server (docs/mcp.md, "Downstream MCP
 * servers"): `upstream_url_template` is the server's Streamable HTTP endpoint, `path` is
 * "/tools/<name>", `input_schema.body` the tool's input schema (its arguments) and
 * `response_schema` its output schema. Only the MCP transport calls such a tool (with
 * `tools/call`); every HTTP sender refuses it.
 */
export interface McpToolReference {
  readonly name: string;
  readonly annotations?: McpToolAnnotations;
}

/**
 * One operation as reviewed when a capability was imported or assigned. Policies carry
 * copies of these; execution uses only what a verified snapshot says (upstream URL,
 * auth profile, rules), never what the caller sends.
 */
export interface OperationSnapshot {
  readonly operation_id: string;
  /** Upper case. */
  readonly method: HttpMethod;
  /** OpenAPI path template, braces kept ("/users/{id}"). */
  readonly path: string;
  readonly summary?: string;
  readonly description?: string;
  readonly input_schema: OperationInputSchema;
  readonly response_schema: JsonSchemaObject | null;
  /** Absolute http(s) URL with the same path parameters, e.g. "https://api.example.com/v1/users/{id}". */
  readonly upstream_url_template: string;
  readonly auth_profile_ref: string;
  readonly response_rules: readonly RedactionRule[];
  readonly parameter_constraints: readonly ParameterConstraint[];
  /** Present only for a downstream MCP server's tool. */
  readonly mcp_tool?: McpToolReference;
}

/** The path template of a downstream MCP tool: its permission ID is `<capability>:post:/tools/<name>`. */
export function mcpToolPath(name: string): string {
  return `/tools/${name}`;
}

/** A downstream MCP server's tool (called with `tools/call`, never as an HTTP request). */
export function isMcpToolSnapshot(
  snapshot: Pick<OperationSnapshot, "mcp_tool">,
): snapshot is Pick<OperationSnapshot, "mcp_tool"> & { readonly mcp_tool: McpToolReference } {
  return snapshot.mcp_tool !== undefined;
}

export class OperationSnapshotError extends CoreError<"operation_snapshot_invalid"> {
  readonly messages: readonly string[];

  constructor(messages: readonly string[]) {
    super("operation_snapshot_invalid", `operation snapshot is invalid: ${messages.join("; ")}`);
    this.messages = messages;
  }
}

const checkSnapshot = compileSchema<OperationSnapshot>(operationSnapshotSchema);

/** Problems beyond the schema: the path must be a valid template. Empty when fine. */
export function operationSnapshotProblems(snapshot: OperationSnapshot, where = ""): string[] {
  const problems = isValidPathTemplate(snapshot.path)
    ? []
    : [`${where}/path is not a valid OpenAPI path template`];
  const tool = snapshot.mcp_tool;
  if (tool !== undefined && (snapshot.method !== "POST" || snapshot.path !== mcpToolPath(tool.name))) {
    problems.push(`${where}/mcp_tool must be a POST to /tools/<its name>`);
  }
  if (tool !== undefined && /[{}]/.test(snapshot.upstream_url_template)) {
    problems.push(`${where}/upstream_url_template of an MCP tool takes no parameters`);
  }
  return problems;
}

/** Validates an operation snapshot; throws OperationSnapshotError with safe messages. */
export function validateOperationSnapshot(value: unknown): OperationSnapshot {
  const result = checkSnapshot(value);
  if (!result.ok) throw new OperationSnapshotError(result.messages);
  const problems = operationSnapshotProblems(result.value);
  if (problems.length > 0) throw new OperationSnapshotError(problems);
  return result.value;
}

/** The JSON Schema (2020-12) of an operation snapshot, as a standalone document. */
export const operationSnapshotJsonSchema = {
  $schema: "https://json-schema.org/draft/2020-12/schema",
  $id: "urn:authority:schema:operation-snapshot",
  ...operationSnapshotSchema,
} as const;
