import type { Capability } from "../core/capability.ts";
import { isMcpToolSnapshot, type OperationSnapshot } from "../core/operation-snapshot.ts";
import { renderedRequestMatches } from "../core/path-values.ts";
import { ExecutionError } from "./errors.ts";

/** The parts of a snapshot that decide where a request goes. */
export interface UrlTemplateSource {
  readonly upstream_url_template: string;
}

export interface UrlArgs {
  readonly path?: Readonly<Record<string, unknown>>;
  readonly query?: Readonly<Record<string, unknown>>;
}

interface ParsedTemplate {
  readonly origin: string;
  /** The template's path with `{name}` placeholders still in place (URL-serialized). */
  readonly pathname: string;
  /** The template's own (reviewed) query string, kept as is; "" or "?…". */
  readonly search: string;
  readonly params: readonly string[];
}

const PLACEHOLDER = /\{([A-Za-z0-9_.-]+)\}/g;
const MARKER_PREFIX = "authorityparam";
const MARKER = /authorityparam(\d+)z/g;
const templates = new Map<string, ParsedTemplate>();
const MAX_CACHED_TEMPLATES = 1024;

function badTemplate(issue: string): ExecutionError {
  return new ExecutionError("invalid_operation_snapshot", { details: { issue } });
}

function badInput(location: "path" | "query", pointer: string, keyword: string): ExecutionError {
  return new ExecutionError("invalid_input", {
    message: `Invalid input at ${location}${pointer}: ${keyword}.`,
    details: { issues: [{ location, pointer, keyword }] },
  });
}

const ambiguous = (issue: string): ExecutionError =>
  new ExecutionError("ambiguous_path", { details: { issue } });

const pointerToken = (name: string): string => `/${name.replaceAll("~", "~0").replaceAll("/", "~1")}`;

/**
 * Parses a reviewed template once. Placeholders are allowed only in the path: the
 * scheme, host, port and query of a template are fixed by review and never rendered.
 */
