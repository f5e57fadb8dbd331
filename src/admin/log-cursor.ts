/**
 * The `cursor` of the log views: an opaque token for a position (time, seq) in one query's
 * answer. It carries a digest of the query it was issued for (view, partner scope, filters,
 * window), so a cursor replayed with other filters or another partner's scope, edited, or
 * made up is refused (400) instead of being read as a position. The scope itself is never
 * taken from a cursor: it comes from the caller's principal on every request, so even a
 * well-formed position can only move within what the caller may read.
 */
import { createHash } from "node:crypto";
import { AuthorityError } from "../errors.ts";
import type { LogPosition } from "../store/store.ts";

const VERSION = "c1";
/** Longest cursor accepted (a valid one is about 60 characters). */
export const MAX_CURSOR_LENGTH = 128;
const TOKEN = /^c1\.([0-9]{1,15})\.([0-9]{1,15})\.([0-9a-f]{32})$/;

/** A digest of everything that selects the rows of a query (not its limit or cursor). */
export function queryDigest(parts: unknown): string {
  return createHash("sha256").update(JSON.stringify(parts)).digest("hex").slice(0, 32);
}

export function encodeLogCursor(position: LogPosition, digest: string): string {
  return Buffer.from(`${VERSION}.${position.time}.${position.seq}.${digest}`).toString("base64url");
}

const refused = (): AuthorityError =>
  new AuthorityError("invalid_request", "cursor is not a cursor this query returned.");

/** The position a cursor names, when it was issued for the query with this digest; else 400. */
export function decodeLogCursor(cursor: string, digest: string): LogPosition {
  if (cursor.length > MAX_CURSOR_LENGTH || !/^[A-Za-z0-9_-]+$/.test(cursor)) throw refused();
  const match = TOKEN.exec(Buffer.from(cursor, "base64url").toString("latin1"));
  if (match === null || match[3] !== digest) throw refused();
  const time = Number(match[1]);
  const seq = Number(match[2]);
  if (!Number.isSafeInteger(time) || !Number.isSafeInteger(seq)) throw refused();
  return { time, seq };
}
