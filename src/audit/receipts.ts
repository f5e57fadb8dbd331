/**
 * Receipt ids: what a response carries (`x-authority-receipt`) so that its decision record can
 * be found again. A receipt names the log, the record's time (ms) and a digest of its id —
 * `r2.<a|m|e>.<time>.<digest>` — so a lookup reads one instant of the log's time index, never
 * the whole log. It carries no authority: the lookup is scoped to the caller's partner. It never
 * discloses the id itself: a sidecar answers a receipt before its record is shipped, and an id
 * known early could be sent first by someone else (docs/security.md, "A decision id squatted").
 * Receipts handed out before (`r1.<a|m|e>.<time>.<id>`) are still found.
 */
import { createHash } from "node:crypto";
import { setImmediate as nextTurn } from "node:timers/promises";
import { logs } from "../store/model.ts";
import type { Store } from "../store/store.ts";
import type { ChainedLog } from "./chain.ts";

/** The response header carrying a decision's receipt. */
export const RECEIPT_HEADER = "x-authority-receipt";

const LOG_CODES: Readonly<Record<ChainedLog, string>> = {
  [logs.audit]: "a",
  [logs.mcpAudit]: "m",
  [logs.evidence]: "e",
};
const LOG_OF_CODE: ReadonlyMap<string, ChainedLog> = new Map(
  Object.entries(LOG_CODES).map(([log, code]) => [code, log as ChainedLog]),
);
const RECORD_ID = "(?:dec|mcp|evd)_[A-Za-z0-9-]{1,64}";
/** 22 base64url characters: 132 bits of the id's SHA-256. */
const DIGEST = "[A-Za-z0-9_-]{22}";
const RECEIPT = new RegExp(
  `^(?:r1\\.([ame])\\.(\\d{1,15})\\.(${RECORD_ID})|r2\\.([ame])\\.(\\d{1,15})\\.(${DIGEST}))$`,
);
/** A receipt of either form, or a record id (`authority audit verify --sealed-through`). */
const RECORD_NAME = new RegExp(
  `^(?:r1\\.[ame]\\.\\d{1,15}\\.(${RECORD_ID})|r2\\.[ame]\\.\\d{1,15}\\.(${DIGEST})|(${RECORD_ID}))$`,
);

/** The digest of a record id a receipt carries instead of the id. */
export function receiptDigest(id: string): string {
  return createHash("sha256").update(id).digest("base64url").slice(0, 22);
}

/** Which record a receipt names: its id (an `r1` receipt) or its id's digest (`r2`). */
export type RecordName = { readonly id: string } | { readonly digest: string };

export interface ReceiptRef {
  readonly log: ChainedLog;
  readonly timeMs: number;
  readonly name: RecordName;
}

/** Whether a record id is the one named. */
export function namesRecord(name: RecordName, id: unknown): boolean {
  if (typeof id !== "string") return false;
  return "id" in name ? id === name.id : receiptDigest(id) === name.digest;
}

/** The receipt of a record written to `log` with this id and time. */
export function receiptOf(log: ChainedLog, record: { readonly id: string; readonly time: string }): string {
  return `r2.${LOG_CODES[log]}.${Date.parse(record.time)}.${receiptDigest(record.id)}`;
}

export function parseReceipt(text: string): ReceiptRef | undefined {
  const match = RECEIPT.exec(text);
  if (match === null) return undefined;
  const [, oldLog, oldTime, id, log, time, digest] = match;
  const code = oldLog ?? log;
  const logName = code === undefined ? undefined : LOG_OF_CODE.get(code);
  if (logName === undefined) return undefined;
  return {
    log: logName,
    timeMs: Number(oldTime ?? time),
    name: id !== undefined ? { id } : { digest: digest ?? "" },
  };
}

/** The record a receipt (either form) or a record id names; undefined when it is neither. */
export function recordNameOf(text: string): RecordName | undefined {
  const match = RECORD_NAME.exec(text);
  if (match === null) return undefined;
  const [, receiptId, digest, id] = match;
  if (digest !== undefined) return { digest };
  const named = receiptId ?? id;
  return named === undefined ? undefined : { id: named };
}

/** The fields a record's receipt id may be in: its id, or the id a sidecar shipped it with. */
export const ID_FIELDS = ["id", "shipped_id"] as const;

/**
 * The stored record a receipt names, if the caller may see it (`partnerId` undefined: the
 * platform scope). Twin records of a retried write share the id; the first is returned. A
 * record stored under another id because its own was held by someone else's record (a sidecar
 * ingest collision) names it as `shipped_id`, and is found by it.
 */
export async function findReceipt(
  store: Store,
  receipt: ReceiptRef,
  partnerId: string | undefined,
): Promise<{ readonly seq: number; readonly value: unknown } | undefined> {
  const scope: Record<string, string> = partnerId === undefined ? {} : { partner_id: partnerId };
  const { name } = receipt;
  if ("digest" in name) {
    // The id is not known: the instant's records (in scope) are matched by their ids' digests.
    const named = (value: unknown) => ID_FIELDS.some((field) => namesRecord(name, fieldOf(value, field)));
    return findAtInstant(store, receipt.log, receipt.timeMs, scope, named);
  }
  for (const field of ID_FIELDS) {
    const where = { ...scope, [field]: name.id };
    const found = await findAtInstant(store, receipt.log, receipt.timeMs, where, () => true);
    if (found !== undefined) return found;
  }
  return undefined;
}

function fieldOf(value: unknown, field: string): unknown {
  return typeof value === "object" && value !== null ? (value as Record<string, unknown>)[field] : undefined;
}

/**
 * The first entry of `log` at this instant (ms) that matches `where` and `accept`. A receipt's
 * lookup is exact: it reads the millisecond's index pages to the end, however many records a
 * burst put there, each page bounded and the event loop turning between them (decision 2863);
 * `maxPages` bounds a lookup that may stop short (a re-send check: audit/shipped-ids.ts).
 */
export async function findAtInstant(
  store: Store,
  log: ChainedLog,
  timeMs: number,
  where: Readonly<Record<string, string>>,
  accept: (value: unknown) => boolean,
  maxPages = Number.POSITIVE_INFINITY,
): Promise<{ readonly seq: number; readonly value: unknown } | undefined> {
  let after: { time: number; seq: number } | undefined;
  for (let page = 0; page < maxPages; page++) {
    if (page > 0) await nextTurn();
    const found = await store.queryLog(log, {
      where,
      since: timeMs,
      until: timeMs,
      limit: 100,
      ...(after === undefined ? {} : { after }),
    });
    const entry = found.entries.find((candidate) => accept(candidate.value));
    if (entry !== undefined) return { seq: entry.seq, value: entry.value };
    if (found.next === undefined) return undefined;
    after = found.next;
  }
  return undefined;
}
