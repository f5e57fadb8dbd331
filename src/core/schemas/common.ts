/** Schema pieces shared by the core schemas. No `$id` here: pieces are embedded, not referenced. */

export const timestampSchema = {
  type: "string",
  format: "date-time",
  // ISO 8601 in UTC only: a "Z" offset keeps every timestamp comparable as text too.
  pattern: "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(?:\\.\\d{1,9})?Z$",
} as const;

export const sha256RefSchema = { type: "string", pattern: "^sha256:[0-9a-f]{64}$" } as const;

export const nonEmptyString = (maxLength: number) => ({ type: "string", minLength: 1, maxLength }) as const;

export const jsonPointerSchema = {
  type: "string",
  maxLength: 1024,
  pattern: "^(?:/(?:[^~/]|~[01])*)*$",
} as const;

export const capabilityIdSchema = {
  type: "string",
  pattern: "^[A-Za-z0-9_][A-Za-z0-9._~@+-]{0,127}$",
} as const;

/** Structural check only; parsePermissionId does the full validation. */
export const permissionIdSchema = {
  type: "string",
  maxLength: 2048,
  pattern: "^[A-Za-z0-9_][A-Za-z0-9._~@+-]{0,127}:(?:get|put|post|delete|options|head|patch|trace):/",
} as const;
