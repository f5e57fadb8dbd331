import { randomBytes } from "node:crypto";

/**
 * Identifier rules of the admin API (in core: identity, bindings and admin all check ids). None of them admits "/", which separates the parts
 * of store keys, or characters that need escaping in a URL path segment.
 */
export const idPatterns = {
  partner: "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
  subject: "^[A-Za-z0-9._:@-]{1,128}$",
  /** A subject as routes name it: its id, or its id in a partner's namespace (`<partner>~<id>`). */
  subjectRef: "^(?:[A-Za-z0-9][A-Za-z0-9._-]{0,63}~)?[A-Za-z0-9._:@-]{1,128}$",
  /** Boundaries and auth profiles. */
  local: "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
  /** Same as core's capability id (the first field of a permission id). */
  capability: "^[A-Za-z0-9_][A-Za-z0-9._~@+-]{0,127}$",
} as const;

const compiled = {
  partner: new RegExp(idPatterns.partner),
  subject: new RegExp(idPatterns.subject),
  subjectRef: new RegExp(idPatterns.subjectRef),
  local: new RegExp(idPatterns.local),
  capability: new RegExp(idPatterns.capability),
};

export function isValidId(kind: keyof typeof idPatterns, value: unknown): value is string {
  return typeof value === "string" && compiled[kind].test(value);
}

/** A fresh random id such as `sub_Xk2…`: 72 random bits, URL- and key-safe. */
export function generateId(prefix: string): string {
  return `${prefix}_${randomBytes(9).toString("base64url")}`;
}
