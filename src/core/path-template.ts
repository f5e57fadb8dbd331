import { compareCodePoints } from "./canonical-json.ts";
import { CoreError } from "./core-error.ts";
import { type HttpMethod, normalizeMethod } from "./http-method.ts";

export type PathTemplateErrorCode = "path_template_invalid" | "path_template_conflict";

export class PathTemplateError extends CoreError<PathTemplateErrorCode> {}

/** Longer request paths never match (they are denied, not truncated). */
export const MAX_REQUEST_PATH_LENGTH = 8192;
/** More segments than this never match. */
export const MAX_PATH_SEGMENTS = 256;

/** A request path after normalization: decoded segments and their canonical encoding. */
export interface NormalizedPath {
  /** "/" + segments re-encoded with upper-case percent escapes; stable under re-normalization. */
  readonly path: string;
  /** Percent-decoded exactly once. */
  readonly segments: readonly string[];
}

// Raw characters that never appear in an accepted path: controls, space, backslash,
// and anything outside ASCII (which must arrive percent-encoded).
const RAW_FORBIDDEN = /[^\u0021-\u007e]|\\/;
/** After decoding: controls (NUL included), and "/" or "\" smuggled in as %2F / %5C. */
function hasForbiddenDecoded(decoded: string): boolean {
  for (let i = 0; i < decoded.length; i++) {
    const code = decoded.charCodeAt(i);
    if (code < 0x20 || code === 0x7f || code === 0x2f || code === 0x5c) return true;
  }
  return false;
}
const BAD_PERCENT = /%(?![0-9A-Fa-f]{2})/;

function decodeSegment(raw: string): string | undefined {
  if (BAD_PERCENT.test(raw)) return undefined;
  let decoded: string;
  try {
    // Throws URIError on malformed UTF-8 (overlong forms, surrogates, truncation).
    decoded = decodeURIComponent(raw);
  } catch {
    return undefined;
  }
  if (hasForbiddenDecoded(decoded)) return undefined;
  return decoded;
}

/**
 * "." and ".." are refused, and so are ".;x" and "..;x": some upstream servers strip a
 * ";" parameter before resolving dot segments, so those mean "." and ".." to them.
 */
function isDotSegment(decoded: string): boolean {
  const semicolon = decoded.indexOf(";");
  const head = semicolon === -1 ? decoded : decoded.slice(0, semicolon);
  return head === "." || head === "..";
}

const PCHAR_KEEP: Record<string, string> = {
  "%24": "$",
  "%26": "&",
  "%2B": "+",
  "%2C": ",",
  "%3A": ":",
  "%3B": ";",
  "%3D": "=",
  "%40": "@",
};

/** Percent-encodes a decoded segment, keeping the characters RFC 3986 allows in a segment. */
export function encodePathSegment(decoded: string): string {
  return encodeURIComponent(decoded).replace(/%(?:24|26|2B|2C|3A|3B|3D|40)/g, (m) => PCHAR_KEEP[m] ?? m);
}

/**
 * Characters that decode and re-encode to themselves (encodeURIComponent's unreserved set plus
 * PCHAR_KEEP) and "/": a path made only of these needs no decoding, only the segment checks.
 */
