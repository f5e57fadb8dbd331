/**
 * The checkpointing thread of a SQLite store (checkpointer.ts): its own connection to the
 * file, which copies the WAL back into the main file when asked — the WAL `fsync`s and the
 * page copies happen here, never on the event loop of the process that writes.
 */
import { DatabaseSync } from "node:sqlite";
import { parentPort, workerData } from "node:worker_threads";

interface ThreadData {
  readonly path: string;
  readonly busyTimeoutMs: number;
}

export type CheckpointRequest = { readonly type: "checkpoint" } | { readonly type: "close" };
export type CheckpointReply = { readonly type: "checkpointed" } | { readonly type: "failed" };

const port = parentPort;
if (port === null) throw new Error("checkpoint-thread.ts runs as a worker thread");
const { path, busyTimeoutMs } = workerData as ThreadData;
const db = new DatabaseSync(path, { timeout: busyTimeoutMs });
// The same syncs as an inline checkpoint of the writing connection (docs/store.md: durable across
// process crashes): the WAL is synced before its pages are copied, the main file after.
db.exec("PRAGMA synchronous = NORMAL");
const checkpoint = db.prepare("PRAGMA wal_checkpoint(PASSIVE)");

port.on("message", (request: CheckpointRequest) => {
  if (request.type === "close") {
    db.close();
    port.close();
    return;
  }
  let reply: CheckpointReply;
  try {
    // PASSIVE: copies what no reader still needs, never waits for the writer.
    checkpoint.get();
    reply = { type: "checkpointed" };
  } catch {
    reply = { type: "failed" };
  }
  port.postMessage(reply);
});
