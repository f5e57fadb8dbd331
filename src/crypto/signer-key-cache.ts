/**
 * Signers' public keys for a holder of public keys only (a sidecar, or the authority opening
 * with unwrapped content keys): pinned by configuration, or fetched per owner on first use.
 * A key id the cached ring lacks — a rotation, or a forgery naming any id — fetches the ring
 * again at most once per owner per cooldown, so a rotated key is picked up without a restart
 * and forged ids cannot make the holder hammer the key source. For a pinned owner only the
 * pinned keys count.
 */
import type { KeyObject } from "node:crypto";
import { LRUCache } from "lru-cache";
import { growingBound } from "../core/growing-bound.ts";
import type { PublicKeyRing } from "./key-ring.ts";

export interface SignerKeyCacheOptions {
  /**
   * The owner's ring from the key source; undefined when the owner is unknown. `previous` is
   * the ring cached before (a refetch may hand it back when nothing changed). What it throws
   * reaches the caller of `keyFor` unchanged.
   */
  readonly fetchRing: (
    owner: string,
    previous: PublicKeyRing | undefined,
  ) => Promise<PublicKeyRing | undefined>;
  /** Keys trusted by configuration; for these owners nothing is fetched. */
  readonly pinned?: readonly PublicKeyRing[];
  /** Least time between two refetches of one owner's keys (default 10000 ms). */
  readonly refetchCooldownMs?: number;
  /** Owners whose keys are kept (default 10000). */
  readonly maxOwners?: number;
  readonly now?: () => number;
}

export interface SignerKeyCache {
  /** The verification key of (owner, keyId), or undefined when the owner has no such key. */
  keyFor(owner: string, keyId: string): Promise<KeyObject | undefined>;
  /**
   * Starts fetching the owner's ring unless it is pinned, cached or on its way, without
   * waiting: a later `keyFor` joins the fetch. A failure is not reported here (nor kept): the
   * `keyFor` that needs the ring fetches again and reports it.
   */
  prefetch(owner: string): void;
}

export function createSignerKeyCache(options: SignerKeyCacheOptions): SignerKeyCache {
  const now = options.now ?? Date.now;
  const cooldownMs = options.refetchCooldownMs ?? 10_000;
  const pinned = new Map((options.pinned ?? []).map((ring) => [ring.owner, ring]));
  /** Per owner: the last ring fetched, and when a key id it lacked last made us fetch again. */
  const fetched = new LRUCache<string, { ring: PublicKeyRing | undefined; refetchedAt: number | undefined }>(
    growingBound(options.maxOwners ?? 10_000),
  );
  // Hand-written single flight, not lru-cache fetch(): the cached ring is kept even past a refetch
  // cooldown and the flight records whether it was a forced refetch (decision 1801).
  const inFlight = new Map<string, Promise<PublicKeyRing | undefined>>();

  const fetchRing = (owner: string, refetch: boolean): Promise<PublicKeyRing | undefined> => {
    let pending = inFlight.get(owner);
    if (pending === undefined) {
      pending = (async () => {
        let ring = await options.fetchRing(owner, fetched.get(owner)?.ring);
        // A ring of another owner is not this owner's.
        if (ring !== undefined && ring.owner !== owner) ring = undefined;
        fetched.set(owner, { ring, refetchedAt: refetch ? now() : undefined });
        return ring;
      })().finally(() => inFlight.delete(owner));
      inFlight.set(owner, pending);
    }
    return pending;
  };

  return {
    async keyFor(owner, keyId) {
      const pin = pinned.get(owner);
      if (pin !== undefined) return pin.signerKeys(owner, keyId);
      const cached = fetched.get(owner);
      const known = cached?.ring?.signerKeys(owner, keyId);
      if (known !== undefined) return known;
      const refetchedAt = cached?.refetchedAt;
      if (refetchedAt !== undefined && now() - refetchedAt < cooldownMs) return undefined;
      return (await fetchRing(owner, cached !== undefined))?.signerKeys(owner, keyId);
    },
    prefetch(owner) {
      if (pinned.has(owner) || fetched.has(owner) || inFlight.has(owner)) return;
      fetchRing(owner, false).catch(() => undefined);
    },
  };
}
