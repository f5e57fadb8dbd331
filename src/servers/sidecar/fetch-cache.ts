import { LRUCache } from "lru-cache";
import { SidecarConfigError } from "./errors.ts";

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
  if (typeof options?.load !== "function") throw new SidecarConfigError("load is required");
  const max = options.maxEntries ?? 1000;
  if (!Number.isSafeInteger(max) || max < 1)
    throw new SidecarConfigError("maxEntries must be a positive integer");
  const now = options.now ?? Date.now;
  const entries = new LRUCache<string, { value: V; until: number }>({ max });
  const inFlight = new Map<string, Promise<V>>();

  return {
    async get(key) {
      const entry = entries.get(key);
      if (entry !== undefined && now() < entry.until) return { value: entry.value, hit: true };
      let pending = inFlight.get(key);
      if (pending === undefined) {
        pending = options
          .load(key)
          .then((loaded) => {
            if (loaded.ttlMs > 0) entries.set(key, { value: loaded.value, until: now() + loaded.ttlMs });
            return loaded.value;
          })
          .finally(() => inFlight.delete(key));
        inFlight.set(key, pending);
      }
      return { value: await pending, hit: false };
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
