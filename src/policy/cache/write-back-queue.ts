/**
 * The sidecar's write-backs to Redis (a sealed policy entry after a load), taken off the
 * Check's path: sealing a 500-operation policy (JSON, AES-GCM and HMAC over ~2 MB) and
 * writing it cost ~11 ms of a first Check (decision 2881). They run after the Check is
 * answered, one at a time with a turn of the event loop between them, and only while no
 * policy load is running — a burst of first Checks is answered first — or, under loads that
 * never pause, one per `maxDeferMs` (they are not starved). The queue is bounded
 * by the characters it holds (a write-back holds the signed text until it is sealed): when
 * full, a new write-back is dropped and counted. A lost write-back only costs another
 * sidecar a fetch from the authority; a newer write-back of a subject replaces a queued one.
 */

export type WriteBackResult = "written" | "dropped" | "failed";

export interface WriteBackQueueOptions {
  /** Most characters of pending write-backs held at once. */
  readonly maxPendingChars: number;
  /** Whether policy loads are running now: write-backs wait for `idle` then. */
  readonly busy: () => boolean;
  /** The longest a write-back waits for loads to pause; then one runs anyway. */
  readonly maxDeferMs: number;
  readonly onResult?: (result: WriteBackResult) => void;
}

export interface WriteBack {
  /** What the write-back holds while it waits (the signed text's length and some). */
  readonly chars: number;
  /** Seals and writes (true), or finds it has nothing to write (false, not counted); a rejection is counted as failed. */
  run(): Promise<boolean>;
}

export interface WriteBackQueue {
  /** Queues the subject's write-back (replacing a pending one of the subject), or drops it when full. */
  add(subjectId: string, job: WriteBack): void;
  /** Tells the queue that no load is running any more. */
  idle(): void;
  /** Resolves when nothing is pending or running (tests, shutdown). */
  drained(): Promise<void>;
  /** Drops what is pending; a running write-back ends on its own. */
  clear(): void;
  readonly pending: number;
}

export function createWriteBackQueue(options: WriteBackQueueOptions): WriteBackQueue {
  const pending = new Map<string, WriteBack>();
  let chars = 0;
  let running = false;
  let scheduled = false;
  let waitingForIdle = false;
  /** Since when write-backs wait for busy loads (performance.now), and the timer that ends the wait. */
  let deferredSince: number | undefined;
  let deferral: NodeJS.Timeout | undefined;
  let drainWaiters: Array<() => void> = [];

  const settle = (): void => {
    if (pending.size > 0 || running) return;
    const waiters = drainWaiters;
    drainWaiters = [];
    for (const resolve of waiters) resolve();
  };

  const schedule = (): void => {
    if (scheduled || running || pending.size === 0) return;
    scheduled = true;
    setImmediate(step);
  };

  const step = (): void => {
    scheduled = false;
    if (running) return;
    if (options.busy()) {
      const at = performance.now();
      deferredSince ??= at;
      const left = options.maxDeferMs - (at - deferredSince);
      if (left > 0) {
        waitingForIdle = true;
        deferral ??= setTimeout(() => {
          deferral = undefined;
          schedule();
        }, left).unref();
        return;
      }
    }
    deferredSince = undefined;
    const next = pending.entries().next();
    if (next.done === true) {
      settle();
      return;
    }
    const [subjectId, job] = next.value;
    pending.delete(subjectId);
    chars -= job.chars;
    running = true;
    Promise.resolve()
      .then(() => job.run())
      .then(
        (wrote) => {
          if (wrote) options.onResult?.("written");
        },
        () => options.onResult?.("failed"),
      )
      .finally(() => {
        running = false;
        settle();
        schedule();
      });
  };

  return {
    add(subjectId, job) {
      const replaced = pending.get(subjectId);
      const held = chars - (replaced?.chars ?? 0);
      if (held + job.chars > options.maxPendingChars) {
        options.onResult?.("dropped");
        return;
      }
      pending.delete(subjectId);
      pending.set(subjectId, job);
      chars = held + job.chars;
      schedule();
    },
    idle() {
      if (!waitingForIdle) return;
      waitingForIdle = false;
      schedule();
    },
    drained() {
      if (pending.size === 0 && !running) return Promise.resolve();
      return new Promise<void>((resolve) => drainWaiters.push(resolve));
    },
    clear() {
      clearTimeout(deferral);
      deferral = undefined;
      pending.clear();
      chars = 0;
      settle();
    },
    get pending() {
      return pending.size;
    },
  };
}
