import { Ajv2020, type ErrorObject, type ValidateFunction } from "ajv/dist/2020.js";
import ajvFormats from "ajv-formats";
import { linearRegExp } from "./linear-pattern.ts";

export const JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema";

/** At most this many messages are reported; the rest are summarized. */
export const MAX_SCHEMA_MESSAGES = 20;

let shared: Ajv2020 | undefined;

function ajv(): Ajv2020 {
  if (shared === undefined) {
    shared = new Ajv2020({
      allErrors: true,
      strict: true,
      allowUnionTypes: true,
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

/** Compiles a JSON Schema 2020-12 document once, on first use. */
export function compileSchema<T>(schema: Record<string, unknown>): SchemaCheck<T> {
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
