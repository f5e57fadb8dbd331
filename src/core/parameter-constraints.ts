import jsonPointer from "json-pointer";
import { compileLinearPattern, type LinearPattern, linearPatternProblem } from "./linear-pattern.ts";
import { compileSchema } from "./schema-validator.ts";
import { parameterConstraintSchema } from "./schemas/parameter-constraint.schema.ts";

export type ConstraintLocation = "path" | "query" | "header" | "body";
export type ConstraintScalar = string | number | boolean | null;

/** One signed parameter constraint, carried in an operation snapshot. */
export interface ParameterConstraint {
  readonly in: ConstraintLocation;
  /** Parameter name; for `body`, a JSON pointer into the JSON body ("/customer/id"). */
  readonly name: string;
  readonly required?: boolean;
  readonly allowed_values?: readonly ConstraintScalar[];
  readonly excluded_values?: readonly ConstraintScalar[];
  /** ECMAScript pattern that must match the whole value (implicitly anchored), run in linear time. */
  readonly pattern?: string;
  readonly max_length?: number;
  readonly minimum?: number;
  readonly maximum?: number;
}

/** The caller's arguments, already split by location. */
export interface ConstraintArguments {
  readonly path?: Readonly<Record<string, unknown>>;
  readonly query?: Readonly<Record<string, unknown>>;
  readonly headers?: Readonly<Record<string, unknown>>;
  readonly body?: unknown;
}

export interface ConstraintRollout {
  /** The environment enables parameter scoping. */
  readonly enabled: boolean;
  /** The policy-owner partner is on the parameter-scoping allowlist. */
  readonly partnerAllowlisted: boolean;
}

/**
 * A process's parameter-scoping rollout (SPEC: enforcement requires the environment to enable
 * parameter scoping and the policy-owner partner to be allowlisted): built once from the
 * settings, read by the decision stage of every path and by the constraint evaluation.
 */
export interface ConstraintsRolloutGate {
  /** The environment enables parameter scoping. */
  readonly enabled: boolean;
  /** Whether the policy-owner partner is on the parameter-scoping allowlist. */
  isPartnerAllowlisted(partnerId: string): boolean;
}

export function constraintsRolloutGate(settings: {
  readonly enabled: boolean;
  readonly partnerAllowlist: Iterable<string>;
}): ConstraintsRolloutGate {
  const allowlist: ReadonlySet<string> = new Set(settings.partnerAllowlist);
  return {
    enabled: settings.enabled === true,
    isPartnerAllowlisted: (partnerId) => allowlist.has(partnerId),
  };
}

/** Whether the rollout covers this policy-owner partner: its signed constraints are enforced. */
export function rolloutCovers(gate: ConstraintsRolloutGate, partnerId: string): boolean {
  return gate.enabled && gate.isPartnerAllowlisted(partnerId);
}

/**
 * The snapshot carries signed constraints, which only a covering rollout may enforce (metadata
 * that is not an array is refused by the evaluation itself, `constraint_metadata_invalid`).
 */
export function hasConstraints(constraints: unknown): boolean {
  return Array.isArray(constraints) && constraints.length > 0;
}

export type ConstraintFailureCode =
  | "constraint_violation"
  | "constraint_metadata_invalid"
  | "constraint_rollout_disabled";

export type ConstraintResult =
  | { readonly ok: true }
  | { readonly ok: false; readonly code: ConstraintFailureCode; readonly message: string };

/** Longer values are never run through a pattern; they fail the constraint. */
export const MAX_PATTERN_INPUT_LENGTH = 1024;

const OK: ConstraintResult = { ok: true };

const fail = (code: ConstraintFailureCode, message: string): ConstraintResult => ({
  ok: false,
  code,
  message,
});

const checkShape = compileSchema<ParameterConstraint>(parameterConstraintSchema);

interface Prepared {
  readonly constraint: ParameterConstraint;
  readonly label: string;
  readonly regex: LinearPattern | undefined;
  readonly pointer: string[] | undefined;
}

function describe(constraint: { in?: unknown; name?: unknown }, index: number): string {
  return typeof constraint.in === "string" && typeof constraint.name === "string"
    ? `${constraint.in} parameter ${JSON.stringify(constraint.name.slice(0, 128))}`
    : `constraint ${index}`;
}

