import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { createAuditWriter } from "../../src/audit/writer.ts";
import { openStore } from "../../src/store/index.ts";
import type { Store } from "../../src/store/store.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

/** The store, with every log write it is asked for counted (one call = one transaction). */
function countingStore(store: Store): { store: Store; calls: () => number } {
  let calls = 0;
  const counted = Object.create(store) as Store;
  Object.assign(counted, {
    appendMany: (log: string, values: readonly unknown[]) => {
      calls++;
      return store.appendMany(log, values);
    },
    appendAcross: (entries: readonly { log: string; value: unknown }[]) => {
      calls++;
      return store.appendAcross?.(entries) ?? Promise.reject(new Error("not offered"));
    },
  });
  return { store: counted, calls: () => calls };
}

const values = async (store: Store, log: string): Promise<unknown[]> =>
  (await store.readLog(log)).map((entry) => entry.value);

describe("audit writer: deferred records", () => {
  let dir: TempDir;
  let store: Store;
  let n = 0;
  const logName = (what: string) => `${what}-${++n}`;

  before(async () => {
    dir = await makeTempDir("audit-writer-");
    store = await openStore(`sqlite:${join(dir.path, "a.db")}`);
  });
  after(async () => {
    await store.close();
    await dir.cleanup();
  });

  test("a deferred record is stored with the next record waited for: one transaction for both logs", async () => {
    const { store: counted, calls } = countingStore(store);
    const writer = createAuditWriter({ store: counted, lingerMs: 60_000 });
    const [rows, decisions] = [logName("rows"), logName("decisions")];
    const row = writer.write({ log: { name: rows, value: { row: 1 } }, deferred: true });
    // A turn later the deferred row is still waiting (nothing forced it out).
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(calls(), 0);
    await writer.write({ log: { name: decisions, value: { decision: 1 } } });
    await row;
    assert.equal(calls(), 1, "both records in one store call");
    assert.deepEqual(await values(store, rows), [{ row: 1 }]);
    assert.deepEqual(await values(store, decisions), [{ decision: 1 }]);
    await writer.close();
  });

  test("a record waited for is never held back by the linger", async () => {
    const { store: counted, calls } = countingStore(store);
    const writer = createAuditWriter({ store: counted, lingerMs: 60_000 });
    const decisions = logName("decisions");
    await writer.write({ log: { name: decisions, value: { decision: 1 } } });
    assert.equal(calls(), 1);
    assert.deepEqual(await values(store, decisions), [{ decision: 1 }]);
    await writer.close();
  });

  test("a deferred record alone is stored once the linger passes", async () => {
    const writer = createAuditWriter({ store, lingerMs: 5 });
    const rows = logName("rows");
    await writer.write({ log: { name: rows, value: { row: 1 } }, deferred: true });
    assert.deepEqual(await values(store, rows), [{ row: 1 }]);
    await writer.close();
  });

  test("flush() and close() store deferred records at once, in the order they were written", async () => {
    const writer = createAuditWriter({ store, lingerMs: 60_000 });
    const rows = logName("rows");
    void writer.write({ log: { name: rows, value: 1 }, deferred: true });
    void writer.write({ log: { name: rows, value: 2 }, deferred: true });
    assert.equal(await writer.flush(5000), true);
    assert.deepEqual(await values(store, rows), [1, 2]);
    void writer.write({ log: { name: rows, value: 3 }, deferred: true });
    assert.deepEqual(await writer.close(1000), { flushed: true, lost: 0 });
    assert.deepEqual(await values(store, rows), [1, 2, 3]);
  });

  test("a full batch of deferred records does not wait for the linger", async () => {
    const writer = createAuditWriter({ store, lingerMs: 60_000, batchSize: 3 });
    const rows = logName("rows");
    const written = [1, 2, 3].map((value) => writer.write({ log: { name: rows, value }, deferred: true }));
    await Promise.all(written);
    assert.deepEqual(await values(store, rows), [1, 2, 3]);
    await writer.close();
  });

  test("lingerMs is validated at construction", () => {
    assert.throws(() => createAuditWriter({ store, lingerMs: 0 }), TypeError);
    assert.throws(() => createAuditWriter({ store, lingerMs: 1.5 }), TypeError);
  });
});
