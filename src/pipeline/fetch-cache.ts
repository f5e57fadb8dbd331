import { LRUCache } from "lru-cache";
import { growingBound } from "../core/growing-bound.ts";
import { positiveIntegerOption } from "../core/positive-integer.ts";

/**
 * A small read-through cache for what the sidecar fetches from the authority service
 * (catalogs, auth material): values live for the TTL their loader returns, concurrent
 * misses share one fetch, failures are not cached (the next request asks again).
 */

export interface Loaded<V> {
  readonly value: V;
  readonly ttlMs: number;
}

export interface FetchCacheOptions<V> {
  /** Shared by concurrent callers, so it gets no caller's signal: bound it with its own timeout. */
  readonly load: (key: string) => Promise<Loaded<V>>;
  readonly maxEntries?: number;
  readonly now?: () => number;
}

export interface FetchCache<V> {
  get(key: string): Promise<{ readonly value: V; readonly hit: boolean }>;
  /** The cached, unexpired value without waiting; undefined on a miss (then call `get`). */
  peek(key: string): { readonly value: V } | undefined;
  delete(key: string): void;
  clear(): void;
}

export function createFetchCache<V>(options: FetchCacheOptions<V>): FetchCache<V> {
  if (typeof options?.load !== "function") throw new TypeError("load is required");
  const max = positiveIntegerOption(options.maxEntries, 1000, "maxEntries");
  const now = options.now ?? Date.now;
  // lru-cache's fetch() is the single flight: concurrent misses share one load; a failed
  // load is not kept. A value loaded with ttlMs ≤ 0 is handed out, never served again.
  const entries = new LRUCache<string, { value: V; until: number }>({
    ...growingBound(max),
    ignoreFetchAbort: true,
    fetchMethod: async (key) => {
      const loaded = await options.load(key);
      return { value: loaded.value, until: loaded.ttlMs > 0 ? now() + loaded.ttlMs : 0 };
    },
  });

  return {
    async get(key) {
      const entry = entries.get(key);
      if (entry !== undefined && now() < entry.until) return { value: entry.value, hit: true };
      // forceRefresh: the entry is due by `now` (the cache keeps no TTL of its own).
      const loaded = await entries.fetch(key, { forceRefresh: true });
      // Unreachable (load returns a value or throws); the type of fetch() allows undefined.
      if (loaded === undefined) throw new TypeError("load produced no value");
      return { value: loaded.value, hit: false };
    },
    peek(key) {
      const entry = entries.get(key);
      return entry !== undefined && now() < entry.until ? entry : undefined;
    },
    delete(key) {
      entries.delete(key);
    },
    clear() {
      entries.clear();
    },
  };
}
