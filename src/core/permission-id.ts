import { CoreError } from "./core-error.ts";
import { type HttpMethod, normalizeMethod } from "./http-method.ts";
import { isValidPathTemplate } from "./path-template.ts";

export type PermissionIdErrorCode =
  | "permission_id_invalid"
  | "capability_id_invalid"
  | "method_invalid"
  | "path_template_invalid";

export class PermissionIdError extends CoreError<PermissionIdErrorCode> {}

/** `<capability_id>:<lowercase method>:<path template>` */
export type PermissionId = `${string}:${Lowercase<HttpMethod>}:/${string}`;

export interface ParsedPermissionId {
  readonly capabilityId: string;
  readonly method: HttpMethod;
  readonly pathTemplate: string;
}

/**
 * Capability ids are the first field of a permission id, so they cannot hold ':'; they
 * are also kept printable and short so they are safe in logs and store keys.
 */
const CAPABILITY_ID = /^[A-Za-z0-9_][A-Za-z0-9._~@+-]{0,127}$/;

export const MAX_PERMISSION_ID_LENGTH = 2048;

export function isValidCapabilityId(value: unknown): value is string {
  return typeof value === "string" && CAPABILITY_ID.test(value);
}

function checkCapabilityId(capabilityId: unknown): string {
  if (!isValidCapabilityId(capabilityId)) {
    throw new PermissionIdError(
      "capability_id_invalid",
      "capability id must be 1-128 characters of [A-Za-z0-9._~@+-] and start with a letter, digit or _",
    );
  }
  return capabilityId;
}

function checkMethod(method: unknown): HttpMethod {
  const normalized = normalizeMethod(method);
  if (normalized === undefined) throw new PermissionIdError("method_invalid", "unsupported HTTP method");
  return normalized;
}

function checkPathTemplate(pathTemplate: unknown): string {
  if (!isValidPathTemplate(pathTemplate)) {
    throw new PermissionIdError(
      "path_template_invalid",
      "path template is not a valid OpenAPI path template",
    );
  }
  return pathTemplate;
}

/** Builds the permission id; the path template is kept verbatim, braces included. */
export function buildPermissionId(capabilityId: string, method: string, pathTemplate: string): PermissionId {
  const id = `${checkCapabilityId(capabilityId)}:${checkMethod(method).toLowerCase()}:${checkPathTemplate(pathTemplate)}`;
  if (id.length > MAX_PERMISSION_ID_LENGTH) throw new PermissionIdError("permission_id_invalid", "too long");
  return id as PermissionId;
}

/**
 * Splits at the first two ':' (the path template itself may contain ':', as in
 * "/v1/{name}:cancel"). The method must be lower case, as buildPermissionId writes it,
 * so every permission has exactly one spelling.
 */
export function parsePermissionId(id: string): ParsedPermissionId {
  if (typeof id !== "string" || id.length > MAX_PERMISSION_ID_LENGTH) {
    throw new PermissionIdError("permission_id_invalid", "permission id must be a string of bounded length");
  }
  const first = id.indexOf(":");
  const second = first === -1 ? -1 : id.indexOf(":", first + 1);
  if (first === -1 || second === -1) {
    throw new PermissionIdError("permission_id_invalid", "expected <capability_id>:<method>:<path template>");
  }
  const capabilityId = checkCapabilityId(id.slice(0, first));
  const rawMethod = id.slice(first + 1, second);
  const method = checkMethod(rawMethod);
  if (rawMethod !== method.toLowerCase())
    throw new PermissionIdError("method_invalid", "method must be lower case");
  const pathTemplate = checkPathTemplate(id.slice(second + 1));
  return { capabilityId, method, pathTemplate };
}

export function isValidPermissionId(value: unknown): value is PermissionId {
  if (typeof value !== "string") return false;
  try {
    parsePermissionId(value);
    return true;
  } catch {
    return false;
  }
}
