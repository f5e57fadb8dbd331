/**
 * Validation of `Store.writeAll` batches, shared by the backends: every write is checked and
 * its value encoded before anything is sent, so a bad write refuses the batch untouched.
 */
import {
  checkId,
  checkIncrement,
  checkName,
  checkTtl,
  encodeValue,
  StoreInvalidArgumentError,
} from "./errors.ts";
import { type LogIndexValues, logIndexValues } from "./log-query.ts";
import type { StoreWrite } from "./store.ts";

/** Most writes in one batch. */
export const MAX_BATCH_WRITES = 100;

export type CheckedWrite =
  | {
      readonly op: "put";
      readonly collection: string;
      readonly id: string;
      readonly text: string;
      readonly ttlMs: number | undefined;
    }
  | { readonly op: "delete"; readonly collection: string; readonly id: string }
  | { readonly op: "append"; readonly log: string; readonly text: string; readonly index: LogIndexValues }
  | { readonly op: "increment"; readonly counters: string; readonly key: string; readonly by: number };

function checkWrite(write: StoreWrite): CheckedWrite {
  switch (write?.op) {
    case "put":
      return {
        op: "put",
        collection: checkName("collection", write.collection),
        id: checkId("id", write.id),
        text: encodeValue(write.value),
        ttlMs: checkTtl(write.ttlMs === undefined ? undefined : { ttlMs: write.ttlMs }),
      };
    case "delete":
      return {
        op: "delete",
        collection: checkName("collection", write.collection),
        id: checkId("id", write.id),
      };
    case "append":
      return {
        op: "append",
        log: checkName("log", write.log),
        text: encodeValue(write.value),
        index: logIndexValues(write.value),
      };
    case "increment":
      return {
        op: "increment",
        counters: checkName("counters", write.counters),
        key: checkId("counter key", write.key),
        by: checkIncrement(write.by),
      };
    default:
      throw new StoreInvalidArgumentError("Unknown write in a batch.");
  }
}

export function checkWrites(writes: readonly StoreWrite[]): CheckedWrite[] {
  if (!Array.isArray(writes) || writes.length > MAX_BATCH_WRITES) {
    throw new StoreInvalidArgumentError(`A batch is an array of at most ${MAX_BATCH_WRITES} writes.`);
  }
  return writes.map(checkWrite);
}
