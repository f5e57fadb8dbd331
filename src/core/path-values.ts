/**
 * Path-parameter values that could make an upstream run another operation of the catalog.
 *
 * The decision maps a request to a template (`GET /things/{id}`); the upstream routes the
 * concrete path with its own rules, and many of those rules are looser than ours: servlet
 * containers drop `;…`, some routers fold case or strip a `.json` suffix, some trim trailing
 * dots or whitespace, drop zero-width characters or an NTFS stream suffix, decode a second
 * time, or compare Unicode compatibility forms. A value is *ambiguous* when, under any of
 * those (the documented list: segment-normalization.ts), it could equal a literal segment
 * that a sibling template has at the same position (`GET /things/me`), or when it is not
 * one plain segment at all. Rules and reasons: docs/core.md and docs/decisions/0301.
 */
import { type Capability, catalogMatcher, operationPermissionId } from "./capability.ts";
import { compileLinearPattern, type LinearPattern, linearPatternProblem } from "./linear-pattern.ts";
import type { OperationSnapshot } from "./operation-snapshot.ts";
import { type ParsedPathTemplate, parsePathTemplate, type TemplateSegment } from "./path-template.ts";
import {
  canonicalKeys,
  caseKeys,
  claimedBy,
  compatibilityForm,
  decodedAgain,
  type MixedSegment,
  mixedClaims,
  type SiblingSegments,
  siblingSegments,
} from "./segment-normalization.ts";

/** What one parameter position of a route is checked against. */
interface GuardedPosition {
  readonly position: number;
  /** The segment as written in the template ("{id}", "{name}.{ext}"): the unrendered form. */
  readonly placeholder: string;
  /** The literal and mixed segments sibling templates have at this position. */
  readonly siblings: SiblingSegments;
}

type RouteGuard = readonly GuardedPosition[];

const guards = new WeakMap<Capability, readonly (RouteGuard | undefined)[]>();

function placeholderOf(segment: TemplateSegment): string {
  if (segment.kind === "param") return `{${segment.name}}`;
  if (segment.kind === "literal") return segment.value;
  return segment.parts.map((p) => ("literal" in p ? p.literal : `{${p.param}}`)).join("");
}

/** Could a request segment matched by `a` at this position also be one matched by `b`? */
function compatible(a: TemplateSegment, b: TemplateSegment): boolean {
  if (a.kind !== "literal" || b.kind !== "literal") return true;
  const fa = canonicalKeys(a.value);
  return canonicalKeys(b.value).some((k) => fa.includes(k));
}

/**
 * Siblings are templates of any method with as many segments whose other positions can
 * match the same request: a method override (`X-HTTP-Method-Override`, `_method=`) or a
 * router that matches the path before the method reaches them as easily as a same-method
 * sibling, so every method counts.
 */
function buildGuards(capability: Capability): readonly (RouteGuard | undefined)[] {
  const parsed: (ParsedPathTemplate | undefined)[] = capability.operations.map((op) => {
    try {
      return parsePathTemplate(op.path);
    } catch {
      return undefined;
    }
  });
  return parsed.map((route, index) => {
    if (route === undefined) return undefined;
    const guarded: GuardedPosition[] = [];
    route.segments.forEach((segment, position) => {
      if (segment.kind === "literal") return;
      const literals: string[] = [];
      const mixed: MixedSegment[] = [];
      parsed.forEach((other, otherIndex) => {
        if (other === undefined || otherIndex === index) return;
        if (other.segments.length !== route.segments.length) return;
        const at = other.segments[position];
        if (at === undefined || at.kind === "param") return;
        // A mixed sibling guards mixed segments too: our matcher ranks two mixed segments by
        // their literal characters, but an upstream ranks them its own way (often by order), so
        // a value one of its reductions could route to the sibling is ambiguous.
        for (let j = 0; j < route.segments.length; j++) {
          if (j === position) continue;
          const mine = route.segments[j];
          const theirs = other.segments[j];
          if (mine === undefined || theirs === undefined || !compatible(mine, theirs)) return;
        }
        if (at.kind === "literal") literals.push(at.value);
        else mixed.push(at);
      });
      guarded.push({
        position,
        placeholder: placeholderOf(segment),
        siblings: siblingSegments(literals, mixed),
      });
    });
    return guarded;
  });
}

function routeGuard(capability: Capability, index: number): RouteGuard | undefined {
  let all = guards.get(capability);
  if (all === undefined) {
    all = buildGuards(capability);
    guards.set(capability, all);
  }
  return all[index];
}

