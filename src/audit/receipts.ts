/**
 * Receipt ids: what a response carries (`x-authority-receipt`) so that its decision record can
 * be found again. A receipt names the log, the record's time (ms) and its id —
 * `r1.<a|m|e>.<time>.<id>` — so a lookup reads one instant of the log's time index, never the
 * whole log. It carries no authority: the lookup is scoped to the caller's partner.
 */
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
const RECEIPT = /^r1\.([ame])\.(\d{1,15})\.((?:dec|mcp|evd)_[A-Za-z0-9-]{1,64})$/;

export interface ReceiptRef {
  readonly log: ChainedLog;
  readonly timeMs: number;
  readonly id: string;
}

/** The receipt of a record written to `log` with this id and time. */
export function receiptOf(log: ChainedLog, record: { readonly id: string; readonly time: string }): string {
  return `r1.${LOG_CODES[log]}.${Date.parse(record.time)}.${record.id}`;
}

export function parseReceipt(text: string): ReceiptRef | undefined {
  const match = RECEIPT.exec(text);
  const log = match?.[1] === undefined ? undefined : LOG_OF_CODE.get(match[1]);
  if (match === null || log === undefined) return undefined;
  return { log, timeMs: Number(match[2]), id: match[3] ?? "" };
}

/** The fields a record's receipt id may be in: its id, or the id a sidecar shipped it with. */
export const ID_FIELDS = ["id", "shipped_id"] as const;

/** Most index pages read for one receipt (records of one millisecond). */
const MAX_PAGES = 20;

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
  for (const field of ID_FIELDS) {
    const where = { ...scope, [field]: receipt.id };
    const found = await findAtInstant(store, receipt.log, receipt.timeMs, where, () => true);
    if (found !== undefined) return found;
  }
  return undefined;
}

/**
 * The first entry of `log` at this instant (ms) that matches `where` and `accept`, reading at
 * most `maxPages` index pages of that one millisecond.
 */
export async function findAtInstant(
  store: Store,
  log: ChainedLog,
  timeMs: number,
  where: Readonly<Record<string, string>>,
  accept: (value: unknown) => boolean,
  maxPages = MAX_PAGES,
): Promise<{ readonly seq: number; readonly value: unknown } | undefined> {
  let after: { time: number; seq: number } | undefined;
  for (let page = 0; page < maxPages; page++) {
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
