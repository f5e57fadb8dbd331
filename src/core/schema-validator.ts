import { Ajv2020, type ErrorObject, type ValidateFunction } from "ajv/dist/2020.js";
import ajvFormats from "ajv-formats";
import { linearRegExp } from "./linear-pattern.ts";

export const JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema";

/** At most this many messages are reported; the rest are summarized. */
export const MAX_SCHEMA_MESSAGES = 20;

let shared: Ajv2020 | undefined;

/**
 * Every schema given to compileSchema (module-level constants, so a fixed set):
 * test/core/schema-validator.test.ts checks each against the meta-schema.
 */
const declared: Record<string, unknown>[] = [];

/** The schemas compileSchema was given so far (this code base's own, never a caller's). */
export function declaredSchemas(): readonly Record<string, unknown>[] {
  return declared;
}

function ajv(): Ajv2020 {
  if (shared === undefined) {
    shared = new Ajv2020({
      allErrors: true,
      strict: true,
      allowUnionTypes: true,
      // The schemas compiled here are this code base's own constants: a test holds each to
      // the 2020-12 meta-schema, so a process does not compile that meta-schema at start
      // (about a third of a sidecar's schema work before its first decision; issue 30).
      validateSchema: false,
      code: { regExp: linearRegExp },
    });
    // ajv-formats is CommonJS: its function is the module object's `default`.
    ajvFormats.default(shared);
  }
  return shared;
}

/**
 * Messages name the location and the broken rule, never the offending value, so they
 * are safe to return to callers and to log.
 */
function safeMessage(error: ErrorObject): string {
  const where = error.instancePath === "" ? "(root)" : error.instancePath;
  const extra =
    error.keyword === "additionalProperties" && typeof error.params.additionalProperty === "string"
      ? ` (${JSON.stringify(error.params.additionalProperty.slice(0, 64))})`
      : "";
  return `${where} ${error.message ?? "is invalid"}${extra}`;
}

export type SchemaResult<T> = { ok: true; value: T } | { ok: false; messages: string[] };

export type SchemaCheck<T> = (value: unknown) => SchemaResult<T>;

/**
 * Compiles a JSON Schema 2020-12 document once, on first use. Only for this code base's own
 * schemas (they are not checked against the meta-schema at run time); a schema that comes
 * from outside is compiled by its own module with the meta-schema check (execute/input.ts).
 */
export function compileSchema<T>(schema: Record<string, unknown>): SchemaCheck<T> {
  declared.push(schema);
  let validate: ValidateFunction | undefined;
  return (value) => {
    validate ??= ajv().compile(schema);
    if (validate(value)) return { ok: true, value: value as T };
    const errors = validate.errors ?? [];
    const messages = [...new Set(errors.map(safeMessage))];
    if (messages.length > MAX_SCHEMA_MESSAGES) {
      const rest = messages.length - MAX_SCHEMA_MESSAGES;
      return { ok: false, messages: [...messages.slice(0, MAX_SCHEMA_MESSAGES), `... and ${rest} more`] };
    }
    return { ok: false, messages: messages.length > 0 ? messages : ["(root) is invalid"] };
  };
}
