/**
 * WAL checkpoints of a SQLite store on a thread of their own (decision 2831). SQLite's
 * automatic checkpoint runs inside the commit that crosses its threshold, on the caller's
 * thread: the event loop of the service stops for the page copies and two `fsync`s (0.5–15 ms
 * on a shared disk), which set the p99 of every request behind it. Here the writing connection
 * estimates the WAL pages it writes and, every `everyPages`, asks a worker thread with its own
 * connection to checkpoint (PASSIVE: it never holds the writer up). One checkpoint at a time;
 * the writes made meanwhile start the next when it ends.
 *
 * Durability is unchanged: the same checkpoint with the same syncs (synchronous = NORMAL), only
 * on another thread. When the thread cannot start or fails, `onFailure` is told once (the store
 * then checkpoints inline again) and nothing more is asked of it.
 */
import { Worker } from "node:worker_threads";
import type { CheckpointReply, CheckpointRequest } from "./checkpoint-thread.ts";

const THREAD_URL = new URL("./checkpoint-thread.ts", import.meta.url);
/** How long close() waits for the checkpoint in flight before it stops the thread. */
const CLOSE_WAIT_MS = 10_000;

export interface CheckpointerOptions {
  readonly path: string;
  readonly busyTimeoutMs: number;
  /** WAL pages written (as estimated by the caller) between two checkpoint requests. */
  readonly everyPages: number;
  /** The thread failed: checkpoints are the writing connection's again. */
  readonly onFailure: () => void;
}

export interface CheckpointerStats {
  readonly requested: number;
  readonly completed: number;
}

export interface Checkpointer {
  /** Told after each committed write: about `pages` WAL pages written. */
  wrote(pages: number): void;
  stats(): CheckpointerStats;
  /** Ends the thread after the checkpoint in flight. */
  close(): Promise<void>;
}

export function createCheckpointer(options: CheckpointerOptions): Checkpointer {
  let worker: Worker | undefined;
  let written = 0;
  let inFlight = false;
  let failed = false;
  let requested = 0;
  let completed = 0;

  function fail(): void {
    if (failed) return;
    failed = true;
    inFlight = false;
    const stopped = worker;
    worker = undefined;
    void stopped?.terminate();
    options.onFailure();
  }

  /** Started on the first request: a store that writes little never has a thread. */
  function thread(): Worker {
    if (worker !== undefined) return worker;
    const started = new Worker(THREAD_URL, {
      execArgv: [],
      workerData: { path: options.path, busyTimeoutMs: options.busyTimeoutMs },
    });
    // A pending checkpoint must not keep a finished process alive (an interrupted one is safe).
    started.unref();
    started.on("message", (reply: CheckpointReply) => {
      if (reply.type === "failed") return fail();
      completed++;
      inFlight = false;
      request();
    });
    started.on("error", fail);
    started.on("exit", () => {
      if (worker === started) fail();
    });
    worker = started;
    return started;
  }

  function request(): void {
    if (failed || inFlight || written < options.everyPages) return;
    written = 0;
    inFlight = true;
    requested++;
    thread().postMessage({ type: "checkpoint" } satisfies CheckpointRequest);
  }

  return {
    wrote(pages) {
      written += pages;
      request();
    },
    stats: () => ({ requested, completed }),
    async close() {
      const running = worker;
      worker = undefined;
      failed = true;
      if (running === undefined) return;
      const exited = new Promise<void>((resolve) => running.once("exit", () => resolve()));
      // Held until it has closed its connection (the store's own close checkpoints after it).
      running.ref();
      running.postMessage({ type: "close" } satisfies CheckpointRequest);
      const stuck = setTimeout(() => void running.terminate(), CLOSE_WAIT_MS);
      await exited;
      clearTimeout(stuck);
    },
  };
}
