import { Ajv2020, type ErrorObject, type ValidateFunction } from "ajv/dist/2020.js";
import formatsPlugin from "ajv-formats";
import { LRUCache } from "lru-cache";
import { checkJsonBounds } from "../core/bounded-json.ts";
import { canonicalJson, hashCanonical } from "../core/canonical-json.ts";
import { linearRegExp, UnsupportedPatternError } from "../core/linear-pattern.ts";
import { setOwn } from "../core/own-property.ts";
import { type ConstraintRollout, evaluateConstraints } from "../core/parameter-constraints.ts";
import { ExecutionError } from "./errors.ts";
import { ROUTING_OVERRIDE_HEADERS, ROUTING_OVERRIDE_PARAMETERS } from "./routing-overrides.ts";

/** What a caller passes to one operation: each part validated against the snapshot. */
export interface ExecutionArgs {
  readonly path?: Record<string, unknown>;
  readonly query?: Record<string, unknown>;
  readonly headers?: Record<string, unknown>;
  readonly body?: unknown;
}

/** The arguments after validation: parameter sections are copies with types coerced. */
export interface ValidatedArgs {
  readonly path: Record<string, unknown>;
  readonly query: Record<string, unknown>;
  readonly headers: Record<string, unknown>;
  readonly body: unknown;
  readonly hasBody: boolean;
}

export interface InputOptions {
  /**
   * The parameter sections are objects built for this one call and owned by nobody else (the
   * sidecar's request parts): coerced in place instead of copied first.
   */
  readonly fresh?: boolean;
}

type SchemaSection = object | boolean | null | undefined;

/** The snapshot's input schema: one JSON Schema (2020-12) per part, absent when not accepted. */
export interface InputSchema {
  readonly path?: SchemaSection;
  readonly query?: SchemaSection;
  readonly headers?: SchemaSection;
  readonly body?: SchemaSection;
}

const PARAM_SECTIONS = ["path", "query", "headers"] as const;
const SECTIONS = [...PARAM_SECTIONS, "body"] as const;
type ParamSection = (typeof PARAM_SECTIONS)[number];
type Section = ParamSection | "body";

interface CompiledInput {
  readonly validators: Readonly<Record<Section, ValidateFunction | undefined>>;
  /** Per section: false when its schema admits no routing-override name (nothing to scan for). */
  readonly mayOverride: { readonly query: boolean; readonly headers: boolean };
}

/** One error, safe to return: where and which keyword, never the offending value. */
export interface InputIssue {
  readonly location: Section | "arguments";
  readonly pointer: string;
  readonly keyword: string;
  /** For `required`: the schema's property name (from the reviewed schema, not the caller). */
  readonly missing?: string;
}

const MAX_POINTER_LENGTH = 200;

const addFormats = formatsPlugin.default;

function newAjv(coerce: boolean, validateSchema = true): Ajv2020 {
  // strict: false because imported OpenAPI schemas carry annotations (example, nullable,
  // x-*) that strict mode rejects; allErrors: false stops at the first error so a hostile
  // document cannot make validation expensive. ownProperties: a parameter named like one of
  // Object.prototype's members (`constructor`, `toString`) is present only when sent. Every
  // pattern runs on the linear-time engine (docs/decisions/2502).
  const ajv = new Ajv2020({
    strict: false,
    ownProperties: true,
    allErrors: false,
    coerceTypes: coerce ? "array" : false,
    useDefaults: false,
    removeAdditional: false,
    validateSchema,
    // optimize: false skips ajv's pass over the generated code: a schema's compile (a sidecar's
    // first Check of an operation) costs ≈ 5 ms less CPU of ≈ 10; its validations no more (3081).
    code: { regExp: linearRegExp, optimize: false },
  });
  addFormats(ajv);
  linearUniqueItems(ajv);
  return ajv;
}

/**
 * `uniqueItems` in linear time. Ajv compares items of any non-scalar type pairwise (n²/2
 * deep comparisons: 8,000 small objects took a second), and the schema is a partner's while
 * the array is the caller's. Here each item's canonical form goes into a set: the same
 * equality (key order ignored, -0 equal to 0), one pass.
 */
function linearUniqueItems(ajv: Ajv2020): void {
  ajv.removeKeyword("uniqueItems");
  ajv.addKeyword({
    keyword: "uniqueItems",
    type: "array",
    schemaType: "boolean",
    errors: false,
    validate: (unique: boolean, items: unknown[]) => {
      if (!unique) return true;
      const seen = new Set<string>();
      for (const item of items) {
        const key = canonicalJson(item);
        if (seen.has(key)) return false;
        seen.add(key);
      }
      return true;
    },
  });
}

