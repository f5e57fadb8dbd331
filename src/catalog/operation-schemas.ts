import { buildLocationSchemas, type MergedParameter } from "./input-schema.ts";
import { appendPointer, isRecord, own } from "./json-pointer.ts";
import { pickJsonMedia } from "./media-type.ts";
import { type ConvertContext, type JsonSchema, SchemaBuilder } from "./schema-convert.ts";

/** The schemas of one operation, with where each came from in the document. */
export interface OperationSchemas {
  readonly path: JsonSchema;
  readonly query: JsonSchema;
  readonly headers: JsonSchema;
  readonly body: JsonSchema | null;
  readonly bodyRequired: boolean;
  readonly response: JsonSchema | null;
  /** Parameter names per location (headers lower-cased), for constraint checks. */
  readonly names: { path: Set<string>; query: Set<string>; header: Set<string> };
  /** Every produced schema and the pointer a problem with it should name. */
  readonly sources: ReadonlyArray<{ schema: JsonSchema; pointer: string }>;
}

/**
 * The schema of the first 2xx response with JSON content: 200..299 in numeric order, then
 * the 2XX range. A JSON media type without a schema means "any JSON".
 */
export function pickResponse(
  responses: unknown,
  pointer: string,
): { schema: unknown; pointer: string } | undefined {
  if (!isRecord(responses)) return undefined;
  const codes = Object.keys(responses)
    .filter((code) => /^2(?:\d\d|XX)$/i.test(code))
    .sort((a, b) => (/x/i.test(a) ? 1 : 0) - (/x/i.test(b) ? 1 : 0) || a.localeCompare(b));
  for (const code of codes) {
    const response = own(responses, code);
    const content = isRecord(response) ? own(response, "content") : undefined;
    if (!isRecord(content)) continue;
    const media = pickJsonMedia(content);
    if (media === undefined) continue;
    return {
      schema: own(media.value, "schema") ?? {},
      pointer: appendPointer(pointer, code, "content", media.key, "schema"),
    };
  }
  return undefined;
}

/**
 * Builds the input and response schemas of one operation. Throws SchemaBudgetError or
 * SchemaDepthError (from the converter) when the schemas are too large or too deep.
 */
export function buildOperationSchemas(
  operation: Record<string, unknown>,
  parameters: readonly MergedParameter[],
  pointer: string,
  ctx: ConvertContext,
): OperationSchemas {
  const locations = buildLocationSchemas(parameters, ctx);
  locations.warnings.forEach(ctx.warn);
  const parametersPointer = appendPointer(pointer, "parameters");
  const sources = [
    { schema: locations.path, pointer: parametersPointer },
    { schema: locations.query, pointer: parametersPointer },
    { schema: locations.headers, pointer: parametersPointer },
  ];

  let body: JsonSchema | null = null;
  let bodyRequired = false;
  const requestBody = own(operation, "requestBody");
  if (isRecord(requestBody)) {
    const content = own(requestBody, "content");
    const media = isRecord(content) ? pickJsonMedia(content) : undefined;
    if (media === undefined) {
      ctx.warn("the request body has no JSON media type; the operation was imported without a body");
    } else {
      const builder = new SchemaBuilder(ctx, "request");
      const bodyPointer = appendPointer(pointer, "requestBody", "content", media.key, "schema");
      body = builder.finish(builder.convertRoot(own(media.value, "schema") ?? {}, bodyPointer));
      bodyRequired = own(requestBody, "required") === true;
      sources.push({ schema: body, pointer: bodyPointer });
    }
  }

  let response: JsonSchema | null = null;
  const picked = pickResponse(own(operation, "responses"), appendPointer(pointer, "responses"));
  if (picked !== undefined) {
    const builder = new SchemaBuilder(ctx, "response");
    response = builder.finish(builder.convertRoot(picked.schema, picked.pointer));
    sources.push({ schema: response, pointer: picked.pointer });
  }

  return {
    path: locations.path,
    query: locations.query,
    headers: locations.headers,
    body,
    bodyRequired,
    response,
    names: locations.names,
    sources,
  };
}
