/**
 * Cursor pagination of `tools/list` (pure). The caller's list is rebuilt from its verified
 * policy on every page; the cursor only says where the previous page ended: the name of
 * its last tool, base64url-encoded behind a version tag. It carries no authority — a
 * forged cursor can only start a page inside the caller's own list, and a name that is not
 * in it (never shown, since removed, or garbage) is the same `-32602 Invalid cursor`, so a
 * cursor tells nothing about tools of others.
 */
import { INVALID_PARAMS, ProtocolError } from "@modelcontextprotocol/server";

/** Tools per page: a 500-tool policy is five bounded answers, not one. */
export const TOOLS_PAGE_SIZE = 100;

const CURSOR_TAG = "t1:";
/** Longer than any cursor this server hands out (tool names stay within 128 characters). */
const MAX_CURSOR_LENGTH = 512;

interface NamedTool {
  readonly name: string;
}

export function encodeToolCursor(lastName: string): string {
  return Buffer.from(`${CURSOR_TAG}${lastName}`, "utf8").toString("base64url");
}

function invalidCursor(): ProtocolError {
  return new ProtocolError(INVALID_PARAMS, "Invalid cursor.");
}

function decodeToolCursor(cursor: string): string {
  if (cursor.length > MAX_CURSOR_LENGTH || !/^[A-Za-z0-9_-]+$/.test(cursor)) throw invalidCursor();
  const text = Buffer.from(cursor, "base64url").toString("utf8");
  if (!text.startsWith(CURSOR_TAG) || text.length === CURSOR_TAG.length) throw invalidCursor();
  return text.slice(CURSOR_TAG.length);
}

/** One page of `tools`, and `nextCursor` when more follow. */
export function pageOfTools<T extends NamedTool>(
  tools: readonly T[],
  cursor: string | undefined,
  pageSize: number = TOOLS_PAGE_SIZE,
): { tools: T[]; nextCursor?: string } {
  let start = 0;
  if (cursor !== undefined) {
    const after = decodeToolCursor(cursor);
    const index = tools.findIndex((tool) => tool.name === after);
    if (index < 0) throw invalidCursor();
    start = index + 1;
  }
  const page = tools.slice(start, start + pageSize);
  const last = page.at(-1);
  return start + pageSize < tools.length && last !== undefined
    ? { tools: page, nextCursor: encodeToolCursor(last.name) }
    : { tools: page };
}