const PLAIN_PATH = /^[A-Za-z0-9\-._~!*'()$&+,:;=@/]+$/;

const DOT = ".".charCodeAt(0);

/** normalizeRequestPath for a PLAIN_PATH: the same result without decoding or re-encoding. */
function normalizePlainPath(path: string): NormalizedPath | undefined {
  const segments: string[] = [];
  let empty = false;
  for (let start = 1; start <= path.length; ) {
    let end = path.indexOf("/", start);
    if (end === -1) end = path.length;
    if (end === start) empty = true;
    else {
      const segment = path.slice(start, end);
      if (segment.charCodeAt(0) === DOT && isDotSegment(segment)) return undefined;
      if (segments.push(segment) > MAX_PATH_SEGMENTS) return undefined;
    }
    start = end + 1;
  }
  // Already normal (the common case) unless an empty segment was dropped ("//", a trailing "/").
  return { path: empty ? `/${segments.join("/")}` : path, segments };
}

/**
 * Normalizes a request path for matching (rules in docs/core.md). Undefined means "never
 * matches": the caller denies with unknown_operation.
 */
export function normalizeRequestPath(raw: unknown): NormalizedPath | undefined {
  if (typeof raw !== "string") return undefined;
  const query = raw.indexOf("?");
  const fragment = raw.indexOf("#");
  const end = query === -1 ? fragment : fragment === -1 ? query : Math.min(query, fragment);
  const path = end === -1 ? raw : raw.slice(0, end);
  if (path.length === 0 || path.length > MAX_REQUEST_PATH_LENGTH || !path.startsWith("/")) return undefined;
  // The common case: nothing percent-encoded (per request on every decision path).
  if (PLAIN_PATH.test(path)) return normalizePlainPath(path);
  if (RAW_FORBIDDEN.test(path)) return undefined;
  const rawSegments = path.split("/").filter((s) => s.length > 0);
  if (rawSegments.length > MAX_PATH_SEGMENTS) return undefined;
  const segments: string[] = [];
  for (const rawSegment of rawSegments) {
    const decoded = decodeSegment(rawSegment);
    if (decoded === undefined || isDotSegment(decoded)) return undefined;
    segments.push(decoded);
  }
  return { path: `/${segments.map(encodePathSegment).join("/")}`, segments };
}

type TemplatePart = { readonly literal: string } | { readonly param: string };

export type TemplateSegment =
  | { readonly kind: "literal"; readonly value: string }
  | { readonly kind: "param"; readonly name: string }
  | { readonly kind: "mixed"; readonly parts: readonly TemplatePart[]; readonly literalLength: number };

export interface ParsedPathTemplate {
  readonly template: string;
  readonly segments: readonly TemplateSegment[];
  /** Parameter names in order of appearance. */
  readonly params: readonly string[];
}

const PARAM_NAME = /^[A-Za-z0-9_.-]+$/;

function invalid(template: string, why: string): PathTemplateError {
  // Templates come from reviewed catalogs, not from requests: naming them is safe.
  return new PathTemplateError("path_template_invalid", `path template ${JSON.stringify(template)}: ${why}`);
}

function parseSegment(template: string, raw: string, seen: Set<string>): TemplateSegment {
  const parts: TemplatePart[] = [];
  let i = 0;
  while (i < raw.length) {
    const open = raw.indexOf("{", i);
    const close = raw.indexOf("}", i);
    if (close !== -1 && (open === -1 || close < open)) throw invalid(template, "unbalanced '}'");
    if (open === -1) {
      parts.push({ literal: raw.slice(i) });
      break;
    }
    if (open > i) parts.push({ literal: raw.slice(i, open) });
    const end = raw.indexOf("}", open);
    if (end === -1) throw invalid(template, "unbalanced '{'");
    const name = raw.slice(open + 1, end);
    if (!PARAM_NAME.test(name)) throw invalid(template, "parameter names use [A-Za-z0-9_.-]");
    if (seen.has(name)) throw invalid(template, `parameter {${name}} appears twice`);
    const previous = parts.at(-1);
    if (previous !== undefined && "param" in previous) throw invalid(template, "adjacent parameters");
    seen.add(name);
    parts.push({ param: name });
    i = end + 1;
  }
  const decodedParts: TemplatePart[] = [];
  for (const part of parts) {
    if ("param" in part) {
      decodedParts.push(part);
      continue;
    }
    const decoded = decodeSegment(part.literal);
    if (decoded === undefined) throw invalid(template, "invalid literal segment");
    decodedParts.push({ literal: decoded });
  }
  const [first] = decodedParts;
  if (decodedParts.length === 1 && first !== undefined) {
    if ("param" in first) return { kind: "param", name: first.param };
    if (isDotSegment(first.literal)) throw invalid(template, "dot segment");
    return { kind: "literal", value: first.literal };
  }
  let literalLength = 0;
  for (const part of decodedParts) if ("literal" in part) literalLength += part.literal.length;
  return { kind: "mixed", parts: decodedParts, literalLength };
}

/** Parses and validates an OpenAPI path template; throws PathTemplateError. */
export function parsePathTemplate(template: string): ParsedPathTemplate {
  if (typeof template !== "string" || !template.startsWith("/"))
    throw invalid(String(template), "must start with '/'");
  if (template.length > MAX_REQUEST_PATH_LENGTH) throw invalid(template.slice(0, 64), "too long");
  if (RAW_FORBIDDEN.test(template) || /[?#]/.test(template)) {
    throw invalid(template, "contains a forbidden character");
  }
  const rawSegments = template.split("/").slice(1);
  // A trailing slash is dropped, as it is from request paths.
  if (rawSegments.length > 0 && rawSegments.at(-1) === "") rawSegments.pop();
  if (rawSegments.some((s) => s.length === 0)) throw invalid(template, "empty segment");
  if (rawSegments.length > MAX_PATH_SEGMENTS) throw invalid(template, "too many segments");
  const seen = new Set<string>();
  const segments = rawSegments.map((raw) => parseSegment(template, raw, seen));
  return { template, segments, params: [...seen] };
}

/**
 * Verdicts of isValidPathTemplate, which runs several times per operation whenever a
 * policy is validated (snapshot paths, permission ids): parsing is pure, so a bounded memo
 * keeps policy load + verify from re-parsing the same templates.
 */
const validityMemo = new Map<string, boolean>();
const VALIDITY_MEMO_MAX = 16_384;

export function isValidPathTemplate(template: unknown): template is string {
  if (typeof template !== "string") return false;
  const known = validityMemo.get(template);
  if (known !== undefined) return known;
  let valid: boolean;
  try {
    parsePathTemplate(template);
    valid = true;
  } catch {
    valid = false;
  }
  if (template.length <= 2048) {
    if (validityMemo.size >= VALIDITY_MEMO_MAX) validityMemo.clear();
    validityMemo.set(template, valid);
  }
  return valid;
}

/**
 * Mixed segments ("{name}.{ext}", "v{version}") match without backtracking: the first and
 * last literals anchor the ends, each literal between parameters matches at its leftmost
 * occurrence, and every parameter value is non-empty. Linear in the segment length.
 */
function matchMixed(parts: readonly TemplatePart[], value: string, params: Record<string, string>): boolean {
  let start = 0;
  let stop = value.length;
  let from = 0;
  let to = parts.length;
  const head = parts[0];
  if (head !== undefined && "literal" in head) {
    if (!value.startsWith(head.literal)) return false;
    start = head.literal.length;
    from = 1;
  }
  const tail = parts[parts.length - 1];
  if (tail !== undefined && "literal" in tail && to - 1 >= from) {
    if (!value.endsWith(tail.literal) || value.length - tail.literal.length < start) return false;
    stop = value.length - tail.literal.length;
    to -= 1;
  }
  const found: Record<string, string> = {};
  let cursor = start;
  for (let i = from; i < to; i++) {
    const part = parts[i];
    if (part === undefined) return false;
    if ("literal" in part) continue;
    const next = parts[i + 1];
    let end: number;
    if (next === undefined || i + 1 >= to) {
      end = stop;
    } else if ("literal" in next) {
      end = value.indexOf(next.literal, cursor + 1);
      if (end === -1 || end + next.literal.length > stop) return false;
    } else {
      return false;
    }
    if (end <= cursor) return false;
    found[part.param] = value.slice(cursor, end);
    cursor = next !== undefined && i + 1 < to && "literal" in next ? end + next.literal.length : end;
  }
  if (cursor !== stop) return false;
  Object.assign(params, found);
  return true;
}

/** Whether one decoded segment value matches a mixed segment's parts ("{name}.pdf", "v{n}"). */
export function matchesMixedSegment(segment: TemplateSegment & { kind: "mixed" }, value: string): boolean {
  return matchMixed(segment.parts, value, {});
}

export interface PathRoute {
  readonly template: string;
  /** Restricts the route to one method; absent means any method. */
  readonly method?: string;
}

export interface PathMatch {
  readonly template: string;
  readonly method: HttpMethod | undefined;
  /** Decoded values of the template's parameters. */
  readonly params: Readonly<Record<string, string>>;
  /** Position of the matched route in the array given to createPathMatcher. */
  readonly index: number;
  /** The request's decoded segments (what each template segment matched). */
  readonly segments: readonly string[];
}

export interface PathMatcher {
  /** Undefined when nothing matches or the path is refused by normalization. */
  match(method: string | undefined, requestPath: string): PathMatch | undefined;
}

interface CompiledRoute {
  readonly parsed: ParsedPathTemplate;
  readonly method: HttpMethod | undefined;
  readonly index: number;
  /** Per segment: literal 2, mixed 1, parameter 0 — compared left to right. */
  readonly rank: readonly number[];
}

const SEGMENT_RANK = { literal: 2, mixed: 1, param: 0 } as const;

/**
 * The template's shape: literal segments kept, parameter names dropped, so `/users/{id}` and
 * `/users/{name}` are one shape (the matcher could not tell them apart; an import refuses both).
 */
export function pathShapeKey(parsed: ParsedPathTemplate): string {
  return JSON.stringify(
    parsed.segments.map((s) =>
      s.kind === "literal"
        ? ["L", s.value]
        : s.kind === "param"
          ? ["P"]
          : ["M", s.parts.map((p) => ("literal" in p ? p.literal : null))],
    ),
  );
}

function moreSpecific(a: CompiledRoute, b: CompiledRoute): number {
  for (let i = 0; i < a.rank.length; i++) {
    const diff = (b.rank[i] ?? 0) - (a.rank[i] ?? 0);
    if (diff !== 0) return diff;
  }
  for (let i = 0; i < a.parsed.segments.length; i++) {
    const sa = a.parsed.segments[i];
    const sb = b.parsed.segments[i];
    const la = sa?.kind === "mixed" ? sa.literalLength : 0;
    const lb = sb?.kind === "mixed" ? sb.literalLength : 0;
    if (la !== lb) return lb - la;
  }
  // A route bound to the method beats a method-agnostic one of the same shape.
  if ((a.method === undefined) !== (b.method === undefined)) return a.method === undefined ? 1 : -1;
  return compareCodePoints(a.parsed.template, b.parsed.template) || a.index - b.index;
}

/**
 * Compiles OpenAPI path templates (optionally bound to a method) into a matcher.
 * Routes are filtered by method first; among those that match, literal segments beat
 * mixed ones, which beat whole-segment parameters, comparing segments left to right.
 * Throws PathTemplateError for an invalid template or two routes of the same shape and
 * method (e.g. "/users/{id}" and "/users/{name}"); exact duplicates are merged.
 */
export function createPathMatcher(routes: ReadonlyArray<string | PathRoute>): PathMatcher {
  const bySegmentCount = new Map<number, CompiledRoute[]>();
  const shapes = new Map<string, { template: string; method: HttpMethod | undefined }[]>();
  routes.forEach((entry, index) => {
    const route: PathRoute = typeof entry === "string" ? { template: entry } : entry;
    let method: HttpMethod | undefined;
    if (route.method !== undefined) {
      method = normalizeMethod(route.method);
      if (method === undefined) {
        throw new PathTemplateError("path_template_invalid", `unsupported method for ${route.template}`);
      }
    }
    const parsed = parsePathTemplate(route.template);
    const key = pathShapeKey(parsed);
    const sameShape = shapes.get(key) ?? [];
    let duplicate = false;
    for (const other of sameShape) {
      if (other.method !== undefined && method !== undefined && other.method !== method) continue;
      if (other.template === route.template && other.method === method) {
        duplicate = true;
        continue;
      }
      throw new PathTemplateError(
        "path_template_conflict",
        `path templates ${JSON.stringify(other.template)} and ${JSON.stringify(route.template)} overlap`,
      );
    }
    if (duplicate) return;
    sameShape.push({ template: route.template, method });
    shapes.set(key, sameShape);
    const compiled: CompiledRoute = {
      parsed,
      method,
      index,
      rank: parsed.segments.map((s) => SEGMENT_RANK[s.kind]),
    };
    const bucket = bySegmentCount.get(parsed.segments.length) ?? [];
    bucket.push(compiled);
    bySegmentCount.set(parsed.segments.length, bucket);
  });
  for (const bucket of bySegmentCount.values()) bucket.sort(moreSpecific);

  return {
    match(method, requestPath) {
      let wanted: HttpMethod | undefined;
      if (method !== undefined) {
        wanted = normalizeMethod(method);
        if (wanted === undefined) return undefined;
      }
      const normalized = normalizeRequestPath(requestPath);
      if (normalized === undefined) return undefined;
      const bucket = bySegmentCount.get(normalized.segments.length);
      if (bucket === undefined) return undefined;
      // Buckets are sorted most specific first, so the first hit is the answer.
      for (const route of bucket) {
        if (wanted !== undefined && route.method !== undefined && route.method !== wanted) continue;
        const params: Record<string, string> = {};
        let ok = true;
        for (let i = 0; i < route.parsed.segments.length && ok; i++) {
          const segment = route.parsed.segments[i];
          const value = normalized.segments[i];
          if (segment === undefined || value === undefined) ok = false;
          else if (segment.kind === "literal") ok = segment.value === value;
          else if (segment.kind === "param") params[segment.name] = value;
          else ok = matchMixed(segment.parts, value, params);
        }
        if (ok) {
          const { template } = route.parsed;
          return {
            template,
            method: route.method,
            params,
            index: route.index,
            segments: normalized.segments,
          };
        }
      }
      return undefined;
    },
  };
}
