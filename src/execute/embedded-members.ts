import { baseView, forEachView, ViewBudgetError } from "./decoded-views.ts";

/**
 * JSON inside what redaction does not parse: a JSONP callback, an HTML `<pre>` (escaped or
 * not), a script's object literal, JSON kept as a string inside a JSON document, base64 of
 * JSON. A client reads the members out of it; redaction, which masks parsed members, never
 * sees them (docs/decisions/2505-decoded-views.md). `holdsMember` tells whether any decoded
 * view of a text (decoded-views.ts) shows a member whose name `isCovered` — the default
 * sensitive names and the names of the rules' locations — with a value a client could read:
 * a non-empty string that is not already a mask, a number, an object, an array, or nothing
 * (the view ends: the value cannot be shown empty). Such a
 * body cannot be redacted in place and is refused (`redaction_failed`).
 *
 * A member is `"name":`, `'name':`, or an unquoted `name:` right after `{` or `,` (an object
 * literal); `Password: …` in prose is not one.
 */

const MAX_NAME = 128;
/** The shortest member with a readable value (`{pin:1`), and the longest text one needs to show. */
const MIN_MEMBER = 6;
const MAX_MEMBER = MAX_NAME + 8;
/** A `:`, an escape, or a run the views decode (decoded-views.ts: 11 base64 characters at least). */
const MAY_HOLD_MEMBER = /[:%&\\=]|[A-Za-z0-9+/_-][A-Za-z0-9+/_\t\n\f\r -]{10}/;

function isSpace(code: number): boolean {
  return code === 0x20 || code === 0x09 || code === 0x0a || code === 0x0d || code === 0x0c;
}

function isNameChar(code: number): boolean {
  return (
    (code >= 0x61 && code <= 0x7a) ||
    (code >= 0x41 && code <= 0x5a) ||
    (code >= 0x30 && code <= 0x39) ||
    code === 0x5f ||
    code === 0x24 ||
    code === 0x2d
  );
}

function skipSpaceBack(text: string, at: number): number {
  let i = at;
  while (i >= 0 && isSpace(text.charCodeAt(i))) i--;
  return i;
}

/**
 * The member name ending just before the `:` at `colon`, or undefined: a quoted name
 * (`"…"`, `'…'`, at most MAX_NAME characters, escapes kept as written) or an unquoted one
 * right after `{` or `,`.
 */
function nameBefore(text: string, colon: number): string | undefined {
  const last = skipSpaceBack(text, colon - 1);
  if (last < 0) return undefined;
  const quote = text[last];
  if (quote === '"' || quote === "'") {
    for (let i = last - 1; i >= 0 && i >= last - 1 - MAX_NAME; i--) {
      if (text[i] === quote && text[i - 1] !== "\\")
        return i === last - 1 ? undefined : text.slice(i + 1, last);
      if (text[i] === "\n" || text[i] === "\r") return undefined;
    }
    return undefined;
  }
  let start = last;
  while (start >= 0 && last - start < MAX_NAME && isNameChar(text.charCodeAt(start))) start--;
  if (start === last || (start >= 0 && isNameChar(text.charCodeAt(start)))) return undefined;
  const before = text[skipSpaceBack(text, start)];
  return before === "{" || before === "," ? text.slice(start + 1, last + 1) : undefined;
}

/** Whether the value starting at `at` is one a client could read (see the module comment). */
function readableValue(text: string, at: number): boolean {
  let i = at;
  while (i < text.length && isSpace(text.charCodeAt(i))) i++;
  const first = text[i];
  if (first === '"' || first === "'") {
    let j = i + 1;
    while (text[j] === "*") j++;
    // "" and "****" (already masked) hold nothing.
    return text[j] !== first;
  }
  // A view that ends here (a value cut off by scrubbing or by the end of a run) cannot be shown empty.
  return first === undefined || /[-0-9{[]/.test(first);
}

function viewHoldsMember(text: string, isCovered: (name: string) => boolean): boolean {
  for (let colon = text.indexOf(":"); colon !== -1; colon = text.indexOf(":", colon + 1)) {
    const name = nameBefore(text, colon);
    if (name !== undefined && isCovered(name) && readableValue(text, colon + 1)) return true;
  }
  return false;
}

/**
 * Whether a client could read a covered member out of `text` (any decoded view). A text
 * whose views exceed their budget counts as holding one: it cannot be shown not to.
 */
export function holdsMember(text: string, isCovered: (name: string) => boolean): boolean {
  // No reading of it can hold a member: no `:`, no escape, no run long enough to decode.
  if (!MAY_HOLD_MEMBER.test(text)) return false;
  let found = false;
  try {
    forEachView(
      baseView(text),
      (view) => {
        found = view.text.includes(":") && viewHoldsMember(view.text, isCovered);
        return found;
      },
      MIN_MEMBER,
      MAX_MEMBER,
    );
  } catch (error) {
    if (error instanceof ViewBudgetError) return true;
    throw error;
  }
  return found;
}
