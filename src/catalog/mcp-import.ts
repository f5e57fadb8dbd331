/**
 * A downstream MCP server's tool list → operation snapshots (pure; the fetch is the admin
 * layer's, through the egress gate). One snapshot per tool, exactly as an OpenAPI operation
 * becomes one: `POST /tools/<name>`, the tool's input schema as the body schema (its
 * arguments), its output schema as the response schema, the server's URL as the upstream,
 * and the admin's rules for the tool (`x-authority-constraints`, `x-authority-redactions`,
 * `x-authority-auth-profile`, the same extensions an OpenAPI operation carries) — never
 * anything the downstream says about itself beyond name, title, description, schemas and
 * annotation hints. Schemas go through the same converter and checks as OpenAPI schemas
 * (linear-time patterns, node budgets, compiled with the snapshot ajv).
 */
import { type OperationSnapshot, validateOperationSnapshot } from "../core/operation-snapshot.ts";
import { ImportOptionsError } from "./errors.ts";
import {
  EXTENSION_AUTH_PROFILE,
  EXTENSION_CONSTRAINTS,
  EXTENSION_REDACTIONS,
  isValidAuthProfileRef,
  type Problem,
  readAuthProfile,
  readConstraints,
  readRedactions,
} from "./extensions.ts";
import { deepFreeze } from "./freeze.ts";
import { appendPointer, isRecord } from "./json-pointer.ts";
import { importLimits } from "./limits.ts";
import { createSnapshotAjv } from "./schema-ajv.ts";
import { type JsonSchema, NodeBudget, SchemaBuilder, SchemaDepthError } from "./schema-convert.ts";

/** What an admin adds to one tool: the same extensions an OpenAPI operation carries. */
export interface McpToolRules {
  readonly [EXTENSION_CONSTRAINTS]?: unknown;
  readonly [EXTENSION_REDACTIONS]?: unknown;
  readonly [EXTENSION_AUTH_PROFILE]?: unknown;
}

export interface McpImportOptions {
  readonly capabilityId: string;
  readonly authProfileRef: string;
  /** The server's Streamable HTTP endpoint (already checked: absolute http(s), no credentials). */
  readonly downstreamUrl: string;
  /** Rules by tool name; a name the server does not list is a problem. */
  readonly toolRules?: Readonly<Record<string, McpToolRules>>;
}

export interface McpImportResult {
  readonly operations: readonly OperationSnapshot[];
  readonly warnings: readonly string[];
}

const PUBLIC_MESSAGE = "The downstream MCP server's tool list cannot be imported.";

/** A tool list that cannot become a catalog: every problem, at its pointer into `{ tools }`. */
export class McpImportError extends Error {
  readonly code = "invalid_mcp_tools";
  readonly problems: readonly Problem[];

  constructor(problems: readonly Problem[]) {
    super(`${PUBLIC_MESSAGE} ${problems.length} problem(s).`);
    this.name = "McpImportError";
    this.problems = problems.slice(0, importLimits.maxProblems);
  }
}

/** Longest description kept, as for OpenAPI operations (core's snapshot limit). */
const MAX_DESCRIPTION = 65_536;
const MAX_SUMMARY = 4096;
const JSON_SCHEMA_2020_12 = "https://json-schema.org/draft/2020-12/schema";
/** MCP_TOOL_NAME_PATTERN (core's snapshot schema) as a literal. */
const TOOL_NAME = /^[A-Za-z0-9_.-]*[A-Za-z0-9_-][A-Za-z0-9_.-]*$/;
const EMPTY_PART = { type: "object", properties: {}, additionalProperties: false } as const;
const ANNOTATION_HINTS = ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"] as const;

function cut(text: string, max: number, what: string, warnings: string[]): string {
  if (text.length <= max) return text;
  warnings.push(`${what} was cut to ${max} characters`);
  return text.slice(0, max);
}

