import { appendPointer, isRecord, own } from "./json-pointer.ts";

export type BaseUrlResult = { ok: true; base: string } | { ok: false; pointer: string; message: string };

/**
 * Checks an absolute http(s) base URL and returns it without a trailing slash. Credentials,
 * queries and fragments are refused: a reviewed upstream URL must not carry secrets, and
 * the operation path is appended to it.
 */
export function normalizeBaseUrl(raw: string): { ok: true; base: string } | { ok: false; message: string } {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return { ok: false, message: "is not an absolute URL (relative server URLs need upstreamBaseUrl)" };
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    return { ok: false, message: "must use http or https" };
  }
  if (url.username !== "" || url.password !== "")
    return { ok: false, message: "must not contain credentials" };
  if (url.search !== "" || url.hash !== "" || raw.includes("?") || raw.includes("#")) {
    return { ok: false, message: "must not contain a query or a fragment" };
  }
  if (/[{}]/.test(url.pathname) || /%7B|%7D/i.test(url.pathname)) {
    return { ok: false, message: "has an unresolved server variable" };
  }
  return { ok: true, base: `${url.origin}${url.pathname.replace(/\/+$/, "")}` };
}

/** Replaces `{name}` with the variable's default, as OpenAPI tools do without user input. */
function substituteVariables(
  url: string,
  variables: unknown,
  pointer: string,
): { ok: true; url: string } | { ok: false; pointer: string; message: string } {
  let failure: { pointer: string; message: string } | undefined;
  const resolved = url.replace(/\{([^{}]*)\}/g, (match, name: string) => {
    const variable = isRecord(variables) ? own(variables, name) : undefined;
    const value = isRecord(variable) ? own(variable, "default") : undefined;
    if (typeof value !== "string") {
      failure ??= {
        pointer: appendPointer(pointer, "variables", name),
        message: `server variable {${name}} has no default value`,
      };
      return match;
    }
    return value;
  });
  return failure === undefined ? { ok: true, url: resolved } : { ok: false, ...failure };
}

/**
 * The base URL of one operation: the caller's override, else the first server of the
 * operation, of its path item, then of the document (OpenAPI's precedence).
 */
export function resolveBaseUrl(
  candidates: ReadonlyArray<{ servers: unknown; pointer: string }>,
  override: string | undefined,
): BaseUrlResult {
  if (override !== undefined) {
    const checked = normalizeBaseUrl(override);
    return checked.ok ? checked : { ok: false, pointer: "", message: `upstreamBaseUrl ${checked.message}` };
  }
  for (const { servers, pointer } of candidates) {
    if (!Array.isArray(servers) || servers.length === 0) continue;
    const first: unknown = servers[0];
    const at = appendPointer(pointer, 0);
    const url = isRecord(first) ? own(first, "url") : undefined;
    if (typeof url !== "string") return { ok: false, pointer: at, message: "server entry has no url" };
    const substituted = substituteVariables(url, isRecord(first) ? own(first, "variables") : undefined, at);
    if (!substituted.ok) return substituted;
    const checked = normalizeBaseUrl(substituted.url);
    if (!checked.ok)
      return { ok: false, pointer: appendPointer(at, "url"), message: `server URL ${checked.message}` };
    return checked;
  }
  return {
    ok: false,
    pointer: "/servers",
    message: "no server URL: add servers[0].url to the document or pass upstreamBaseUrl",
  };
}
