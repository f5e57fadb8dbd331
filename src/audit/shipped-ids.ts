/**
 * The ids of the decision records sidecars ship (`POST /v1/sidecar/decisions`). A sidecar picks
 * its records' ids, and its clients learn them (the receipt) before the record is shipped. A
 * held id therefore only means "stored already" when the held record is this very record (a
 * batch sent again): another sidecar that sent a record with the id first (id squatting) must
 * not make the authority drop the real one. Such a record is stored under a new id and names
 * the id it was shipped with (`shipped_id`), which its receipt still finds.
 */
import { logs } from "../store/model.ts";
import type { Store } from "../store/store.ts";
import { findAtInstant, ID_FIELDS } from "./receipts.ts";
import { type DecisionInput, decisionRecord, newRecordId } from "./records.ts";
import type { ShippedDecision } from "./shipped-decisions.ts";

/** A shipped record to store: its input and the id to store it under. */
export interface PlacedDecision {
  readonly input: DecisionInput;
  readonly id: string;
}

/** The fields that tell one shipped record from another (as stored: bounded, path without query). */
const IDENTIFYING = [
  "partner_id",
  "subject_id",
  "capability_id",
  "method",
  "path",
  "decision",
  "reason",
  "transport",
  "requestId",
  "time",
] as const;

function sameRecord(stored: unknown, expected: Readonly<Record<string, unknown>>): boolean {
  if (typeof stored !== "object" || stored === null) return false;
  const row = stored as Readonly<Record<string, unknown>>;
  return IDENTIFYING.every((field) => row[field] === expected[field]);
}

/**
 * Index pages of its instant read to find a record sent again: a sender that crowds one
 * millisecond with records cannot make a batch cost more than this per held id; past it the
 * record is taken as not stored (stored again: a twin, never a loss).
 */
const RESEND_LOOKUP_PAGES = 1;

/** Whether this very record is stored already, under its id or (after a collision) in its place. */
async function storedAlready(store: Store, record: ShippedDecision, input: DecisionInput): Promise<boolean> {
  const expected = decisionRecord(input, record.id) as unknown as Readonly<Record<string, unknown>>;
  const timeMs = Date.parse(record.time);
  if (!Number.isFinite(timeMs)) return false;
  // Only its own partner's records (an index), where it has one.
  const partnerId = expected.partner_id;
  const scope: Record<string, string> = typeof partnerId === "string" ? { partner_id: partnerId } : {};
  const same = (value: unknown) => sameRecord(value, expected);
  for (const field of ID_FIELDS) {
    const where = { ...scope, [field]: record.id };
    const found = await findAtInstant(store, logs.audit, timeMs, where, same, RESEND_LOOKUP_PAGES);
    if (found !== undefined) return true;
  }
  return false;
}

/**
 * The records of a batch to store, with their ids: a record stored already is left out; one
 * whose id another record holds is stored under a new id (`collided` counts them).
 */
export async function placeShippedDecisions(
  store: Store,
  records: readonly { readonly record: ShippedDecision; readonly input: DecisionInput }[],
): Promise<{ readonly placed: PlacedDecision[]; readonly collided: number }> {
  const held = new Set(
    await store.logIdsHeld(
      logs.audit,
      records.map(({ record }) => record.id),
    ),
  );
  const placed: PlacedDecision[] = [];
  let collided = 0;
  for (const { record, input } of records) {
    if (!held.has(record.id)) placed.push({ input, id: record.id });
    else if (!(await storedAlready(store, record, input))) {
      collided++;
      placed.push({ input: { ...input, shipped_id: record.id }, id: newRecordId("dec") });
    }
  }
  return { placed, collided };
}
