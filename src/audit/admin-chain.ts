/**
 * The admin changes' chain (docs/decisions/2771): policy and binding changes are written by the
 * admin API in their own transactions (an assignment and its record together), not through the
 * recorder's queue, so they cannot take places in the decision stream. Each replica chains them
 * in a stream of their own in log `audit` — `<replica>/admin` — linked exactly like decision
 * records (chain.ts) and sealed by that stream's checkpoints, so `audit verify` covers them.
 *
 * One write at a time: a record is linked to the stream's stored head and stored with the
 * writes it belongs to in one `writeAll`; the head moves only once that succeeded, so a refused
 * write leaves no hole.
 */
import { logs } from "../store/model.ts";
import type { Store, StoreWrite } from "../store/store.ts";
import type { ChainLinker } from "./chain.ts";

/** The admin stream of a replica. */
export const adminStreamOf = (replicaId: string): string => `${replicaId}/admin`;

export interface AdminChain {
  /** Appends `record` to log `audit`, chained, in one transaction with `writes`. */
  append(record: object, writes?: readonly StoreWrite[]): Promise<void>;
}

/** `linker`'s stream is the admin stream; its stored heads are what the checkpoints seal. */
export function createAdminChain(store: Store, linker: ChainLinker): AdminChain {
  let running: Promise<unknown> = Promise.resolve();
  async function append(record: object, writes: readonly StoreWrite[]): Promise<void> {
    const head = linker.storedHeads()[logs.audit];
    const chained = { ...record, chain: { stream: linker.stream, n: head.n + 1, prev: head.hash } };
    await store.writeAll([...writes, { op: "append", log: logs.audit, value: chained }]);
    // The log's length bounds the record's seq from above: a restart follows the stream from
    // there for later records of its own, which only a later write (after this one) makes.
    linker.stored(logs.audit, chained, await store.logLength(logs.audit).catch(() => head.seq));
  }
  return {
    append(record, writes = []) {
      const next = running.then(() => append(record, writes));
      running = next.catch(() => undefined);
      return next;
    },
  };
}
