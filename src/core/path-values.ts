/**
 * Path-parameter values that could make an upstream run another operation of the catalog.
 *
 * The decision maps a request to a template (`GET /things/{id}`); the upstream routes the
 * concrete path with its own rules, and many of those rules are looser than ours: servlet
 * containers drop `;…`, some routers fold case or strip a `.json` suffix, some trim trailing
 * dots or whitespace, decode a second time, or compare Unicode compatibility forms. A value
 * is *ambiguous* when, under any of those, it could equal a literal segment that a sibling
 * template has at the same position (`GET /things/me`), or when it is not one plain
 * segment at all. Rules and reasons: docs/core.md and docs/decisions/0301.
 */
import { type Capability, catalogMatcher, operationPermissionId } from "./capability.ts";
import { compileLinearPattern, type LinearPattern, linearPatternProblem } from "./linear-pattern.ts";
import type { OperationSnapshot } from "./operation-snapshot.ts";
import {
  matchesMixedSegment,
  type ParsedPathTemplate,
  parsePathTemplate,
  type TemplateSegment,
} from "./path-template.ts";

type MixedSegment = TemplateSegment & { kind: "mixed" };

/** What one parameter position of a route is checked against. */
interface GuardedPosition {
  readonly position: number;
  /** The segment as written in the template ("{id}", "{name}.{ext}"): the unrendered form. */
  readonly placeholder: string;
  /** Folded literal segments that sibling templates have at this position. */
  readonly siblingLiterals: ReadonlySet<string>;
  /** Mixed segments ("{name}.pdf") siblings have at this position, their literals folded. */
  readonly siblingMixed: readonly MixedSegment[];
}

type RouteGuard = readonly GuardedPosition[];

const guards = new WeakMap<Capability, readonly (RouteGuard | undefined)[]>();

/**
 * Case folding for comparisons: compatibility forms first (full-width "ＭＥ" → "ME",
 * "ſ" → "s", the Kelvin sign → "K"), then lower case. Both the lower case of the value and
 * the lower case of its upper case are compared, as Java's equalsIgnoreCase does ("ı").
 */
function foldKeys(value: string): readonly string[] {
  const compat = value.normalize("NFKC");
  const lower = compat.toLowerCase();
  const upperLower = compat.toUpperCase().toLowerCase();
  return lower === upperLower ? [lower] : [lower, upperLower];
}

function placeholderOf(segment: TemplateSegment): string {
  if (segment.kind === "param") return `{${segment.name}}`;
  if (segment.kind === "literal") return segment.value;
  return segment.parts.map((p) => ("literal" in p ? p.literal : `{${p.param}}`)).join("");
}

/** A mixed segment with its literal parts folded (lower case of the NFKC form). */
function foldMixed(segment: MixedSegment): MixedSegment {
  const parts = segment.parts.map((p) => ("literal" in p ? { literal: foldKeys(p.literal)[0] ?? "" } : p));
  let literalLength = 0;
  for (const part of parts) if ("literal" in part) literalLength += part.literal.length;
  return { kind: "mixed", parts, literalLength };
}

/** Could a request segment matched by `a` at this position also be one matched by `b`? */
function compatible(a: TemplateSegment, b: TemplateSegment): boolean {
  if (a.kind !== "literal" || b.kind !== "literal") return true;
  const fa = foldKeys(a.value);
  return foldKeys(b.value).some((k) => fa.includes(k));
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
      const literals = new Set<string>();
      const mixed: MixedSegment[] = [];
      parsed.forEach((other, otherIndex) => {
        if (other === undefined || otherIndex === index) return;
        if (other.segments.length !== route.segments.length) return;
        const at = other.segments[position];
        if (at === undefined || at.kind === "param") return;
        // A mixed sibling is checked against whole-segment parameters only: between two mixed
        // segments the matcher's ranking (more literal characters first) already decides.
        if (at.kind === "mixed" && segment.kind !== "param") return;
        for (let j = 0; j < route.segments.length; j++) {
          if (j === position) continue;
          const mine = route.segments[j];
          const theirs = other.segments[j];
          if (mine === undefined || theirs === undefined || !compatible(mine, theirs)) return;
        }
        if (at.kind === "literal") for (const key of foldKeys(at.value)) literals.add(key);
        else mixed.push(foldMixed(at));
      });
      guarded.push({
        position,
        placeholder: placeholderOf(segment),
        siblingLiterals: literals,
        siblingMixed: mixed,
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
/** Values made only of these need none of the normalisations below (the per-request common case). */
const PLAIN = /^[A-Za-z0-9_~-]+$/;
const TRAILING = /[\s.]+$/u;

function stripTrailing(value: string): string {
  return value.replace(TRAILING, "").replace(/^\s+/u, "");
}

/**
 * The spellings an upstream may reduce `value` to, before case folding: as is, without
 * trailing whitespace and dots, and without a `.ext` suffix. Undefined when a spelling is
 * not one plain segment (a separator, a control, a dot segment, nothing left).
 */
function spellings(value: string): string[] | undefined {
  if (STRUCTURAL.test(value)) return undefined;
  const trimmed = stripTrailing(value);
  if (trimmed.length === 0 || trimmed === "." || trimmed === "..") return undefined;
  const out = [value, trimmed];
  const dot = trimmed.lastIndexOf(".");
  if (dot > 0) {
    const stem = stripTrailing(trimmed.slice(0, dot));
    if (stem.length > 0) out.push(stem);
  }
  return out;
}

function claimedBySibling(
  key: string,
  siblingLiterals: ReadonlySet<string>,
  siblingMixed: readonly MixedSegment[],
): boolean {
  if (siblingLiterals.has(key)) return true;
  for (const mixed of siblingMixed) if (matchesMixedSegment(mixed, key)) return true;
  return false;
}

/**
 * True when a decoded segment value is not one unambiguous segment: it contains `/`, `?`,
 * `#`, `;`, `\` or a control, is a dot segment, or — decoded once more, in its Unicode
 * compatibility form, trimmed of trailing whitespace and dots, without a `.ext` suffix,
 * case-folded — equals one of `siblingLiterals` (already folded).
 */
export function isAmbiguousSegmentValue(
  value: string,
  siblingLiterals: ReadonlySet<string>,
  siblingMixed: readonly MixedSegment[] = [],
): boolean {
  if (value.length === 0) return true;
  if (PLAIN.test(value)) {
    if (siblingLiterals.size === 0 && siblingMixed.length === 0) return false;
    return claimedBySibling(value.toLowerCase(), siblingLiterals, siblingMixed);
  }
  const claims = (key: string): boolean => claimedBySibling(key, siblingLiterals, siblingMixed);
  const bases = [value];
  if (value.includes("%")) {
    try {
      const again = decodeURIComponent(value);
      if (again !== value) bases.push(again);
    } catch {
      // Not a valid escape sequence: no upstream decodes it to anything else.
    }
  }
  for (const base of bases) {
    for (const form of new Set([base, base.normalize("NFKC")])) {
      const forms = spellings(form);
      if (forms === undefined) return true;
      if (siblingLiterals.size === 0 && siblingMixed.length === 0) continue;
      for (const spelling of forms) {
        for (const key of foldKeys(spelling)) if (claims(key)) return true;
      }
    }
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
    if (isAmbiguousSegmentValue(value, position.siblingLiterals, position.siblingMixed)) return false;
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