// Path, query and header values travel as strings on HTTP routes (broker, sidecar), so
// those sections coerce ("10" → 10); the JSON body never does.
// Every section's schema is checked against the 2020-12 meta-schema before it is compiled, by
// paramsAjv: the body's compiler leaves that check to it, so a process compiles the (large)
// meta-schema once instead of once per compiler.
const paramsAjv = newAjv(true);
const bodyAjv = newAjv(false, false);

const bySchemaObject = new WeakMap<object, CompiledInput>();
// Snapshots decoded per request are new objects each time: a bounded cache by content
// hash keeps one compilation per distinct schema.
const byHash = new LRUCache<string, CompiledInput>({ max: 512 });

function forget(ajv: Ajv2020, schema: object | boolean): void {
  // Ajv keeps every compiled schema object (and any $id) forever; the caches here own
  // lifetime instead. Boolean schemas are not kept (and removeSchema refuses them).
  if (typeof schema === "object") ajv.removeSchema(schema);
}

/**
 * Whether a schema declares a property named `__proto__` at any depth. Ajv leaves such a
 * property unchecked (it never applies a `__proto__` subschema), so an instance could carry
 * any value under that name: the operation is refused instead (fail closed).
 */
function declaresProtoProperty(schema: unknown, depth = 0): boolean {
  if (typeof schema !== "object" || schema === null) return false;
  if (depth > 200) return true;
  const { properties } = schema as { properties?: unknown };
  if (typeof properties === "object" && properties !== null && Object.hasOwn(properties, "__proto__"))
    return true;
  for (const value of Object.values(schema)) if (declaresProtoProperty(value, depth + 1)) return true;
  return false;
}

function compileSection(ajv: Ajv2020, schema: SchemaSection): ValidateFunction | undefined {
  if (schema === undefined || schema === null) return undefined;
  try {
    if (declaresProtoProperty(schema)) throw new Error("a __proto__ property is never checked");
    if (ajv === bodyAjv && !paramsAjv.validateSchema(schema)) throw new Error("not a valid JSON Schema");
    return ajv.compile(schema);
  } catch (error) {
    // A pattern stored before patterns were checked at import that linear time cannot run.
    const issue =
      error instanceof UnsupportedPatternError ? "input_schema_pattern_unsupported" : "input_schema_invalid";
    throw new ExecutionError("invalid_operation_snapshot", { details: { issue } });
  } finally {
    forget(ajv, schema);
  }
}

/**
 * The only property names an instance valid against `schema` can have, or undefined when it
 * may have others. `additionalProperties: false` without `patternProperties` admits exactly the
 * names of `properties`, whatever else the schema says (every keyword must pass).
 */
function closedNames(schema: SchemaSection): string[] | undefined {
  if (schema === null || schema === undefined) return []; // Not accepted: no name at all.
  if (typeof schema !== "object") return undefined;
  const { additionalProperties, patternProperties, properties } = schema as Record<string, unknown>;
  if (additionalProperties !== false || patternProperties !== undefined) return undefined;
  if (properties === undefined) return [];
  return typeof properties === "object" && properties !== null ? Object.keys(properties) : undefined;
}

function mayCarry(schema: SchemaSection, names: ReadonlySet<string>): boolean {
  const admitted = closedNames(schema);
  return admitted === undefined || admitted.some((name) => names.has(name.toLowerCase()));
}

function compile(schema: InputSchema): CompiledInput {
  return {
    validators: {
      path: compileSection(paramsAjv, schema.path),
      query: compileSection(paramsAjv, schema.query),
      headers: compileSection(paramsAjv, schema.headers),
      body: compileSection(bodyAjv, schema.body),
    },
    mayOverride: {
      query: mayCarry(schema.query, ROUTING_OVERRIDE_PARAMETERS),
      headers: mayCarry(schema.headers, ROUTING_OVERRIDE_HEADERS),
    },
  };
}

function compiledFor(schema: InputSchema): CompiledInput {
  const direct = bySchemaObject.get(schema);
  if (direct !== undefined) return direct;
  let key: string;
  try {
    key = hashCanonical(schema);
  } catch {
    throw new ExecutionError("invalid_operation_snapshot", { details: { issue: "input_schema_invalid" } });
  }
  let compiled = byHash.get(key);
  if (compiled === undefined) {
    compiled = compile(schema);
    byHash.set(key, compiled);
  }
  bySchemaObject.set(schema, compiled);
  return compiled;
}

