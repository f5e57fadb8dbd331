import { checkConstraintMetadata, type ParameterConstraint } from "../core/parameter-constraints.ts";
import type { RedactionRule } from "../core/redaction.ts";
import { compileSchema } from "../core/schema-validator.ts";
import { redactionRuleSchema } from "../core/schemas/redaction-rule.schema.ts";
import { appendPointer } from "./json-pointer.ts";

/** Where an operation's parameters live, for checking that constraints name real ones. */
export interface DeclaredParameters {
  readonly path: ReadonlySet<string>;
  readonly query: ReadonlySet<string>;
  /** Lower case. */
  readonly header: ReadonlySet<string>;
  readonly hasBody: boolean;
}

export type Problem = { readonly pointer: string; readonly message: string };

type Parsed<T> = { readonly value: T; readonly problems: readonly Problem[] };

export const EXTENSION_REDACTIONS = "x-authority-redactions";
export const EXTENSION_CONSTRAINTS = "x-authority-constraints";
export const EXTENSION_AUTH_PROFILE = "x-authority-auth-profile";

const checkRule = compileSchema<RedactionRule>(redactionRuleSchema);

/** Checks one redaction rule; an empty path would redact the whole body and is refused. */
export function redactionRuleProblem(value: unknown): string | undefined {
  const path = typeof value === "object" && value !== null ? (value as { path?: unknown }).path : undefined;
  if (typeof path === "string" && path !== "" && !path.startsWith("/")) {
    return "path must be a JSON pointer such as /items/*/card_number";
  }
  const result = checkRule(value);
  if (!result.ok) return result.messages.join("; ");
  const rule = result.value;
  if (rule.path === "") return "path must name a field, not the whole body";
  if (rule.mode === "remove" && rule.keep_last !== undefined) return "keep_last applies to mode mask only";
  return undefined;
}

function copyRule(rule: RedactionRule): RedactionRule {
  return rule.keep_last === undefined
    ? { path: rule.path, mode: rule.mode }
    : { path: rule.path, mode: rule.mode, keep_last: rule.keep_last };
}

/**
 * `x-authority-redactions` of an operation, merged over the import's default rules: an
 * operation rule replaces a default rule for the same path.
 */
export function readRedactions(
  raw: unknown,
  pointer: string,
  defaults: readonly RedactionRule[],
): Parsed<RedactionRule[]> {
  const problems: Problem[] = [];
  const own: RedactionRule[] = [];
  if (raw !== undefined) {
    if (!Array.isArray(raw)) {
      problems.push({ pointer, message: `${EXTENSION_REDACTIONS} must be an array of rules` });
    } else {
      raw.forEach((item: unknown, index) => {
        const problem = redactionRuleProblem(item);
        if (problem !== undefined)
          problems.push({ pointer: appendPointer(pointer, index), message: problem });
        else own.push(copyRule(item as RedactionRule));
      });
    }
  }
  const paths = new Set(own.map((r) => r.path));
  const merged = [...defaults.filter((r) => !paths.has(r.path)).map(copyRule), ...own];
  return { value: merged, problems };
}

/** `x-authority-constraints`: core's metadata checks plus "the parameter exists". */
export function readConstraints(
  raw: unknown,
  pointer: string,
  declared: DeclaredParameters,
): Parsed<ParameterConstraint[]> {
  const problems: Problem[] = [];
  const constraints: ParameterConstraint[] = [];
  if (raw === undefined) return { value: constraints, problems };
  if (!Array.isArray(raw)) {
    return {
      value: constraints,
      problems: [{ pointer, message: `${EXTENSION_CONSTRAINTS} must be an array` }],
    };
  }
  raw.forEach((item: unknown, index) => {
    const at = appendPointer(pointer, index);
    const checked = checkConstraintMetadata([item]);
    if (!checked.ok) {
      problems.push({ pointer: at, message: checked.message.replace(/^constraint 0: /, "") });
      return;
    }
    const constraint = structuredClone(item) as ParameterConstraint;
    const missing = constraintTargetProblem(constraint, declared);
    if (missing !== undefined) {
      problems.push({ pointer: at, message: missing });
      return;
    }
    constraints.push(
      constraint.in === "header" ? { ...constraint, name: constraint.name.toLowerCase() } : constraint,
    );
  });
  return { value: constraints, problems };
}

function constraintTargetProblem(
  constraint: ParameterConstraint,
  declared: DeclaredParameters,
): string | undefined {
  const name = JSON.stringify(constraint.name);
  switch (constraint.in) {
    case "path":
      return declared.path.has(constraint.name) ? undefined : `path parameter ${name} is not declared`;
    case "query":
      return declared.query.has(constraint.name) ? undefined : `query parameter ${name} is not declared`;
    case "header":
      return declared.header.has(constraint.name.toLowerCase())
        ? undefined
        : `header ${name} is not declared`;
    case "body":
      return declared.hasBody ? undefined : "the operation has no JSON request body to constrain";
  }
}

const PROFILE_REF = /^[\x21-\x7e]{1,256}$/;

export function isValidAuthProfileRef(value: unknown): value is string {
  return typeof value === "string" && PROFILE_REF.test(value);
}

/** `x-authority-auth-profile` of an operation, or the import's default. */
export function readAuthProfile(raw: unknown, pointer: string, fallback: string): Parsed<string> {
  if (raw === undefined) return { value: fallback, problems: [] };
  if (!isValidAuthProfileRef(raw)) {
    return {
      value: fallback,
      problems: [
        { pointer, message: `${EXTENSION_AUTH_PROFILE} must be 1-256 printable characters without spaces` },
      ],
    };
  }
  return { value: raw, problems: [] };
}
