/**
 * One MCP `inputSchema` per imported operation: an object `{ path, query, headers, body }`
 * whose parts are the snapshot's own schemas (JSON Schema 2020-12, MCP's default dialect).
 * Pure: no I/O, and the snapshot is never mutated.
 */
import type { JsonSchemaObject, OperationInputSchema } from "../core/operation-snapshot.ts";
import { isRecord } from "../core/own-property.ts";

export type ToolInputSchema = {
  readonly type: "object";
  readonly properties: Readonly<Record<string, unknown>>;
  readonly required?: readonly string[];
  readonly additionalProperties: false;
  readonly $defs?: Readonly<Record<string, unknown>>;
};

const PARAMETER_PARTS = ["path", "query", "headers"] as const;
type Part = (typeof PARAMETER_PARTS)[number] | "body";

/** Keywords whose values are data, not schemas: a "$ref" inside them is not a reference. */
const DATA_KEYWORDS: ReadonlySet<string> = new Set(["enum", "const", "default", "examples", "example"]);

function hasKeys(value: unknown): boolean {
  return isRecord(value) && Object.keys(value).length > 0;
}

/**
 * A parameter part the operation does not take: an object schema that admits only `{}`.
 * Leaving it out keeps the tool schema small and tells a model not to send it.
 */
function acceptsNothing(schema: JsonSchemaObject): boolean {
  return (
    schema.additionalProperties === false &&
    !hasKeys(schema.properties) &&
    !hasKeys(schema.patternProperties) &&
    !(Array.isArray(schema.required) && schema.required.length > 0)
  );
}

function requiresSomething(schema: JsonSchemaObject): boolean {
  return Array.isArray(schema.required) && schema.required.length > 0;
}

/** "#/$defs/Node/properties/x" → "#/$defs/<part>.Node/properties/x"; other local refs move under the part. */
function rewriteRef(ref: string, part: Part): string {
  const defs = "#/$defs/";
  if (ref.startsWith(defs)) return `${defs}${part}.${ref.slice(defs.length)}`;
  if (ref === "#") return `#/properties/${part}`;
  if (ref.startsWith("#/")) return `#/properties/${part}${ref.slice(1)}`;
  return ref;
}

/** Copies a schema with every local `$ref` re-rooted for its new place inside the tool schema. */
function rehome(node: unknown, part: Part): unknown {
  if (Array.isArray(node)) return node.map((item) => rehome(item, part));
  if (!isRecord(node)) return node;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(node)) {
    if (key === "$ref" && typeof value === "string") out[key] = rewriteRef(value, part);
    else if (DATA_KEYWORDS.has(key)) out[key] = value;
    else out[key] = rehome(value, part);
  }
  return out;
}

/**
 * The snapshot's part schemas become properties; each part's `$defs` are hoisted to the
 * root under `<part>.<name>` (their `$ref`s rewritten), because a `#/$defs/...` reference
 * resolves against the document root. A part is required when its schema requires any
 * property (path parameters always are); the body is optional because snapshots do not
 * record whether the request body is required.
 */
export function toolInputSchema(input: OperationInputSchema): ToolInputSchema {
  const properties: Record<string, unknown> = {};
  const required: string[] = [];
  const defs: Record<string, unknown> = {};
  const add = (part: Part, schema: JsonSchemaObject): void => {
    const moved = rehome(schema, part) as Record<string, unknown>;
    const ownDefs = moved.$defs;
    if (isRecord(ownDefs)) {
      for (const [name, def] of Object.entries(ownDefs)) defs[`${part}.${name}`] = def;
    }
    delete moved.$defs;
    properties[part] = moved;
  };
  for (const part of PARAMETER_PARTS) {
    const schema = input[part];
    if (!isRecord(schema) || acceptsNothing(schema)) continue;
    add(part, schema);
    if (requiresSomething(schema)) required.push(part);
  }
  if (isRecord(input.body)) add("body", input.body);
  return {
    type: "object",
    properties,
    ...(required.length > 0 ? { required } : {}),
    additionalProperties: false,
    ...(Object.keys(defs).length > 0 ? { $defs: defs } : {}),
  };
}
