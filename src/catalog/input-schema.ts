import { HOP_BY_HOP_HEADERS } from "../core/redaction.ts";
import type { Problem } from "./extensions.ts";
import { appendPointer, isRecord, own, setOwn } from "./json-pointer.ts";
import { pickJsonMedia } from "./media-type.ts";
import type { ConvertContext, JsonSchema } from "./schema-convert.ts";
import { SchemaBuilder } from "./schema-convert.ts";

export type ParameterLocation = "path" | "query" | "header";

/** One parameter after path-level and operation-level lists are merged. */
export interface MergedParameter {
  readonly name: string;
  readonly in: ParameterLocation;
  readonly required: boolean;
  readonly definition: Record<string, unknown>;
  /** Where it is written in the document. */
  readonly pointer: string;
}

/** OpenAPI: header parameters with these names "SHALL be ignored". */
const OPENAPI_IGNORED_HEADERS = new Set(["accept", "content-type", "authorization"]);

/**
 * Headers the gateway owns: a caller-chosen value could re-route, smuggle or authenticate
 * the upstream request, so these are never tool inputs even if a document declares them.
 */
const GATEWAY_HEADERS = new Set([
  ...HOP_BY_HOP_HEADERS,
  "host",
  "content-length",
  "cookie",
  "proxy-authorization",
  "forwarded",
  "x-forwarded-for",
  "x-forwarded-host",
  "x-forwarded-proto",
  "x-authority-user-assertion",
]);

export interface MergeResult {
  readonly parameters: MergedParameter[];
  readonly problems: Problem[];
  readonly warnings: string[];
}

const keyOf = (location: string, name: string): string =>
  `${location}\u0000${location === "header" ? name.toLowerCase() : name}`;

function collect(
  list: unknown,
  pointer: string,
  problems: Problem[],
  warnings: string[],
): Map<string, MergedParameter> {
  const out = new Map<string, MergedParameter>();
  if (list === undefined) return out;
  if (!Array.isArray(list)) {
    problems.push({ pointer, message: "parameters must be an array" });
    return out;
  }
  list.forEach((raw: unknown, index) => {
    const at = appendPointer(pointer, index);
    if (!isRecord(raw)) {
      problems.push({ pointer: at, message: "a parameter must be an object" });
      return;
    }
    const name = own(raw, "name");
    const location = own(raw, "in");
    if (typeof name !== "string" || name.length === 0) {
      problems.push({ pointer: at, message: "a parameter needs a name" });
      return;
    }
    if (location === "cookie") {
      warnings.push(`cookie parameter ${JSON.stringify(name)} is not supported and was not imported`);
      return;
    }
    if (location !== "path" && location !== "query" && location !== "header") {
      problems.push({ pointer: at, message: "parameter 'in' must be path, query, header or cookie" });
      return;
    }
    const key = keyOf(location, name);
    if (out.has(key)) {
      problems.push({ pointer: at, message: `duplicate ${location} parameter ${JSON.stringify(name)}` });
      return;
    }
    out.set(key, {
      name,
      in: location,
      required: own(raw, "required") === true,
      definition: raw,
      pointer: at,
    });
  });
  return out;
}

/** Path-level parameters apply to every operation; an operation's own override by name and location. */
export function mergeParameters(
  pathLevel: unknown,
  pathLevelPointer: string,
  operationLevel: unknown,
  operationLevelPointer: string,
): MergeResult {
  const problems: Problem[] = [];
  const warnings: string[] = [];
  const merged = collect(pathLevel, pathLevelPointer, problems, warnings);
  for (const [key, parameter] of collect(operationLevel, operationLevelPointer, problems, warnings)) {
    merged.set(key, parameter);
  }
  return { parameters: [...merged.values()], problems, warnings };
}