function parseTemplate(template: string): ParsedTemplate {
  const cached = templates.get(template);
  if (cached !== undefined) return cached;
  if (typeof template !== "string" || template.length === 0 || template.length > 8192) {
    throw badTemplate("upstream_url_template_invalid");
  }
  if (template.includes(MARKER_PREFIX)) throw badTemplate("upstream_url_template_invalid");
  const params: string[] = [];
  const marked = template.replace(PLACEHOLDER, (_match, name: string) => {
    if (params.includes(name)) throw badTemplate("upstream_url_template_duplicate_parameter");
    params.push(name);
    return `${MARKER_PREFIX}${params.length - 1}z`;
  });
  if (/[{}]/.test(marked)) throw badTemplate("upstream_url_template_invalid");
  let url: URL;
  try {
    url = new URL(marked);
  } catch {
    throw badTemplate("upstream_url_template_invalid");
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw badTemplate("upstream_scheme_not_allowed");
  if (url.username !== "" || url.password !== "") throw badTemplate("upstream_url_has_credentials");
  if (url.hash !== "") throw badTemplate("upstream_url_has_fragment");
  if (url.host.includes(MARKER_PREFIX) || url.search.includes(MARKER_PREFIX)) {
    throw badTemplate("upstream_url_template_parameter_outside_path");
  }
  // Every placeholder must have survived URL parsing untouched inside the path.
  const seen = [...url.pathname.matchAll(MARKER)].length;
  if (seen !== params.length) throw badTemplate("upstream_url_template_invalid");
  const parsed: ParsedTemplate = { origin: url.origin, pathname: url.pathname, search: url.search, params };
  if (templates.size >= MAX_CACHED_TEMPLATES) templates.clear();
  templates.set(template, parsed);
  return parsed;
}

function scalar(value: unknown): string | undefined {
  // Lone surrogates have no UTF-8 form: encodeURIComponent would throw on them.
  if (typeof value === "string") return value.isWellFormed() ? value : undefined;
  if (typeof value === "number" && Number.isFinite(value)) return String(value);
  if (typeof value === "boolean") return value ? "true" : "false";
  return undefined;
}

/**
 * "." and ".." would be resolved by the upstream as path navigation; ".;x" and "..;x"
 * mean the same to servers that strip ";" parameters. Empty values would collapse a segment.
 */
function isUnsafeSegmentValue(value: string): boolean {
  if (value.length === 0) return true;
  const semicolon = value.indexOf(";");
  const head = semicolon === -1 ? value : value.slice(0, semicolon);
  return head === "." || head === "..";
}

const WHOLE_SEGMENT_MARKER = /^authorityparam\d+z$/;

function renderPath(parsed: ParsedTemplate, values: Readonly<Record<string, unknown>>): string {
  for (const name of Object.keys(values)) {
    if (!parsed.params.includes(name)) throw badInput("path", "", "notAccepted");
  }
  const renderValue = (index: string, whole: boolean): string => {
    const name = parsed.params[Number(index)];
    if (name === undefined) throw badTemplate("upstream_url_template_invalid");
    const raw = Object.hasOwn(values, name) ? scalar(values[name]) : undefined;
    if (raw === undefined) {
      throw Object.hasOwn(values, name)
        ? badInput("path", pointerToken(name), "type")
        : badInput("path", "", "required");
    }
    // An empty value collapses its segment and a dot segment navigates to another path:
    // ambiguous_path, as core/path-values.ts says of such a value, so a value gets the same
    // reason in both forms and on every path (assertUnambiguousPath runs first everywhere).
    if (raw.length === 0) throw ambiguous("empty_value");
    if (whole && isUnsafeSegmentValue(raw)) throw ambiguous("dot_segment_value");
    // encodeURIComponent escapes "/", "?", "#", "%" and ";": the value stays one segment.
    return encodeURIComponent(raw);
  };
  return parsed.pathname
    .split("/")
    .map((segment) => {
      if (WHOLE_SEGMENT_MARKER.test(segment))
        return segment.replace(MARKER, (_m, i: string) => renderValue(i, true));
      const rendered = segment.replace(MARKER, (_m, i: string) => renderValue(i, false));
      // In a mixed segment ("{name}.json") only the whole rendered segment can be a dot segment.
      if (rendered !== segment && isUnsafeSegmentValue(rendered)) throw ambiguous("dot_segment_value");
      return rendered;
    })
    .join("/");
}

function appendQuery(url: URL, query: Readonly<Record<string, unknown>>): void {
  for (const [name, value] of Object.entries(query)) {
    if (value === undefined) continue;
    const values = Array.isArray(value) ? value : [value];
    for (const item of values) {
      const text = scalar(item);
      if (text === undefined) throw badInput("query", pointerToken(name), "type");
      url.searchParams.append(name, text);
    }
  }
}

/**
 * Builds the upstream URL from the reviewed template only. Path parameters are
 * percent-encoded into their own segment; query parameters are appended. The result is
 * checked to have the template's origin and exactly the rendered path, so no argument
 * can move the request to another host or path.
 */
export function buildUpstreamUrl(snapshot: UrlTemplateSource, args: UrlArgs): URL {
  const parsed = parseTemplate(snapshot.upstream_url_template);
  const pathname = renderPath(parsed, args.path ?? {});
  const url = new URL(`${parsed.origin}${pathname}${parsed.search}`);
  appendQuery(url, args.query ?? {});
  if (url.origin !== parsed.origin || url.pathname !== pathname || url.hash !== "") {
    throw badTemplate("upstream_url_changed");
  }
  return url;
}

/** What the rendered request must map back to: the decision's catalog, permission and snapshot. */
export interface AllowedRoute {
  readonly capability: Capability;
  readonly permissionId: string;
  /** The policy's reviewed snapshot of that permission (the decision's `operation`). */
  readonly operation: OperationSnapshot;
}

/** The route of an allowed decision; a decision without its catalog cannot be re-matched (fails closed). */
export function allowedRoute(
  capability: Capability | undefined,
  permissionId: string,
  operation: OperationSnapshot,
): AllowedRoute {
  if (capability === undefined) throw ambiguous("catalog_missing");
  return { capability, permissionId, operation };
}

/** A stand-in origin for parsing an API path template with the same code as an upstream URL template. */
const API_ORIGIN = "https://api-path.invalid";

const sameNames = (a: readonly string[], b: readonly string[]): boolean =>
  a.length === b.length && a.every((name) => b.includes(name));

/**
 * The one way an upstream request is rendered: every value percent-encoded into its own
 * segment (buildUpstreamUrl). Then the same values rendered, with the same encoder, into
 * the operation's API path template — the upstream path relative to its base path — and
 * that method and path matched again against the decision's catalog: it must map to
 * exactly the allowed permission, with values that pass the same ambiguity and schema rule
 * as decide(); otherwise ExecutionError("ambiguous_path"), before any credential or network
 * activity. Both templates must have the same parameters, so no rendered value escapes the
 * check (a placeholder only in the upstream's base path is refused).
 */
export function renderUpstreamRequest(route: AllowedRoute, args: UrlArgs): URL {
  const { operation } = route;
  // A downstream MCP tool is called with tools/call by the MCP transport, never sent as HTTP.
  if (isMcpToolSnapshot(operation)) throw badTemplate("downstream_mcp_tool");
  const url = buildUpstreamUrl(operation, args);
  const upstream = parseTemplate(operation.upstream_url_template);
  let api: ParsedTemplate;
  try {
    api = parseTemplate(`${API_ORIGIN}${operation.path}`);
  } catch {
    throw ambiguous("api_path_template_invalid");
  }
  if (!sameNames(api.params, upstream.params)) throw ambiguous("parameters_outside_api_path");
  const relative = renderPath(api, args.path ?? {});
  const matches = renderedRequestMatches({
    capability: route.capability,
    permissionId: route.permissionId,
    operation,
    method: operation.method,
    path: relative,
  });
  if (!matches) throw ambiguous("rendered_request_maps_elsewhere");
  return url;
}

/**
 * The endpoint of a downstream MCP tool: the reviewed URL as it is (it takes no parameters),
 * after the tool's fixed path is matched again against the decision's catalog — it must map
 * to exactly the allowed permission, as a rendered HTTP request must.
 */
export function renderDownstreamToolRequest(route: AllowedRoute): URL {
  const { operation } = route;
  if (!isMcpToolSnapshot(operation)) throw badTemplate("not_a_downstream_mcp_tool");
  const upstream = parseTemplate(operation.upstream_url_template);
  if (upstream.params.length > 0) throw badTemplate("upstream_url_template_invalid");
  const matches = renderedRequestMatches({
    capability: route.capability,
    permissionId: route.permissionId,
    operation,
    method: operation.method,
    path: operation.path,
  });
  if (!matches) throw ambiguous("rendered_request_maps_elsewhere");
  return new URL(`${upstream.origin}${upstream.pathname}${upstream.search}`);
}

/**
 * The path rule on arguments not yet validated: refuses with ambiguous_path exactly when
 * renderUpstreamRequest would, and ignores every other problem (the input schema reports
 * those). Run before schema validation so a value gets the same reason whether it arrives
 * in a concrete path (decide()) or as an argument; the authoritative check is still the
 * render of the validated arguments.
 */
export function assertUnambiguousPath(route: AllowedRoute, args: unknown): void {
  if (typeof args !== "object" || args === null) return;
  const path: unknown = (args as { path?: unknown }).path;
  if (typeof path !== "object" || path === null || Array.isArray(path)) return;
  try {
    renderUpstreamRequest(route, { path: path as Record<string, unknown> });
  } catch (error) {
    if (error instanceof ExecutionError && error.reason === "ambiguous_path") throw error;
  }
}