function checkOptions(options: McpImportOptions): void {
  if (typeof options?.capabilityId !== "string" || options.capabilityId === "")
    throw new ImportOptionsError("capabilityId is required");
  if (!isValidAuthProfileRef(options.authProfileRef))
    throw new ImportOptionsError("authProfileRef must be 1-256 printable characters without spaces");
  if (typeof options.downstreamUrl !== "string" || !URL.canParse(options.downstreamUrl))
    throw new ImportOptionsError("downstreamUrl must be an absolute URL");
}

interface SchemaOutcome {
  readonly schema: JsonSchema | null;
  readonly problems: Problem[];
}

/**
 * One tool schema through the OpenAPI 3.1 converter (JSON Schema 2020-12, its own `$defs`
 * resolved against itself), then compiled as every snapshot schema is. A root `$schema` of
 * 2020-12 is kept (MCP's default dialect, and what clients expect to see); any other
 * dialect is refused rather than read as 2020-12.
 */
interface ImportRun {
  readonly budget: NodeBudget;
  readonly warnings: string[];
  /** One compiler for the whole import (building one costs more than compiling a schema). */
  readonly ajv: ReturnType<typeof createSnapshotAjv>;
}

function convertToolSchema(
  raw: unknown,
  pointer: string,
  budget: NodeBudget,
  direction: "request" | "response",
  run: ImportRun,
): SchemaOutcome {
  const { warnings } = run;
  const problems: Problem[] = [];
  if (!isRecord(raw) || raw.type !== "object") {
    return { schema: null, problems: [{ pointer, message: "must be a JSON Schema object of type object" }] };
  }
  const dialect = raw.$schema;
  if (dialect !== undefined && dialect !== JSON_SCHEMA_2020_12) {
    return {
      schema: null,
      problems: [{ pointer: `${pointer}/$schema`, message: "only JSON Schema 2020-12 is read" }],
    };
  }
  const builder = new SchemaBuilder(
    {
      version: "3.1",
      document: raw,
      budget,
      warn: (message) => warnings.push(`${pointer}: ${message}`),
      refuse: (at, message) => problems.push({ pointer: `${pointer}${at}`, message }),
    },
    direction,
  );
  let schema: JsonSchema;
  try {
    schema = builder.finish(builder.convertRoot(raw, ""));
  } catch (error) {
    const message = error instanceof SchemaDepthError ? "nested too deeply" : "too large";
    return { schema: null, problems: [{ pointer, message: `schema is ${message}` }] };
  }
  if (dialect !== undefined) schema = { $schema: dialect, ...schema };
  if (problems.length > 0) return { schema: null, problems };
  try {
    run.ajv.compile(schema);
  } catch {
    return {
      schema: null,
      problems: [{ pointer, message: "schema does not compile as JSON Schema 2020-12" }],
    };
  }
  return { schema, problems };
}

function annotationsOf(
  raw: unknown,
): OperationSnapshot["mcp_tool"] extends infer T
  ? T extends { annotations?: infer A }
    ? A | undefined
    : never
  : never {
  if (!isRecord(raw)) return undefined;
  const out: Record<string, unknown> = {};
  if (typeof raw.title === "string" && raw.title.length <= 256) out.title = raw.title;
  for (const hint of ANNOTATION_HINTS) if (typeof raw[hint] === "boolean") out[hint] = raw[hint];
  return Object.keys(out).length === 0 ? undefined : out;
}