/** Checks the path template's placeholders against the declared path parameters. */
export function checkPathParameters(
  templateParams: readonly string[],
  parameters: readonly MergedParameter[],
  operationPointer: string,
): Problem[] {
  const problems: Problem[] = [];
  const declared = new Set<string>();
  for (const parameter of parameters) {
    if (parameter.in !== "path") continue;
    declared.add(parameter.name);
    if (!templateParams.includes(parameter.name)) {
      problems.push({
        pointer: parameter.pointer,
        message: `path parameter ${JSON.stringify(parameter.name)} does not appear in the path template`,
      });
    } else if (!parameter.required) {
      problems.push({
        pointer: appendPointer(parameter.pointer, "required"),
        message: `path parameter ${JSON.stringify(parameter.name)} must have required: true`,
      });
    }
  }
  for (const name of templateParams) {
    if (!declared.has(name)) {
      problems.push({
        pointer: operationPointer,
        message: `path template parameter {${name}} is not declared as a path parameter`,
      });
    }
  }
  return problems;
}

export interface LocationSchemas {
  readonly path: JsonSchema;
  readonly query: JsonSchema;
  readonly headers: JsonSchema;
  /** Names per location, headers lower-cased: what constraints may refer to. */
  readonly names: { path: Set<string>; query: Set<string>; header: Set<string> };
  readonly warnings: string[];
}

function parameterSchema(builder: SchemaBuilder, parameter: MergedParameter, warnings: string[]): JsonSchema {
  const definition = parameter.definition;
  let schema: JsonSchema;
  const content = own(definition, "content");
  if (own(definition, "schema") !== undefined) {
    schema = builder.convertRoot(own(definition, "schema"), appendPointer(parameter.pointer, "schema"));
  } else if (isRecord(content)) {
    const media = pickJsonMedia(content);
    if (media === undefined) {
      warnings.push(
        `${parameter.in} parameter ${JSON.stringify(parameter.name)} has no JSON content; any value is accepted`,
      );
      schema = {};
    } else {
      schema = builder.convertRoot(
        own(media.value, "schema") ?? {},
        appendPointer(parameter.pointer, "content", media.key, "schema"),
      );
    }
  } else {
    schema = {};
  }
  const description = own(definition, "description");
  if (typeof description === "string" && schema.description === undefined)
    schema = { ...schema, description };
  if (own(definition, "deprecated") === true && schema.deprecated === undefined)
    schema = { ...schema, deprecated: true };
  return schema;
}

function objectSchema(properties: Record<string, unknown>, required: string[]): JsonSchema {
  // Undeclared inputs are refused: a caller cannot add query parameters or headers the
  // reviewed snapshot does not name.
  const schema: JsonSchema = { type: "object", properties, additionalProperties: false };
  if (required.length > 0) schema.required = required;
  return schema;
}

/** The path, query and headers object schemas of one operation. */
export function buildLocationSchemas(
  parameters: readonly MergedParameter[],
  ctx: ConvertContext,
): LocationSchemas {
  const warnings: string[] = [];
  const builders = {
    path: new SchemaBuilder(ctx, "request"),
    query: new SchemaBuilder(ctx, "request"),
    header: new SchemaBuilder(ctx, "request"),
  };
  const properties = { path: {}, query: {}, header: {} } as Record<
    ParameterLocation,
    Record<string, unknown>
  >;
  const required = { path: [], query: [], header: [] } as Record<ParameterLocation, string[]>;
  const names = { path: new Set<string>(), query: new Set<string>(), header: new Set<string>() };
  for (const parameter of parameters) {
    let name = parameter.name;
    if (parameter.in === "header") {
      name = name.toLowerCase();
      if (OPENAPI_IGNORED_HEADERS.has(name)) {
        warnings.push(`header parameter ${JSON.stringify(parameter.name)} is ignored (OpenAPI reserves it)`);
        continue;
      }
      if (GATEWAY_HEADERS.has(name)) {
        warnings.push(
          `header parameter ${JSON.stringify(parameter.name)} is set by the gateway and was not imported`,
        );
        continue;
      }
    }
    setOwn(properties[parameter.in], name, parameterSchema(builders[parameter.in], parameter, warnings));
    names[parameter.in].add(name);
    // Path parameters are always required: a URL cannot be built without them.
    if (parameter.in === "path" || parameter.required) required[parameter.in].push(name);
  }
  return {
    path: builders.path.finish(objectSchema(properties.path, required.path)),
    query: builders.query.finish(objectSchema(properties.query, required.query)),
    headers: builders.header.finish(objectSchema(properties.header, required.header)),
    names,
    warnings,
  };
}
