import { dereference, type ParserOptions, validate } from "@readme/openapi-parser";
import { type DocumentFormat, readDocumentSource } from "./document-source.ts";
import { OpenApiImportError, ProblemList, sanitizeMessage } from "./errors.ts";
import { ExpansionCounter, ExpansionDepthError } from "./expansion.ts";
import { appendPointer, isRecord, own, resolveFragment } from "./json-pointer.ts";
import { importLimits } from "./limits.ts";
import { checkReferences } from "./ref-check.ts";
import type { OpenApiVersion } from "./schema-convert.ts";

/** A validated OpenAPI document with every resolvable `$ref` inlined. */
export interface ParsedOpenApi {
  readonly version: OpenApiVersion;
  /** The `openapi` field as written, e.g. "3.1.0". */
  readonly openapi: string;
  readonly title: string;
  /** `info.version`. */
  readonly apiVersion: string;
  /** Dereferenced; circular references stay as internal `$ref`s into this same object. */
  readonly document: Record<string, unknown>;
}

export interface ParseOptions {
  /** Default: JSON when the text starts with "{", else YAML. Ignored for object input. */
  readonly format?: DocumentFormat;
}

/**
 * Rules this importer checks itself, with a pointer to the offending place; the parser
 * would report them without one. Everything else the parser checks stays an error.
 */
const RULES_CHECKED_HERE = {
  "duplicate-operation-id": "warning",
  "duplicate-non-request-body-parameters": "warning",
  "non-optional-path-parameters": "warning",
  "path-parameters-not-in-parameters": "warning",
  "path-parameters-not-in-path": "warning",
} as const;

type ApiInput = Parameters<typeof dereference>[0];

/** A fresh copy in the parser's input type; never a string, which it would read as a file path or URL. */
const copyForParser = (document: Record<string, unknown>): ApiInput => structuredClone(document) as ApiInput;

const parserOptions = (): ParserOptions => ({
  // Never read a file or fetch a URL; external refs were already refused.
  resolve: { external: false, file: false },
  dereference: { circular: "ignore" },
  timeoutMs: importLimits.dereferenceTimeoutMs,
  validate: { errors: { colorize: false }, rules: { openapi: { ...RULES_CHECKED_HERE } } },
});

function checkVersion(document: Record<string, unknown>, problems: ProblemList): OpenApiVersion | undefined {
  const swagger = own(document, "swagger");
  if (swagger !== undefined) {
    problems.add("/swagger", "Swagger 2.0 documents are not supported: convert to OpenAPI 3.0 or 3.1");
    return undefined;
  }
  const openapi = own(document, "openapi");
  if (typeof openapi !== "string") {
    problems.add("/openapi", "the document must declare its OpenAPI version (openapi: 3.0.x or 3.1.x)");
    return undefined;
  }
  if (/^3\.0\.\d+(?:-.+)?$/.test(openapi)) return "3.0";
  if (/^3\.1\.\d+(?:-.+)?$/.test(openapi)) return "3.1";
  problems.add(
    "/openapi",
    `OpenAPI version ${JSON.stringify(openapi.slice(0, 32))} is not supported (3.0.x or 3.1.x)`,
  );
  return undefined;
}

const METHOD_KEYS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

const UNRESOLVED = Symbol("unresolved");

/**
 * Follows internal `$ref`s so shapes can be checked where they are used. A reference
 * that does not resolve was already reported: its target is not checked again.
 */
function follow(document: Record<string, unknown>, value: unknown): unknown {
  let current = value;
  for (let hops = 0; isRecord(current) && typeof own(current, "$ref") === "string"; hops++) {
    if (hops >= 32) return UNRESOLVED;
    current = resolveFragment(document, String(own(current, "$ref")));
    if (current === undefined) return UNRESOLVED;
  }
  return current;
}

function checkParameters(
  document: Record<string, unknown>,
  list: unknown,
  pointer: string,
  problems: ProblemList,
): void {
  if (list === undefined) return;
  if (!Array.isArray(list)) {
    problems.add(pointer, "parameters must be an array");
    return;
  }
  list.forEach((raw: unknown, index) => {
    const at = appendPointer(pointer, index);
    const parameter = follow(document, raw);
    if (parameter === UNRESOLVED) return;
    if (!isRecord(parameter)) {
      problems.add(at, "a parameter must be an object");
      return;
    }
    if (typeof own(parameter, "name") !== "string") problems.add(at, "a parameter needs a name");
    const location = own(parameter, "in");
    if (location !== "path" && location !== "query" && location !== "header" && location !== "cookie") {
      problems.add(at, "parameter 'in' must be path, query, header or cookie");
    }
    if (location === "path" && own(parameter, "required") !== true) {
      problems.add(appendPointer(at, "required"), "a path parameter must have required: true");
    }
    if (own(parameter, "schema") === undefined && own(parameter, "content") === undefined) {
      problems.add(at, "a parameter needs a schema or a content map");
    }
  });
}