function toolSnapshot(
  tool: Record<string, unknown>,
  name: string,
  pointer: string,
  options: McpImportOptions,
  run: ImportRun,
  problems: Problem[],
): OperationSnapshot | undefined {
  const { warnings } = run;
  const toolBudget = new NodeBudget(importLimits.maxSchemaNodesPerOperation, run.budget);
  const input = convertToolSchema(tool.inputSchema, `${pointer}/inputSchema`, toolBudget, "request", run);
  const output =
    tool.outputSchema === undefined
      ? { schema: null, problems: [] }
      : convertToolSchema(tool.outputSchema, `${pointer}/outputSchema`, toolBudget, "response", run);
  const rules: McpToolRules = options.toolRules?.[name] ?? {};
  const rulesAt = `/tool_rules/${name}`;
  const redactions = readRedactions(rules[EXTENSION_REDACTIONS], `${rulesAt}/${EXTENSION_REDACTIONS}`, []);
  const constraints = readConstraints(rules[EXTENSION_CONSTRAINTS], `${rulesAt}/${EXTENSION_CONSTRAINTS}`, {
    path: new Set(),
    query: new Set(),
    header: new Set(),
    hasBody: true,
  });
  const profile = readAuthProfile(
    rules[EXTENSION_AUTH_PROFILE],
    `${rulesAt}/${EXTENSION_AUTH_PROFILE}`,
    options.authProfileRef,
  );
  const found = [
    ...input.problems,
    ...output.problems,
    ...redactions.problems,
    ...constraints.problems,
    ...profile.problems,
  ];
  if (found.length > 0 || input.schema === null) {
    problems.push(...found);
    return undefined;
  }
  const annotations = annotationsOf(tool.annotations);
  const title = typeof tool.title === "string" ? tool.title : annotations?.title;
  const snapshot: OperationSnapshot = {
    operation_id: name,
    method: "POST",
    path: `/tools/${name}`,
    ...(title === undefined || title === ""
      ? {}
      : { summary: cut(title, MAX_SUMMARY, `${name}: title`, warnings) }),
    ...(typeof tool.description === "string" && tool.description !== ""
      ? { description: cut(tool.description, MAX_DESCRIPTION, `${name}: description`, warnings) }
      : {}),
    input_schema: { path: EMPTY_PART, query: EMPTY_PART, headers: EMPTY_PART, body: input.schema },
    response_schema: output.schema,
    upstream_url_template: options.downstreamUrl,
    auth_profile_ref: profile.value,
    response_rules: redactions.value,
    parameter_constraints: constraints.value,
    mcp_tool: annotations === undefined ? { name } : { name, annotations },
  };
  try {
    return validateOperationSnapshot(snapshot);
  } catch (error) {
    problems.push({ pointer, message: error instanceof Error ? error.message : "invalid snapshot" });
    return undefined;
  }
}

/**
 * The snapshots of a downstream's tools, in the order it listed them. Throws McpImportError
 * listing every problem (a malformed name, a repeated one, a schema that cannot be enforced,
 * rules for a tool the server does not have); nothing is partly imported.
 */
export function importMcpTools(tools: unknown, options: McpImportOptions): McpImportResult {
  checkOptions(options);
  const problems: Problem[] = [];
  const warnings: string[] = [];
  if (!Array.isArray(tools)) throw new McpImportError([{ pointer: "/tools", message: "must be an array" }]);
  if (tools.length > importLimits.maxOperations) {
    throw new McpImportError([
      { pointer: "/tools", message: `at most ${importLimits.maxOperations} tools can be imported` },
    ]);
  }
  const run: ImportRun = {
    budget: new NodeBudget(importLimits.maxSchemaNodesTotal),
    warnings,
    ajv: createSnapshotAjv(),
  };
  const operations: OperationSnapshot[] = [];
  const names = new Set<string>();
  tools.forEach((tool: unknown, index) => {
    const pointer = appendPointer("/tools", index);
    const name = isRecord(tool) ? tool.name : undefined;
    if (!isRecord(tool) || typeof name !== "string" || name.length > 128 || !TOOL_NAME.test(name)) {
      problems.push({
        pointer: `${pointer}/name`,
        message: "must be 1-128 of [A-Za-z0-9_.-], not dots alone",
      });
      return;
    }
    if (names.has(name)) {
      problems.push({ pointer: `${pointer}/name`, message: `repeats the tool ${JSON.stringify(name)}` });
      return;
    }
    names.add(name);
    const snapshot = toolSnapshot(tool, name, pointer, options, run, problems);
    if (snapshot !== undefined) operations.push(snapshot);
  });
  for (const name of Object.keys(options.toolRules ?? {})) {
    if (!names.has(name))
      problems.push({ pointer: `/tool_rules/${name}`, message: "the server lists no tool of this name" });
  }
  if (problems.length > 0) throw new McpImportError(problems);
  return { operations: deepFreeze(operations), warnings: warnings.slice(0, importLimits.maxWarnings) };
}
