/** Worker for sqlite.test.ts: appends and increments through its own connection to a shared file. */
import { parentPort, workerData } from "node:worker_threads";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.ts";

const { path, count, worker } = workerData as { path: string; count: number; worker: number };
const store = new SqliteStore({ path, sweepIntervalMs: 0 });
const seqs: number[] = [];
for (let i = 0; i < count; i++) {
  seqs.push(await store.append("shared", { worker, i }));
  await store.increment("shared", "total", worker + 1);
  await store.create("winners", `slot-${i}`, { worker });
}
await store.close();
parentPort?.postMessage(seqs);
