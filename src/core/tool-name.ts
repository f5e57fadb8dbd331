import { sha256Hex } from "./canonical-json.ts";

export const MAX_TOOL_NAME_LENGTH = 64;
/** "_" + 8 hex characters of sha256(permission id). */
export const TOOL_NAME_HASH_LENGTH = 8;

const SUFFIX_LENGTH = 1 + TOOL_NAME_HASH_LENGTH;

function normalizeBase(raw: string): string {
  return raw
    .replace(/[^A-Za-z0-9_-]+/g, "_")
    .replace(/_{2,}/g, "_")
    .replace(/^[_-]+|[_-]+$/g, "");
}

/** "billing:get:/users/{id}/invoices" → "get_users_id_invoices". */
function baseFromPermissionId(permissionId: string): string {
  const first = permissionId.indexOf(":");
  const second = first === -1 ? -1 : permissionId.indexOf(":", first + 1);
  return second === -1
    ? permissionId
    : `${permissionId.slice(first + 1, second)}_${permissionId.slice(second + 1)}`;
}

/**
 * The MCP tool name of a permission: the preferred base (e.g. an operationId) or one
 * derived from method and path, reduced to [A-Za-z0-9_-], cut so that with the suffix
 * "_" + 8 hex characters of sha256(permissionId) it is at most 64 characters. The suffix
 * keeps names unique when bases collide or are cut; the same input always gives the
 * same name.
 */
export function toolNameFor(permissionId: string, preferredBase?: string): string {
  const suffix = `_${sha256Hex(permissionId).slice(0, TOOL_NAME_HASH_LENGTH)}`;
  let base = normalizeBase(preferredBase ?? "");
  if (base === "") base = normalizeBase(baseFromPermissionId(permissionId));
  base = base.slice(0, MAX_TOOL_NAME_LENGTH - SUFFIX_LENGTH).replace(/[_-]+$/, "");
  if (base === "") base = "tool";
  return base + suffix;
}
