/**
 * Policy key rings kept in the store, their private seeds wrapped under the KEK
 * (`wrapKeyRing`), one document per owner in `key_rings`. A new owner's ring is written
 * with `store.create`, so when several replicas (or processes) create it at the same
 * time exactly one ring wins and every creator reads that one back: they all agree on
 * the keys. Unwrapped rings are kept in memory (LRU); the store is read once per owner.
 */
import { LRUCache } from "lru-cache";
import { positiveIntegerOption } from "../core/positive-integer.ts";
import { type Kek, KeyRing, unwrapKeyRing, wrapKeyRing } from "../crypto/index.ts";
import type { Store } from "../store/store.ts";
import type { KeyRingSource } from "./local-protector.ts";

export const KEY_RINGS_COLLECTION = "key_rings";

export interface StoredKeyRingsOptions {
  readonly store: Store;
  readonly kek: Kek;
  /** Default `key_rings`. */
  readonly collection?: string;
  /** Unwrapped rings kept in memory (default 10000). */
  readonly cacheMax?: number;
}

export class KeyRingStoreError extends Error {
  readonly code = "key_ring_unavailable";

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "KeyRingStoreError";
  }
}

export function createStoredKeyRings(options: StoredKeyRingsOptions): KeyRingSource {
  if (options?.store === undefined || options.kek === undefined)
    throw new TypeError("store and kek are required");
  const { store, kek } = options;
  const collection = options.collection ?? KEY_RINGS_COLLECTION;
  const max = positiveIntegerOption(options.cacheMax, 10_000, "cacheMax");

  async function loadOrCreate(owner: string): Promise<KeyRing> {
    const existing = await store.get<unknown>(collection, owner);
    if (existing !== undefined) return unwrapKeyRing(existing, kek);
    const ring = KeyRing.generate({ owner });
    if (await store.create(collection, owner, wrapKeyRing(ring, kek))) return ring;
    // Another creator won the race: use its ring, not ours.
    const winner = await store.get<unknown>(collection, owner);
    if (winner === undefined) throw new KeyRingStoreError("key ring vanished after a concurrent create");
    return unwrapKeyRing(winner, kek);
  }

  // lru-cache's fetch() is the single flight: concurrent first uses of an owner share one
  // load-or-create; a failure (store down, wrong KEK) is not remembered, the next call tries again.
  const rings = new LRUCache<string, KeyRing>({
    max,
    ignoreFetchAbort: true,
    fetchMethod: (owner) => loadOrCreate(owner),
  });

  return {
    async keyRing(owner: string): Promise<KeyRing> {
      const ring = rings.get(owner) ?? (await rings.fetch(owner));
      // Unreachable (loadOrCreate returns a ring or throws); the type of fetch() allows undefined.
      if (ring === undefined) throw new KeyRingStoreError("no key ring loaded");
      return ring;
    },
  };
}
