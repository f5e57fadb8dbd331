import { createHash } from "node:crypto";
import { Ajv2020, type ErrorObject, type ValidateFunction } from "ajv/dist/2020.js";
import ajvFormats from "ajv-formats";
import generatedValidators from "./generated-validators/index.cjs";
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

/**
 * The compiler of compileSchema's validators, at run time and for the generated ones
 * (scripts/gen-schema-validators.ts asks for `source`: ajv keeps the code it generates).
 */
export function createSchemaCompiler(options: { readonly source?: boolean } = {}): Ajv2020 {
  const compiler = new Ajv2020({
    allErrors: true,
    strict: true,
    allowUnionTypes: true,
    // The schemas compiled here are this code base's own constants: a test holds each to
    // the 2020-12 meta-schema, so a process does not compile that meta-schema at start
    // (about a third of a sidecar's schema work before its first decision; issue 30).
    validateSchema: false,
    code: { regExp: linearRegExp, source: options.source === true },
  });
  // ajv-formats is CommonJS: its function is the module object's `default`.
  ajvFormats.default(compiler);
  return compiler;
}

function ajv(): Ajv2020 {
  shared ??= createSchemaCompiler();
  return shared;
}

/** A schema's name among the generated validators: a hash of its JSON text. */
export function schemaKey(schema: Record<string, unknown>): string {
  return createHash("sha256").update(JSON.stringify(schema)).digest("hex").slice(0, 32);
}

/**
 * The validator generated for exactly this schema (src/core/generated-validators/, written by
 * `make validators`), or the run-time compiler's. A schema changed since the generation has
 * another key: it is compiled here, as every schema was before (and a test asks for the
 * generation to be run again).
 */
function validatorOf(schema: Record<string, unknown>): ValidateFunction {
  const generated = generatedValidators[schemaKey(schema)];
  return generated === undefined ? ajv().compile(schema) : generated();
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
 * Compiles a JSON Schema 2020-12 document once, on first use (or loads the validator generated
 * for it at build time: src/core/generated-validators/). Only for this code base's own
 * schemas (they are not checked against the meta-schema at run time); a schema that comes
 * from outside is compiled by its own module with the meta-schema check (execute/input.ts).
 */
export function compileSchema<T>(schema: Record<string, unknown>): SchemaCheck<T> {
  declared.push(schema);
  let validate: ValidateFunction | undefined;
  return (value) => {
    validate ??= validatorOf(schema);
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