function prepare(raw: unknown, index: number): Prepared | string {
  const shape = checkShape(raw);
  if (!shape.ok) return `constraint ${index}: ${shape.messages.join("; ")}`;
  const constraint = shape.value;
  const label = describe(constraint, index);
  let pointer: string[] | undefined;
  if (constraint.in === "body") {
    if (!constraint.name.startsWith("/") || /~(?![01])/.test(constraint.name)) {
      return `${label}: body names must be JSON pointers`;
    }
    pointer = jsonPointer.parse(constraint.name);
  }
  if (
    constraint.minimum !== undefined &&
    constraint.maximum !== undefined &&
    constraint.minimum > constraint.maximum
  ) {
    return `${label}: minimum is above maximum`;
  }
  const excluded = constraint.excluded_values ?? [];
  if (constraint.allowed_values?.some((a) => excluded.some((x) => Object.is(a, x)))) {
    return `${label}: a value is both allowed and excluded`;
  }
  let regex: LinearPattern | undefined;
  if (constraint.pattern !== undefined) {
    // The pattern alone first: one that is valid only once wrapped ("a)|(b") would escape the anchors.
    const problem = linearPatternProblem(constraint.pattern);
    if (problem !== undefined) return `${label}: pattern cannot be used: ${problem}`;
    regex = compileLinearPattern(`^(?:${constraint.pattern})$`);
  }
  return { constraint, label, regex, pointer };
}

/**
 * Checks constraint metadata without evaluating any argument: for import and policy
 * compilation, so bad metadata is refused before it is signed.
 */
export function checkConstraintMetadata(constraints: readonly unknown[]): ConstraintResult {
  if (!Array.isArray(constraints)) return fail("constraint_metadata_invalid", "constraints must be an array");
  for (let i = 0; i < constraints.length; i++) {
    const prepared = prepare(constraints[i], i);
    if (typeof prepared === "string") return fail("constraint_metadata_invalid", prepared);
  }
  return OK;
}

function lookup(args: ConstraintArguments, prepared: Prepared): unknown {
  const { constraint } = prepared;
  switch (constraint.in) {
    case "path":
    case "query": {
      const bag = args[constraint.in];
      return bag !== undefined && Object.hasOwn(bag, constraint.name) ? bag[constraint.name] : undefined;
    }
    case "header": {
      const bag = args.headers ?? {};
      const wanted = constraint.name.toLowerCase();
      // Every spelling of the header counts: each of its values must pass.
      const found = Object.keys(bag)
        .filter((k) => k.toLowerCase() === wanted)
        .flatMap((k) => {
          const v = bag[k];
          return Array.isArray(v) ? v : [v];
        })
        .filter((v) => v !== undefined);
      return found.length === 0 ? undefined : found.length === 1 ? found[0] : found;
    }
    case "body": {
      let node: unknown = args.body;
      for (const token of prepared.pointer ?? []) {
        if (Array.isArray(node)) {
          if (!/^(?:0|[1-9][0-9]*)$/.test(token) || Number(token) >= node.length) return undefined;
          node = node[Number(token)];
        } else if (typeof node === "object" && node !== null && Object.hasOwn(node, token)) {
          node = (node as Record<string, unknown>)[token];
        } else {
          return undefined;
        }
      }
      return node;
    }
  }
}

const DECIMAL = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$/;

/** A strict reading, for bounds: only a finite number or a plain decimal string. */
function strictNumber(value: unknown): number | undefined {
  if (typeof value === "number") return Number.isFinite(value) ? value : undefined;
  if (typeof value === "string" && DECIMAL.test(value)) {
    const n = Number(value);
    return Number.isFinite(n) ? n : undefined;
  }
  return undefined;
}

/** A broad reading, for exclusions: anything an upstream might take for the same number. */
function looseNumber(value: unknown): number | undefined {
  if (typeof value === "number") return Number.isFinite(value) ? value : undefined;
  if (typeof value === "string" && value.trim() !== "") {
    const n = Number(value);
    return Number.isFinite(n) ? n : undefined;
  }
  return undefined;
}

function scalarText(value: ConstraintScalar): string {
  return typeof value === "string" ? value : String(value);
}

/** Allowed values match exactly; a string argument may spell a non-string value exactly. */
function sameValue(expected: ConstraintScalar, actual: ConstraintScalar): boolean {
  if (expected === actual) return true;
  return typeof actual === "string" && typeof expected !== "string" && String(expected) === actual;
}

