import { HTTP_METHODS, type HttpMethod } from "../core/http-method.ts";
import type { OperationSnapshot } from "../core/operation-snapshot.ts";
import { validateOperationSnapshot } from "../core/operation-snapshot.ts";
import {
  type ParsedPathTemplate,
  PathTemplateError,
  parsePathTemplate,
  pathShapeKey,
} from "../core/path-template.ts";
import { buildPermissionId, isValidCapabilityId, type PermissionId } from "../core/permission-id.ts";
import type { RedactionRule } from "../core/redaction.ts";
import { ImportOptionsError, ProblemList, sanitizeMessage, WarningList } from "./errors.ts";
import {
  EXTENSION_AUTH_PROFILE,
  EXTENSION_CONSTRAINTS,
  EXTENSION_REDACTIONS,
  isValidAuthProfileRef,
  readAuthProfile,
  readConstraints,
  readRedactions,
  redactionRuleProblem,
} from "./extensions.ts";
import { deepFreeze } from "./freeze.ts";
import { checkPathParameters, mergeParameters } from "./input-schema.ts";
import { appendPointer, isRecord, own } from "./json-pointer.ts";
import { importLimits } from "./limits.ts";
import type { ParsedOpenApi } from "./openapi-parse.ts";
import { deriveOperationId, disambiguateOperationId } from "./operation-id.ts";
import { buildOperationSchemas, type OperationSchemas } from "./operation-schemas.ts";
import { createSnapshotAjv } from "./schema-ajv.ts";
import {
  type ConvertContext,
  type JsonSchema,
  NodeBudget,
  SchemaBudgetError,
  SchemaDepthError,
} from "./schema-convert.ts";
import { normalizeBaseUrl, resolveBaseUrl } from "./server-url.ts";

export { ImportOptionsError, type ImportProblem, OpenApiImportError } from "./errors.ts";
export { type ParsedOpenApi, type ParseOptions, parseOpenApiDocument } from "./openapi-parse.ts";

export interface ImportOptions {
  /** The capability the operations belong to; the first part of every permission ID. */
  readonly capabilityId: string;
  /** Replaces the document's servers (all levels); absolute http(s), no credentials. */
  readonly upstreamBaseUrl?: string;
  /** Auth profile of every operation without `x-authority-auth-profile`. */
  readonly authProfileRef: string;
  /** Rules applied to every operation; an operation's own rule for the same path wins. */
  readonly defaultResponseRules?: readonly RedactionRule[];
}

/** Facts about one imported operation that its snapshot does not carry. */
export interface ImportedOperationInfo {
  readonly permission_id: PermissionId;
  readonly operation_id: string;
  /** Where the operation is written in the submitted document (RFC 6901). */
  readonly pointer: string;
  /** The request body is marked `required: true` (OpenAPI's default is optional). */
  readonly body_required: boolean;
}

export interface ImportResult {
  /** Deep-frozen, in document order (paths as written, methods get/put/post/delete/options/head/patch/trace). */
  readonly operations: readonly OperationSnapshot[];
  /** Same order as operations. */
  readonly operation_info: readonly ImportedOperationInfo[];
  readonly warnings: readonly string[];
}

interface ValidatedOptions {
  readonly capabilityId: string;
  readonly upstreamBaseUrl: string | undefined;
  readonly authProfileRef: string;
  readonly defaultResponseRules: readonly RedactionRule[];
}

function validateOptions(options: ImportOptions): ValidatedOptions {
  if (!isRecord(options)) throw new ImportOptionsError("import options must be an object");
  if (!isValidCapabilityId(options.capabilityId)) {
    throw new ImportOptionsError("capabilityId must be 1-128 characters of [A-Za-z0-9._~@+-]");
  }
  if (!isValidAuthProfileRef(options.authProfileRef)) {
    throw new ImportOptionsError("authProfileRef must be 1-256 printable characters without spaces");
  }
  if (options.upstreamBaseUrl !== undefined) {
    const checked =
      typeof options.upstreamBaseUrl === "string" ? normalizeBaseUrl(options.upstreamBaseUrl) : undefined;
    if (checked === undefined || !checked.ok) {
      throw new ImportOptionsError(
        `upstreamBaseUrl ${checked?.ok === false ? checked.message : "must be a string"}`,
      );
    }
  }
  const rules = options.defaultResponseRules ?? [];
  if (!Array.isArray(rules)) throw new ImportOptionsError("defaultResponseRules must be an array");
  rules.forEach((rule: unknown, index) => {
    const problem = redactionRuleProblem(rule);
    if (problem !== undefined) throw new ImportOptionsError(`defaultResponseRules[${index}]: ${problem}`);
  });
  return {
    capabilityId: options.capabilityId,
    upstreamBaseUrl: options.upstreamBaseUrl,
    authProfileRef: options.authProfileRef,
    defaultResponseRules: rules,
  };
}

const METHOD_KEYS = HTTP_METHODS.map((m) => m.toLowerCase());

