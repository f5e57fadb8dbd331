import { isRecord, ownValue as own, setOwn } from "../core/own-property.ts";
/** RFC 6901 helpers for the pointers that locate problems in a submitted document. */

export const escapeToken = (token: string): string => token.replaceAll("~", "~0").replaceAll("/", "~1");

export const unescapeToken = (token: string): string => token.replaceAll("~1", "/").replaceAll("~0", "~");

export function pointerOf(...tokens: ReadonlyArray<string | number>): string {
  return tokens.map((t) => `/${escapeToken(String(t))}`).join("");
}

export function appendPointer(base: string, ...tokens: ReadonlyArray<string | number>): string {
  return base + pointerOf(...tokens);
}

// Own-property lookup: a document key like "constructor" must not reach Object.prototype.
export { own, setOwn };

/**
 * Resolves an internal reference ("#/components/schemas/X", URI-fragment encoded) in a
 * document; undefined when it names nothing.
 */
export function resolveFragment(document: unknown, ref: string): unknown {
  if (!ref.startsWith("#")) return undefined;
  let fragment: string;
  try {
    fragment = decodeURIComponent(ref.slice(1));
  } catch {
    return undefined;
  }
  if (fragment === "") return document;
  if (!fragment.startsWith("/")) return undefined;
  let current: unknown = document;
  for (const raw of fragment.slice(1).split("/")) {
    const token = unescapeToken(raw);
    if (Array.isArray(current)) {
      if (!/^(?:0|[1-9]\d*)$/.test(token)) return undefined;
      current = current[Number(token)];
    } else if (isRecord(current)) {
      current = own(current, token);
    } else {
      return undefined;
    }
    if (current === undefined) return undefined;
  }
  return current;
}

export { isRecord };