/** Exclusions match broadly ("0.0", " 0" and 0 are all 0) so they cannot be slipped past. */
function matchesExcluded(excluded: ConstraintScalar, actual: ConstraintScalar): boolean {
  if (sameValue(excluded, actual) || (typeof excluded === "string" && String(actual) === excluded))
    return true;
  const a = looseNumber(actual);
  const b = looseNumber(excluded);
  return a !== undefined && b !== undefined && a === b;
}

function isScalar(value: unknown): value is ConstraintScalar {
  const type = typeof value;
  return value === null || type === "string" || type === "number" || type === "boolean";
}

function checkValue(prepared: Prepared, value: unknown): string | undefined {
  const { constraint } = prepared;
  if (!isScalar(value)) return "value must be a single scalar";
  if (typeof value === "number" && !Number.isFinite(value)) return "value must be finite";
  if (
    constraint.allowed_values !== undefined &&
    !constraint.allowed_values.some((a) => sameValue(a, value))
  ) {
    return "value is not allowed";
  }
  if (constraint.excluded_values?.some((x) => matchesExcluded(x, value))) return "value is excluded";
  const text = scalarText(value);
  if (prepared.regex !== undefined) {
    if (text.length > MAX_PATTERN_INPUT_LENGTH) return "value is too long to check against the pattern";
    if (!prepared.regex.test(text)) return "value does not match the pattern";
  }
  if (constraint.max_length !== undefined && Array.from(text).length > constraint.max_length) {
    return "value is too long";
  }
  if (constraint.minimum !== undefined || constraint.maximum !== undefined) {
    const n = strictNumber(value);
    if (n === undefined) return "value must be a number";
    if (constraint.minimum !== undefined && n < constraint.minimum) return "value is below the minimum";
    if (constraint.maximum !== undefined && n > constraint.maximum) return "value is above the maximum";
  }
  return undefined;
}

function hasValueChecks(c: ParameterConstraint): boolean {
  return (
    c.allowed_values !== undefined ||
    c.excluded_values !== undefined ||
    c.pattern !== undefined ||
    c.max_length !== undefined ||
    c.minimum !== undefined ||
    c.maximum !== undefined
  );
}

/**
 * Prepared constraints per constraints array (shape checked, labels and patterns compiled),
 * or the first metadata problem. A verified snapshot's array is the same object on every
 * request the sidecar decides, so this is done once per policy, not per request; an array
 * decoded per request (the executor) is prepared each time, as before. Both are treated as
 * immutable once evaluated, as every snapshot is.
 */
const preparedByArray = new WeakMap<readonly unknown[], readonly Prepared[] | string>();

function preparedFor(constraints: readonly unknown[]): readonly Prepared[] | string {
  const known = preparedByArray.get(constraints);
  if (known !== undefined) return known;
  let result: Prepared[] | string = [];
  for (let i = 0; i < constraints.length; i++) {
    const item = prepare(constraints[i], i);
    if (typeof item === "string") {
      result = item;
      break;
    }
    result.push(item);
  }
  preparedByArray.set(constraints, result);
  return result;
}

/**
 * Evaluates signed constraints from the verified snapshot against the arguments, before
 * any secret is loaded or request sent. No constraints: ok. Otherwise fail closed when
 * the rollout is off, when any constraint's metadata is invalid (a pattern the linear-time
 * engine cannot run included), and on the
 * first violated constraint. Arrays (repeated query parameters or headers, JSON arrays)
 * are checked element by element. Messages name the parameter, never its value.
 */
export function evaluateConstraints(
  constraints: readonly unknown[],
  args: ConstraintArguments,
  rollout: ConstraintRollout,
): ConstraintResult {
  if (!Array.isArray(constraints)) return fail("constraint_metadata_invalid", "constraints must be an array");
  if (constraints.length === 0) return OK;
  if (rollout.enabled !== true || rollout.partnerAllowlisted !== true) {
    return fail("constraint_rollout_disabled", "parameter constraints are not enabled for this partner");
  }
  const prepared = preparedFor(constraints);
  if (typeof prepared === "string") return fail("constraint_metadata_invalid", prepared);
  for (const item of prepared) {
    const raw = lookup(args, item);
    const values = Array.isArray(raw) ? raw : raw === undefined ? [] : [raw];
    if (values.length === 0) {
      if (item.constraint.required === true)
        return fail("constraint_violation", `${item.label}: value is required`);
      if (raw === undefined) continue;
    }
    if (!hasValueChecks(item.constraint)) continue;
    for (const value of values) {
      const problem = checkValue(item, value);
      if (problem !== undefined) return fail("constraint_violation", `${item.label}: ${problem}`);
    }
  }
  return OK;
}
