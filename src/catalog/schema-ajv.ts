import { Ajv2020 } from "ajv/dist/2020.js";
import ajvFormats from "ajv-formats";
import { linearRegExp } from "../core/linear-pattern.ts";

/**
 * Formats a snapshot schema may keep: those ajv-formats implements (the OpenAPI numeric
 * and binary ones included). Any other format is dropped at import with a warning,
 * because strict ajv refuses to compile a schema naming an unknown format.
 */
export const SUPPORTED_FORMATS: ReadonlySet<string> = new Set([
  "date",
  "time",
  "date-time",
  "iso-time",
  "iso-date-time",
  "duration",
  "uri",
  "uri-reference",
  "uri-template",
  "url",
  "email",
  "hostname",
  "ipv4",
  "ipv6",
  "regex",
  "uuid",
  "json-pointer",
  "json-pointer-uri-fragment",
  "relative-json-pointer",
  "byte",
  "int32",
  "int64",
  "float",
  "double",
  "password",
  "binary",
]);

/**
 * The ajv configuration every schema of an imported operation snapshot compiles under
 * (input_schema.path/query/headers/body and response_schema). Unknown keywords are errors
 * (the importer strips the OpenAPI-only ones); the type-strictness checks stay off
 * because valid specifications routinely use "format" without "type" or list a required
 * property they do not describe.
 */
export function createSnapshotAjv(): Ajv2020 {
  const ajv = new Ajv2020({
    strictSchema: true,
    strictNumbers: true,
    strictTypes: false,
    strictTuples: false,
    strictRequired: false,
    allowUnionTypes: true,
    allowMatchingProperties: true,
    allErrors: true,
    validateFormats: true,
    // Nothing reaches the console from here: failures surface as compile errors.
    logger: false,
    // Partner patterns never run on the backtracking engine (docs/decisions/2502).
    code: { regExp: linearRegExp },
  });
  // ajv-formats is CommonJS: its function is the module object's `default`.
  ajvFormats.default(ajv);
  return ajv;
}