function checkOperations(
  document: Record<string, unknown>,
  version: OpenApiVersion,
  path: string,
  item: Record<string, unknown>,
  problems: ProblemList,
): void {
  const pathPointer = appendPointer("/paths", path);
  checkParameters(document, own(item, "parameters"), appendPointer(pathPointer, "parameters"), problems);
  for (const method of METHOD_KEYS) {
    const operation = own(item, method);
    if (operation === undefined) continue;
    const at = appendPointer(pathPointer, method);
    if (!isRecord(operation)) {
      problems.add(at, "an operation must be an object");
      continue;
    }
    const responses = own(operation, "responses");
    if (responses === undefined ? version === "3.0" : !isRecord(responses)) {
      problems.add(appendPointer(at, "responses"), "an operation needs a responses object");
    }
    checkParameters(document, own(operation, "parameters"), appendPointer(at, "parameters"), problems);
  }
}

function checkShape(document: Record<string, unknown>, version: OpenApiVersion, problems: ProblemList): void {
  const info = own(document, "info");
  if (!isRecord(info)) problems.add("/info", "the document needs an info object");
  else {
    if (typeof own(info, "title") !== "string") problems.add("/info/title", "info.title must be a string");
    if (typeof own(info, "version") !== "string")
      problems.add("/info/version", "info.version must be a string");
  }
  const paths = own(document, "paths");
  if (paths === undefined) {
    problems.add("/paths", "the document has no paths: a capability needs at least one operation");
    return;
  }
  if (!isRecord(paths)) {
    problems.add("/paths", "paths must be an object");
    return;
  }
  if (Object.keys(paths).length === 0) {
    problems.add("/paths", "paths is empty: a capability needs at least one operation");
  }
  let operations = 0;
  for (const item of Object.values(paths)) {
    const resolved = follow(document, item);
    if (isRecord(resolved)) operations += METHOD_KEYS.filter((m) => own(resolved, m) !== undefined).length;
  }
  if (operations > importLimits.maxOperations) {
    // Checked before anything expensive runs on the document.
    problems.add("/paths", `more than ${importLimits.maxOperations} operations in one document`);
    return;
  }
  for (const [path, item] of Object.entries(paths)) {
    const at = appendPointer("/paths", path);
    if (!path.startsWith("/")) problems.add(at, "a path must start with '/'");
    const resolved = follow(document, item);
    if (resolved === UNRESOLVED) continue;
    if (!isRecord(resolved)) problems.add(at, "a path item must be an object");
    else checkOperations(document, version, path, resolved, problems);
  }
}

/** Refuses documents whose `$ref`s would blow up once inlined, before the parser inlines them. */
function checkExpansion(document: Record<string, unknown>, problems: ProblemList): void {
  const counter = new ExpansionCounter(document);
  try {
    const paths = own(document, "paths");
    for (const [path, item] of Object.entries(isRecord(paths) ? paths : {})) {
      const resolved = follow(document, item);
      if (!isRecord(resolved)) continue;
      for (const method of METHOD_KEYS) {
        const operation = own(resolved, method);
        if (operation === undefined) continue;
        if (counter.sizeOf(operation) > importLimits.maxExpandedNodesPerOperation) {
          problems.add(
            appendPointer("/paths", path, method),
            `the operation grows past ${importLimits.maxExpandedNodesPerOperation} nodes once its $refs are inlined`,
          );
        }
      }
    }
    if (problems.size === 0 && counter.sizeOf(document) > importLimits.maxExpandedNodes) {
      problems.add(
        "",
        `the document grows past ${importLimits.maxExpandedNodes} nodes once its $refs are inlined`,
      );
    }
  } catch (error) {
    if (!(error instanceof ExpansionDepthError)) throw error;
    problems.add("", "the document's $ref chains nest too deeply");
  }
}

/**
 * Reads, bounds and validates an OpenAPI 3.0.x or 3.1.x document (JSON or YAML text, or
 * an object) and dereferences its internal `$ref`s. Throws OpenApiImportError with every
 * problem found.
 */
export async function parseOpenApiDocument(
  input: string | object,
  options: ParseOptions = {},
): Promise<ParsedOpenApi> {
  const raw = readDocumentSource(input, options.format);
  const problems = new ProblemList();
  const version = checkVersion(raw, problems);
  if (version === undefined) throw new OpenApiImportError(problems.toArray());
  checkReferences(raw, problems);
  checkShape(raw, version, problems);
  problems.throwIfAny();
  checkExpansion(raw, problems);
  problems.throwIfAny();

  // The parser mutates what it is given: it only ever sees copies.
  let result: Awaited<ReturnType<typeof validate>>;
  try {
    result = await validate(copyForParser(raw), parserOptions());
  } catch (error) {
    problems.add(
      "",
      sanitizeMessage(error instanceof Error ? error.message : "the document could not be validated"),
    );
    problems.throwIfAny();
    throw error;
  }
  if (!result.valid) {
    for (const error of result.errors) problems.add("", sanitizeMessage(error.message));
    if (result.additionalErrors > 0) problems.add("", `... and ${result.additionalErrors} more problem(s)`);
    problems.throwIfAny();
  }

  let document: Record<string, unknown>;
  try {
    const dereferenced: unknown = await dereference(copyForParser(raw), parserOptions());
    document = isRecord(dereferenced) ? dereferenced : {};
  } catch (error) {
    problems.add(
      "",
      sanitizeMessage(error instanceof Error ? error.message : "the document could not be dereferenced"),
    );
    problems.throwIfAny();
    throw error;
  }
  const info = own(raw, "info");
  return {
    version,
    openapi: String(own(raw, "openapi")),
    title: isRecord(info) ? String(own(info, "title")) : "",
    apiVersion: isRecord(info) ? String(own(info, "version")) : "",
    document,
  };
}
