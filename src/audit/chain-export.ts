/**
 * The export `authority audit verify` checks (verify-chain.ts): JSON lines — a header, every
 * signed checkpoint, then the records of each chained log in store (seq) order. Checkpoints
 * come first so that cutting the end of the file removes records, which the checkpoints then
 * show missing.
 */
import { logs } from "../store/model.ts";
import type { Store } from "../store/store.ts";
import { CHAINED_LOGS } from "./chain.ts";
import { EXPORT_TYPE } from "./verify-chain.ts";

const PAGE = 1000;

async function* entriesOf(store: Store, log: string): AsyncGenerator<{ seq: number; value: unknown }> {
  let after = 0;
  for (;;) {
    const entries = await store.readLog(log, { afterSeq: after, limit: PAGE });
    yield* entries;
    const last = entries.at(-1);
    if (last === undefined || entries.length < PAGE) return;
    after = last.seq;
  }
}

/** The export's lines, each without its newline. */
export async function* exportChains(store: Store, now: Date): AsyncGenerator<string> {
  yield JSON.stringify({ type: EXPORT_TYPE, exported_at: now.toISOString(), logs: CHAINED_LOGS });
  for await (const { seq, value } of entriesOf(store, logs.auditCheckpoints)) {
    yield JSON.stringify({ type: "checkpoint", seq, value });
  }
  for (const log of CHAINED_LOGS) {
    for await (const { seq, value } of entriesOf(store, log)) {
      yield JSON.stringify({ type: "record", log, seq, value });
    }
  }
}
