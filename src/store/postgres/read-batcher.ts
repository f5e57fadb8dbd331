/**
 * Document reads grouped into few queries. A read made while `maxInFlight` queries are already
 * out waits for one of them to return, then goes with every read that waited meanwhile in one
 * query (at most `maxBatch` keys): under load a replica sends one query per group instead of one
 * per read, and holds fewer pooled connections. An idle store sends each read at once.
 *
 * A read only ever joins a query that has not been sent yet, so what it returns was read after
 * the read was asked for: a write committed before the call (a revocation) is always seen.
 */
export interface ReadBatcherOptions<V> {
  readonly maxInFlight: number;
  readonly maxBatch: number;
  /** The values of the keys that exist, by key; one query. */
  readonly fetch: (keys: readonly string[]) => Promise<ReadonlyMap<string, V>>;
}

interface Waiter<V> {
  readonly resolve: (value: V | undefined) => void;
  readonly reject: (error: unknown) => void;
}

export class ReadBatcher<V> {
  readonly #options: ReadBatcherOptions<V>;
  /** Keys not sent yet, each with everyone waiting for it. */
  #pending = new Map<string, Waiter<V>[]>();
  #inFlight = 0;

  constructor(options: ReadBatcherOptions<V>) {
    this.#options = options;
  }

  get(key: string): Promise<V | undefined> {
    return new Promise((resolve, reject) => {
      const waiters = this.#pending.get(key);
      if (waiters === undefined) this.#pending.set(key, [{ resolve, reject }]);
      else waiters.push({ resolve, reject });
      this.#pump();
    });
  }

  #pump(): void {
    while (this.#inFlight < this.#options.maxInFlight && this.#pending.size > 0) {
      const group = [...this.#pending].slice(0, this.#options.maxBatch);
      for (const [key] of group) this.#pending.delete(key);
      this.#inFlight++;
      this.#options
        .fetch(group.map(([key]) => key))
        .then(
          (values) => {
            for (const [key, waiters] of group) for (const waiter of waiters) waiter.resolve(values.get(key));
          },
          (error: unknown) => {
            for (const [, waiters] of group) for (const waiter of waiters) waiter.reject(error);
          },
        )
        .finally(() => {
          this.#inFlight--;
          this.#pump();
        });
    }
  }
}