/** Characters that end or split a segment for some upstream, and controls. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: controls are what this refuses.
const STRUCTURAL = /[/?#;\\\u0000-\u001f\u007f]/;
/** Values made only of these need no decoding, folding beyond ASCII or reduction (the per-request common case). */
const PLAIN = /^[A-Za-z0-9_-]+$/;
/** Nothing left once trailing whitespace and dots are trimmed: empty, a dot segment, blank. */
const BLANK = /^[\s.]*$/u;

const NO_SIBLINGS: SiblingSegments = siblingSegments([]);

/**
 * True when a decoded segment value is not one unambiguous segment: it contains `/`, `?`,
 * `#`, `;`, `\` or a control, or is blank or a dot segment — as it is, decoded once more, or
 * in its compatibility form without default-ignorable code points — or when some
 * normalization an upstream plausibly applies (segment-normalization.ts) maps it onto a
 * sibling's literal or mixed segment at this position.
 */
export function isAmbiguousSegmentValue(value: string, siblings: SiblingSegments = NO_SIBLINGS): boolean {
  if (value.length === 0) return true;
  const hasSiblings = siblings.literals.size > 0 || siblings.mixed.length > 0;
  if (PLAIN.test(value)) {
    if (!hasSiblings) return false;
    const key = value.toLowerCase();
    return siblings.literals.has(key) || mixedClaims(key, siblings.mixed);
  }
  for (const base of [value, ...decodedAgain(value)]) {
    const form = compatibilityForm(base);
    if (STRUCTURAL.test(form) || BLANK.test(form)) return true;
    if (hasSiblings) for (const key of caseKeys(form)) if (claimedBy(key, siblings)) return true;
  }
  return false;
}

/* ---------- the declared schema of path parameters ---------- */

type ValueCheck = (value: string) => boolean;

const NO_CHECK: ValueCheck = () => true;
const checks = new WeakMap<object, ValueCheck>();

/** The declared pattern on the linear-time engine; one it cannot run admits nothing (fail closed). */
function patternCheck(pattern: string): ValueCheck {
  let compiled: LinearPattern;
  try {
    compiled = compileLinearPattern(pattern);
  } catch {
    return () => false;
  }
  return (v) => compiled.test(v);
}

const INTEGER = /^-?(?:0|[1-9][0-9]*)$/;
const NUMBER = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$/;
const FORMATS: Readonly<Record<string, ValueCheck>> = {
  uuid: (v) => /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(v),
  date: (v) => /^\d{4}-\d{2}-\d{2}$/.test(v),
  int32: (v) => INTEGER.test(v) && Math.abs(Number(v)) <= 2 ** 31,
  int64: (v) => INTEGER.test(v),
};

/** For types that do not admit every string (those add no check at all). */
function typeMatches(types: readonly unknown[], value: string): boolean {
  return types.some(
    (t) =>
      (t === "integer" && INTEGER.test(value)) ||
      (t === "number" && NUMBER.test(value)) ||
      (t === "boolean" && (value === "true" || value === "false")),
  );
}

/**
 * The simple constraints a snapshot declares for one path parameter — type, pattern,
 * enum, const, min/maxLength, minimum/maximum, a few formats — compiled once per schema
 * object. Patterns run on the linear-time engine; one it cannot compile admits nothing
 * (fail closed), and decide() denies the operation before (pathPatternsUsable).
 */
function compileValueCheck(schema: Record<string, unknown>): ValueCheck {
  const parts: ValueCheck[] = [];
  if (schema.type !== undefined) {
    const types: readonly unknown[] = Array.isArray(schema.type) ? [...schema.type] : [schema.type];
    // A path value is text: a type that admits strings checks nothing.
    if (!types.includes("string")) parts.push((v) => typeMatches(types, v));
  }
  if (Array.isArray(schema.enum)) {
    const allowed = new Set(schema.enum.map((e) => String(e)));
    parts.push((v) => allowed.has(v));
  }
  if (Object.hasOwn(schema, "const")) {
    const only = String(schema.const);
    parts.push((v) => v === only);
  }
  const { maxLength, minLength, maximum, minimum } = schema;
  if (typeof maxLength === "number") parts.push((v) => [...v].length <= maxLength);
  if (typeof minLength === "number") parts.push((v) => [...v].length >= minLength);
  // After the lengths: a value too long for its schema never reaches the pattern.
  if (typeof schema.pattern === "string") parts.push(patternCheck(schema.pattern));
  if (typeof maximum === "number") parts.push((v) => !NUMBER.test(v) || Number(v) <= maximum);
  if (typeof minimum === "number") parts.push((v) => !NUMBER.test(v) || Number(v) >= minimum);
  const format = typeof schema.format === "string" ? FORMATS[schema.format] : undefined;
  if (format !== undefined) parts.push(format);
  if (parts.length === 0) return NO_CHECK;
  const [only] = parts;
  if (parts.length === 1 && only !== undefined) return only;
  return (v) => {
    for (const check of parts) if (!check(v)) return false;
    return true;
  };
}