/** What is known about an operation before its id is settled. */
interface Draft {
  readonly method: HttpMethod;
  readonly path: string;
  readonly pointer: string;
  readonly explicitId: string | undefined;
  readonly snapshot: Omit<OperationSnapshot, "operation_id">;
  readonly bodyRequired: boolean;
}

function optionalText(
  value: unknown,
  max: number,
  label: string,
  warn: (m: string) => void,
): string | undefined {
  if (typeof value !== "string" || value.length === 0) return undefined;
  if (value.length <= max) return value;
  warn(`${label} was longer than ${max} characters and was cut`);
  return value.slice(0, max);
}

class OperationImporter {
  readonly #parsed: ParsedOpenApi;
  readonly #options: ValidatedOptions;
  readonly #problems = new ProblemList();
  readonly #warnings = new WarningList();
  readonly #total = new NodeBudget(importLimits.maxSchemaNodesTotal);
  readonly #ajv = createSnapshotAjv();
  /** Explicit operationId → the operation that declared it first. */
  readonly #explicitIds = new Map<string, string>();

  constructor(parsed: ParsedOpenApi, options: ValidatedOptions) {
    this.#parsed = parsed;
    this.#options = options;
  }

  run(): ImportResult {
    const document = this.#parsed.document;
    const paths = own(document, "paths");
    const drafts: Draft[] = [];
    const shapes = new Map<string, string>();
    this.#explicitIds.clear();
    let count = 0;
    for (const [path, item] of Object.entries(isRecord(paths) ? paths : {})) {
      const pathPointer = appendPointer("/paths", path);
      if (!isRecord(item)) continue;
      let template: ParsedPathTemplate | undefined;
      try {
        template = parsePathTemplate(path);
      } catch (error) {
        const why =
          error instanceof PathTemplateError
            ? error.message.replace(/^path template "[^"]*": /, "")
            : "invalid";
        this.#problems.add(pathPointer, `invalid path template: ${why}`);
      }
      for (const key of METHOD_KEYS) {
        const operation = own(item, key);
        if (operation === undefined) continue;
        const pointer = appendPointer(pathPointer, key);
        const method = key.toUpperCase() as HttpMethod;
        if (++count > importLimits.maxOperations) {
          this.#problems.add("/paths", `more than ${importLimits.maxOperations} operations in one document`);
          this.#problems.throwIfAny();
        }
        if (!isRecord(operation)) {
          this.#problems.add(pointer, "an operation must be an object");
          continue;
        }
        this.#checkExplicitId(operation, pointer, `${method} ${path}`);
        if (template === undefined) continue;
        const shape = `${method} ${pathShapeKey(template)}`;
        const first = shapes.get(shape);
        if (first !== undefined) {
          this.#problems.add(
            pointer,
            `duplicate operation: ${method} ${path} matches the same requests as ${first}`,
          );
          continue;
        }
        shapes.set(shape, `${method} ${path}`);
        const draft = this.#draft(method, path, template, item, pathPointer, operation, pointer);
        if (draft !== undefined) drafts.push(draft);
      }
    }
    if (count === 0) this.#problems.add("/paths", "the document has no HTTP operations");
    this.#problems.throwIfAny();
    const result = this.#settleIds(drafts);
    this.#problems.throwIfAny();
    return deepFreeze({ ...result, warnings: this.#warnings.toArray() });
  }

  #draft(
    method: HttpMethod,
    path: string,
    template: ParsedPathTemplate,
    item: Record<string, unknown>,
    pathPointer: string,
    operation: Record<string, unknown>,
    pointer: string,
  ): Draft | undefined {
    const label = `${method} ${path}`;
    const warn = (message: string): void => this.#warnings.add(`${label}: ${message}`);
    const problemsBefore = this.#problems.size;
    const add = (p: { pointer: string; message: string }): void => this.#problems.add(p.pointer, p.message);

    const merged = mergeParameters(
      own(item, "parameters"),
      appendPointer(pathPointer, "parameters"),
      own(operation, "parameters"),
      appendPointer(pointer, "parameters"),
    );
    merged.problems.forEach(add);
    merged.warnings.forEach(warn);
    checkPathParameters(template.params, merged.parameters, pointer).forEach(add);

    const base = resolveBaseUrl(
      [
        { servers: own(operation, "servers"), pointer: appendPointer(pointer, "servers") },
        { servers: own(item, "servers"), pointer: appendPointer(pathPointer, "servers") },
        { servers: own(this.#parsed.document, "servers"), pointer: "/servers" },
      ],
      this.#options.upstreamBaseUrl,
    );
    if (!base.ok) add(base);

    const ctx: ConvertContext = {
      version: this.#parsed.version,
      document: this.#parsed.document,
      budget: new NodeBudget(importLimits.maxSchemaNodesPerOperation, this.#total),
      warn,
      refuse: (at, message) => this.#problems.add(at, message),
    };
    let schemas: OperationSchemas;
    try {
      schemas = buildOperationSchemas(operation, merged.parameters, pointer, ctx);
    } catch (error) {
      if (error instanceof SchemaBudgetError) {
        add({ pointer, message: "the schemas of this operation are too large once their $refs are inlined" });
        return undefined;
      }
      if (error instanceof SchemaDepthError) {
        add({ pointer, message: "a schema of this operation is nested too deeply" });
        return undefined;
      }
      throw error;
    }
    for (const source of schemas.sources) this.#check(source.schema, source.pointer);

    const redactions = readRedactions(
      own(operation, EXTENSION_REDACTIONS),
      appendPointer(pointer, EXTENSION_REDACTIONS),
      this.#options.defaultResponseRules,
    );
    redactions.problems.forEach(add);
    const constraints = readConstraints(
      own(operation, EXTENSION_CONSTRAINTS),
      appendPointer(pointer, EXTENSION_CONSTRAINTS),
      { ...schemas.names, hasBody: schemas.body !== null },
    );
    constraints.problems.forEach(add);
    const profile = readAuthProfile(
      own(operation, EXTENSION_AUTH_PROFILE),
      appendPointer(pointer, EXTENSION_AUTH_PROFILE),
      this.#options.authProfileRef,
    );
    profile.problems.forEach(add);

    if (this.#problems.size > problemsBefore || !base.ok) return undefined;

    const summary = optionalText(own(operation, "summary") ?? own(item, "summary"), 4096, "summary", warn);
    const description = optionalText(
      own(operation, "description") ?? own(item, "description"),
      65536,
      "description",
      warn,
    );
    const explicitId = own(operation, "operationId");
    return {
      method,
      path,
      pointer,
      explicitId: typeof explicitId === "string" && explicitId.length > 0 ? explicitId : undefined,
      bodyRequired: schemas.bodyRequired,
      snapshot: {
        method,
        path,
        ...(summary === undefined ? {} : { summary }),
        ...(description === undefined ? {} : { description }),
        input_schema: {
          path: schemas.path,
          query: schemas.query,
          headers: schemas.headers,
          body: schemas.body,
        },
        response_schema: schemas.response,
        upstream_url_template: `${base.base}${path}`,
        auth_profile_ref: profile.value,
        response_rules: redactions.value,
        parameter_constraints: constraints.value,
      },
    };
  }

  /**
   * Every schema must be valid JSON Schema 2020-12. Checked against the meta-schema rather
   * than compiled: compiling hundreds of schemas costs seconds, and the converter already
   * removes what only compilation would refuse (unknown keywords and formats, keywords ajv's
   * strict mode calls ignored) and refuses every pattern the linear-time engine cannot run,
   * at its location. Tests compile every schema.
   */
  #check(schema: JsonSchema, pointer: string): void {
    let valid: boolean;
    try {
      valid = this.#ajv.validateSchema(schema) === true;
    } catch {
      valid = false;
    }
    if (valid) return;
    const detail = this.#ajv.errorsText(this.#ajv.errors, { dataVar: "schema", separator: "; " });
    this.#problems.add(pointer, `not a valid JSON Schema 2020-12: ${sanitizeMessage(detail)}`);
  }

  #checkExplicitId(operation: Record<string, unknown>, pointer: string, label: string): void {
    const id = own(operation, "operationId");
    if (typeof id !== "string" || id.length === 0) return;
    const first = this.#explicitIds.get(id);
    if (first === undefined) this.#explicitIds.set(id, label);
    else
      this.#problems.add(
        appendPointer(pointer, "operationId"),
        `operationId ${JSON.stringify(id)} is already used by ${first}`,
      );
  }

  /** Explicit operationIds are unique by now; derived ones step aside with a hash suffix. */
  #settleIds(drafts: readonly Draft[]): Omit<ImportResult, "warnings"> {
    const taken = new Set(this.#explicitIds.keys());
    const operations: OperationSnapshot[] = [];
    const info: ImportedOperationInfo[] = [];
    for (const draft of drafts) {
      let id = draft.explicitId;
      if (id === undefined) {
        id = deriveOperationId(draft.method, draft.path);
        if (taken.has(id)) id = disambiguateOperationId(id, draft.method, draft.path);
        this.#warnings.add(`${draft.method} ${draft.path}: no operationId; using ${JSON.stringify(id)}`);
      }
      taken.add(id);
      const snapshot = { operation_id: id, ...draft.snapshot };
      try {
        validateOperationSnapshot(snapshot);
      } catch (error) {
        const message =
          error instanceof Error ? sanitizeMessage(error.message) : "invalid operation snapshot";
        this.#problems.add(draft.pointer, message);
        continue;
      }
      operations.push(snapshot);
      info.push({
        permission_id: buildPermissionId(this.#options.capabilityId, draft.method, draft.path),
        operation_id: id,
        pointer: draft.pointer,
        body_required: draft.bodyRequired,
      });
    }
    return { operations, operation_info: info };
  }
}

/**
 * Turns every HTTP operation of a parsed document into an operation snapshot. Throws
 * OpenApiImportError listing every problem, or ImportOptionsError for bad options.
 */
export function importOperations(parsed: ParsedOpenApi, options: ImportOptions): ImportResult {
  return new OperationImporter(parsed, validateOptions(options)).run();
}