function truncate(pointer: string): string {
  return pointer.length > MAX_POINTER_LENGTH ? `${pointer.slice(0, MAX_POINTER_LENGTH)}…` : pointer;
}

function invalid(issue: InputIssue): ExecutionError {
  const where = `${issue.location}${issue.pointer === "" ? "" : issue.pointer}`;
  const message =
    issue.missing === undefined
      ? `Invalid input at ${where}: ${issue.keyword}.`
      : `Invalid input at ${where}: required property "${issue.missing}" is missing.`;
  return new ExecutionError("invalid_input", { message, details: { issues: [issue] } });
}

function issueFrom(location: Section, error: ErrorObject | undefined): InputIssue {
  if (error === undefined) return { location, pointer: "", keyword: "invalid" };
  const missing = error.keyword === "required" ? error.params.missingProperty : undefined;
  return typeof missing === "string"
    ? { location, pointer: truncate(error.instancePath), keyword: error.keyword, missing: truncate(missing) }
    : { location, pointer: truncate(error.instancePath), keyword: error.keyword };
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

const ALLOWED_KEYS: ReadonlySet<string> = new Set(["path", "query", "headers", "body"]);

function checkShape(args: unknown): asserts args is ExecutionArgs {
  if (!isPlainObject(args)) throw invalid({ location: "arguments", pointer: "", keyword: "type" });
  for (const key of Object.keys(args)) {
    // The key is one the caller chose: report the keyword only.
    if (!ALLOWED_KEYS.has(key)) {
      throw invalid({ location: "arguments", pointer: "", keyword: "additionalProperties" });
    }
  }
  for (const section of PARAM_SECTIONS) {
    const value = args[section];
    if (value !== undefined && !isPlainObject(value)) {
      throw invalid({ location: section, pointer: "", keyword: "type" });
    }
  }
}

function isScalar(value: unknown): boolean {
  return value === null || (typeof value !== "object" && typeof value !== "function");
}

/**
 * A copy coercion cannot reach through: HTTP parameters (scalars and lists of scalars) are
 * copied one level deep — a structuredClone costs microseconds on the sidecar's hot path —
 * anything nested is cloned whole.
 */
function copyParams(value: Record<string, unknown>): Record<string, unknown> {
  const copy: Record<string, unknown> = {};
  for (const name of Object.keys(value)) {
    const item = value[name];
    let copied: unknown;
    if (isScalar(item)) copied = item;
    else if (Array.isArray(item) && item.every(isScalar)) copied = [...item];
    else return structuredClone(value);
    setOwn(copy, name, copied);
  }
  return copy;
}

function validateParams(
  section: ParamSection,
  validate: ValidateFunction | undefined,
  value: Record<string, unknown> | undefined,
  fresh: boolean,
): Record<string, unknown> {
  // A copy, because coercion rewrites values in place and the caller's object stays theirs.
  const copy: Record<string, unknown> = value === undefined ? {} : fresh ? value : copyParams(value);
  if (validate === undefined) {
    if (Object.keys(copy).length > 0) {
      throw invalid({ location: section, pointer: "", keyword: "notAccepted" });
    }
    return copy;
  }
  if (!validate(copy)) throw invalid(issueFrom(section, validate.errors?.[0]));
  refuseIllFormed(section, copy);
  return copy;
}

const illFormed = (item: unknown): boolean => typeof item === "string" && !item.isWellFormed();

/**
 * A parameter must be sendable: a string with a lone surrogate has no UTF-8 form, so no URL
 * or header can carry it. Refused here, with the schema, so that it is invalid_input before
 * the constraints on every path (rendering would refuse it later, after them on some paths).
 */
function refuseIllFormed(section: ParamSection, params: Readonly<Record<string, unknown>>): void {
  for (const name in params) {
    if (!Object.hasOwn(params, name)) continue;
    const value = params[name];
    if (Array.isArray(value) ? value.some(illFormed) : illFormed(value)) {
      throw invalid({ location: section, pointer: "", keyword: "wellFormed" });
    }
  }
}

/**
 * Validates a caller's arguments against the snapshot's input schema (JSON Schema
 * 2020-12 + formats). Throws `ExecutionError("invalid_input")` whose message and
 * details carry a JSON pointer and a keyword, never a value.
 */
export function validateInput(
  inputSchema: InputSchema,
  args: unknown,
  options: InputOptions = {},
): ValidatedArgs {
  checkShape(args);
  return validateCompiled(compiledFor(inputSchema), args, options);
}

function validateCompiled(
  { validators }: CompiledInput,
  args: ExecutionArgs,
  options: InputOptions,
): ValidatedArgs {
  // Every path's arguments, however they arrived, within the JSON limits before ajv walks them.
  for (const section of SECTIONS) checkJsonBounds(args[section], section);
  const fresh = options.fresh === true;
  const path = validateParams("path", validators.path, args.path, fresh);
  const query = validateParams("query", validators.query, args.query, fresh);
  const headers = validateParams("headers", validators.headers, args.headers, fresh);
  const hasBody = args.body !== undefined;
  if (!hasBody) return { path, query, headers, body: undefined, hasBody };
  const validateBody = validators.body;
  if (validateBody === undefined) throw invalid({ location: "body", pointer: "", keyword: "notAccepted" });
  if (!validateBody(args.body)) throw invalid(issueFrom("body", validateBody.errors?.[0]));
  return { path, query, headers, body: args.body, hasBody };
}

function overrideIn(record: Readonly<Record<string, unknown>>, names: ReadonlySet<string>): boolean {
  for (const name in record) {
    if (Object.hasOwn(record, name) && names.has(name.toLowerCase())) return true;
  }
  return false;
}

/** Validated sections only: a section whose schema admits no override name is not scanned. */
function refuseRoutingOverrides(args: ValidatedArgs, compiled: CompiledInput): void {
  const issue = (location: Section): ExecutionError =>
    invalid({ location, pointer: "", keyword: "routingOverride" });
  if (compiled.mayOverride.query && overrideIn(args.query, ROUTING_OVERRIDE_PARAMETERS)) throw issue("query");
  if (compiled.mayOverride.headers && overrideIn(args.headers, ROUTING_OVERRIDE_HEADERS))
    throw issue("headers");
  if (isPlainObject(args.body) && overrideIn(args.body, ROUTING_OVERRIDE_PARAMETERS)) throw issue("body");
}

/** What the enforcement step reads from a verified operation snapshot. */
export interface EnforcedOperation {
  readonly method: string;
  readonly input_schema: InputSchema;
  readonly parameter_constraints: readonly unknown[];
}

const BODYLESS_METHODS: ReadonlySet<string> = new Set(["GET", "HEAD"]);

/**
 * The one "validate input + evaluate constraints" step of every path that lets a request
 * reach an upstream (invoke, broker, MCP through the executor; ext_authz and the forward
 * proxy through the sidecar engine): the arguments against the snapshot's input schema,
 * routing overrides refused, then the signed parameter constraints with the rollout gate.
 * Throws `ExecutionError` — `invalid_input` (400), `constraint_violation` (403),
 * `constraint_rollout_disabled` (operation_not_allowed, 403), `constraint_metadata_invalid`
 * (policy_verification_failed, 403) — so every path answers the same reason and status.
 */
export function enforceOperationInput(
  operation: EnforcedOperation,
  args: unknown,
  rollout: ConstraintRollout,
  options: InputOptions = {},
): ValidatedArgs {
  checkShape(args);
  const compiled = compiledFor(operation.input_schema);
  const validated = validateCompiled(compiled, args, options);
  const method = typeof operation.method === "string" ? operation.method.toUpperCase() : "";
  if (validated.hasBody && BODYLESS_METHODS.has(method)) {
    throw invalid({ location: "body", pointer: "", keyword: "notAccepted" });
  }
  refuseRoutingOverrides(validated, compiled);
  const verdict = evaluateConstraints(
    operation.parameter_constraints,
    { path: validated.path, query: validated.query, headers: validated.headers, body: validated.body },
    rollout,
  );
  if (!verdict.ok) throw new ExecutionError(verdict.code, { message: verdict.message });
  return validated;
}

/** Whether the snapshot's constraints read the JSON body (the sidecar then needs to see it). */
export function constrainsBody(operation: EnforcedOperation): boolean {
  const constraints = operation.parameter_constraints;
  if (!Array.isArray(constraints)) return false;
  for (const constraint of constraints) {
    if ((constraint as { in?: unknown } | null)?.in === "body") return true;
  }
  return false;
}