function valueCheckFor(snapshot: OperationSnapshot, name: string): ValueCheck {
  const pathSchema: unknown = snapshot.input_schema?.path;
  if (typeof pathSchema !== "object" || pathSchema === null) return NO_CHECK;
  const properties = (pathSchema as { properties?: unknown }).properties;
  if (typeof properties !== "object" || properties === null || !Object.hasOwn(properties, name)) {
    return NO_CHECK;
  }
  const schema: unknown = (properties as Record<string, unknown>)[name];
  if (typeof schema !== "object" || schema === null) return NO_CHECK;
  let check = checks.get(schema);
  if (check === undefined) {
    check = compileValueCheck(schema as Record<string, unknown>);
    checks.set(schema, check);
  }
  return check;
}

/**
 * False when a path parameter of the snapshot declares a pattern the linear-time engine cannot
 * run (a backreference, lookaround, …): a snapshot stored before patterns were checked at
 * import. The operation is then unusable, not merely this value (docs/decisions/2502). Each
 * pattern is compiled once (linear-pattern's cache): this is a lookup per declared pattern.
 */
export function pathPatternsUsable(snapshot: OperationSnapshot): boolean {
  const properties: unknown = (snapshot.input_schema?.path as { properties?: unknown } | null | undefined)
    ?.properties;
  if (typeof properties !== "object" || properties === null) return true;
  return Object.values(properties).every((schema: unknown) => {
    const pattern: unknown = (schema as { pattern?: unknown } | null)?.pattern;
    return typeof pattern !== "string" || linearPatternProblem(pattern) === undefined;
  });
}

/* ---------- the rule ---------- */

export interface PathValuesInput {
  readonly capability: Capability;
  /** Index of the matched operation in capability.operations. */
  readonly index: number;
  /** Decoded request segments the route matched. */
  readonly segments: readonly string[];
  /** Decoded parameter values of the match. */
  readonly params: Readonly<Record<string, string>>;
  /** The reviewed snapshot whose input schema declares the path parameters. */
  readonly operation: OperationSnapshot;
  /**
   * The request named the template itself (authorize-invocation, invoke by permission id,
   * MCP): a segment spelled exactly as in the template is a placeholder, not a value. Its
   * real value is checked when the upstream request is rendered and matched again.
   */
  readonly template?: boolean;
}

/**
 * True when the match's parameter values are unambiguous and satisfy what the snapshot
 * declares for them; false means deny with `ambiguous_path`.
 */
export function pathValuesAcceptable(input: PathValuesInput): boolean {
  const guard = routeGuard(input.capability, input.index);
  if (guard === undefined) return false;
  const template = input.template === true;
  for (const position of guard) {
    const value = input.segments[position.position];
    if (value === undefined) return false;
    if (template && value === position.placeholder) continue;
    if (isAmbiguousSegmentValue(value, position.siblings)) return false;
  }
  for (const name in input.params) {
    const value = input.params[name];
    if (value === undefined) return false;
    // In a template, "{name}" only ever stands for the parameter itself: braces are not
    // allowed in a literal, so the segment above was the template's own spelling.
    if (template && value === `{${name}}`) continue;
    if (!valueCheckFor(input.operation, name)(value)) return false;
  }
  return true;
}

export interface RenderedRequest {
  readonly capability: Capability;
  /** The permission the decision allowed. */
  readonly permissionId: string;
  /** The reviewed snapshot of that permission. */
  readonly operation: OperationSnapshot;
  readonly method: string;
  /** The rendered path relative to the upstream's base path, as it will be sent. */
  readonly path: string;
}

/**
 * The rendered request matched again against the same catalog: true only when it maps to
 * exactly the allowed permission and its values pass the same rule as in decide().
 * Anything else (another operation, no operation, an overlapping catalog) is false.
 */
export function renderedRequestMatches(request: RenderedRequest): boolean {
  let match: ReturnType<ReturnType<typeof catalogMatcher>["match"]>;
  try {
    match = catalogMatcher(request.capability).match(request.method, request.path);
  } catch {
    return false;
  }
  if (match === undefined) return false;
  if (operationPermissionId(request.capability, match.index) !== request.permissionId) return false;
  return pathValuesAcceptable({
    capability: request.capability,
    index: match.index,
    segments: match.segments,
    params: match.params,
    operation: request.operation,
  });
}
