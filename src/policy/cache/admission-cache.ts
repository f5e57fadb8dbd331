/**
 * A bounded cache with W-TinyLFU admission (Einziger, Friedman, Manes: "TinyLFU: A Highly
 * Efficient Cache Admission Policy", 2017; the policy of Caffeine): a small LRU window takes
 * every new entry; what leaves the window enters the main LRU only when its estimated access
 * frequency beats that of the main region's least recent entry. A plain LRU whose working
 * set exceeds it (round-robin over more keys than it holds) evicts every entry just before
 * its next use — a hit rate of zero; here the main region keeps the keys it had and the rest
 * pass through the window, so the hit rate degrades with the excess instead of collapsing.
 *
 * Frequencies are estimated by a count-min sketch of 4-bit counters (4 rows) behind a
 * doorkeeper (a Bloom filter that absorbs keys seen once), halved every `10 × maxEntries`
 * accesses so that old popularity fades. Hashes are seeded per process: key names (subject
 * ids) cannot be chosen to collide.
 *
 * Weights: each value weighs its own bytes plus shared parts (named by a key) that are
 * counted once however many entries hold them — so the byte bound counts what the entries
 * really hold when several share a part. No written-by-hand cache library here has this; the
 * npm registry's TinyLFU caches are unmaintained or lack weights (decision 2621).
 */
import { randomInt } from "node:crypto";
import { positiveIntegerOption } from "../../core/positive-integer.ts";

export interface Weight {
  /** Bytes only this value holds. */
  readonly ownBytes: number;
  /** Parts shared with other values, by key; each counts once while any held value uses it. */
  readonly shared: ReadonlyArray<{ readonly key: string; readonly bytes: number }>;
}

export interface AdmissionCacheOptions<V> {
  readonly maxEntries: number;
  readonly maxBytes: number;
  readonly weigh: (value: V) => Weight;
}

export interface AdmissionCache<K, V> {
  /** The value, recorded as an access (frequency and recency); a miss is recorded too. */
  get(key: K): V | undefined;
  /** The value without recording an access. */
  quiet(key: K): V | undefined;
  /** Stores the value; false when it alone exceeds the byte bound (then nothing is kept for the key). */
  set(key: K, value: V): boolean;
  delete(key: K): void;
  clear(): void;
  readonly size: number;
  /** Bytes counted against `maxBytes`: own bytes of every entry plus each shared part once. */
  readonly bytes: number;
}

interface Slot<V> {
  value: V;
  weight: Weight;
  inWindow: boolean;
}

/** Frequency estimates: count-min sketch (4 rows of 4-bit counters, one byte each) behind a doorkeeper. */
export interface FrequencySketch<K> {
  increment(key: K): void;
  estimate(key: K): number;
}

const ROWS = 4;
const MAX_COUNT = 15;

function nextPowerOfTwo(n: number): number {
  let power = 1;
  while (power < n) power *= 2;
  return power;
}

/** FNV-1a over the key's UTF-16 code units, from a per-process seed, then a final mix. */
function hash32(text: string, seed: number): number {
  let h = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b) >>> 0;
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35) >>> 0;
  return (h ^ (h >>> 16)) >>> 0;
}

export function createFrequencySketch<K>(
  expectedKeys: number,
  seed = randomInt(2 ** 31),
): FrequencySketch<K> {
  const width = nextPowerOfTwo(Math.max(16, expectedKeys));
  const counters = new Uint8Array(ROWS * width);
  const doorkeeper = new Uint8Array(width);
  const resetAfter = 10 * Math.max(1, expectedKeys);
  let additions = 0;
  const mask = width - 1;
  const indexes = (key: K): [number, number] => {
    const text = String(key);
    return [hash32(text, seed), hash32(text, seed ^ 0x5bd1e995) | 1];
  };
  const reset = (): void => {
    for (let i = 0; i < counters.length; i++) counters[i] = (counters[i] ?? 0) >> 1;
    doorkeeper.fill(0);
    additions = 0;
  };
  const seen = (h1: number, h2: number): boolean =>
    doorkeeper[h1 & mask] === 1 && doorkeeper[(h1 + h2) & mask] === 1;
  return {
    increment(key) {
      const [h1, h2] = indexes(key);
      if (!seen(h1, h2)) {
        // First sighting (since the last reset) only marks the doorkeeper.
        doorkeeper[h1 & mask] = 1;
        doorkeeper[(h1 + h2) & mask] = 1;
      } else {
        for (let row = 0; row < ROWS; row++) {
          const at = row * width + ((h1 + row * h2) & mask);
          const count = counters[at] ?? 0;
          if (count < MAX_COUNT) counters[at] = count + 1;
        }
      }
      if (++additions >= resetAfter) reset();
    },
    estimate(key) {
      const [h1, h2] = indexes(key);
      let min = MAX_COUNT;
      for (let row = 0; row < ROWS; row++)
        min = Math.min(min, counters[row * width + ((h1 + row * h2) & mask)] ?? 0);
      return min + (seen(h1, h2) ? 1 : 0);
    },
  };
}

export function createAdmissionCache<K, V>(options: AdmissionCacheOptions<V>): AdmissionCache<K, V> {
  const maxEntries = positiveIntegerOption(options.maxEntries, undefined, "maxEntries");
  const maxBytes = positiveIntegerOption(options.maxBytes, undefined, "maxBytes");
  const windowMax = Math.max(1, Math.floor(maxEntries / 100));
  const sketch = createFrequencySketch<K>(maxEntries);
  // Map order is recency: first = least recent. Both regions are LRU lists.
  const window = new Map<K, Slot<V>>();
  const main = new Map<K, Slot<V>>();
  const partHolders = new Map<string, number>();
  let bytes = 0;

  const account = (weight: Weight, sign: 1 | -1): void => {
    bytes += sign * weight.ownBytes;
    for (const part of weight.shared) {
      const holders = (partHolders.get(part.key) ?? 0) + sign;
      if (holders === 0) partHolders.delete(part.key);
      else partHolders.set(part.key, holders);
      if ((sign === 1 && holders === 1) || (sign === -1 && holders === 0)) bytes += sign * part.bytes;
    }
  };
  const slotOf = (key: K): Slot<V> | undefined => window.get(key) ?? main.get(key);
  const remove = (key: K): void => {
    const slot = slotOf(key);
    if (slot === undefined) return;
    (slot.inWindow ? window : main).delete(key);
    account(slot.weight, -1);
  };
  const overBound = (): boolean => window.size + main.size > maxEntries || bytes > maxBytes;
  const oldest = (map: Map<K, Slot<V>>): K | undefined => map.keys().next().value;

  /** Window overflow moves to main; while over a bound, main's LRU victim and the newcomer compete. */
  const evict = (): void => {
    const candidates: K[] = [];
    while (window.size > windowMax) {
      const key = oldest(window) as K;
      const slot = window.get(key) as Slot<V>;
      window.delete(key);
      slot.inWindow = false;
      main.set(key, slot);
      candidates.push(key);
    }
    while (overBound()) {
      const candidate = candidates.at(-1);
      const victim = oldest(main);
      if (victim === undefined) {
        // Nothing left in main: the window's own least recent entries go.
        remove(oldest(window) as K);
        continue;
      }
      if (candidate === undefined || candidate === victim) {
        if (candidate === victim) candidates.pop();
        remove(victim);
        continue;
      }
      // TinyLFU: the newcomer is admitted only if it is used more often than the victim.
      if (sketch.estimate(candidate) > sketch.estimate(victim)) {
        remove(victim);
      } else {
        candidates.pop();
        remove(candidate);
      }
    }
  };

  return {
    get(key) {
      sketch.increment(key);
      const slot = slotOf(key);
      if (slot === undefined) return undefined;
      const region = slot.inWindow ? window : main;
      region.delete(key);
      region.set(key, slot);
      return slot.value;
    },
    quiet(key) {
      return slotOf(key)?.value;
    },
    set(key, value) {
      const weight = options.weigh(value);
      // A value heavier than the whole bound (its shared parts included) is not kept.
      const total = weight.ownBytes + weight.shared.reduce((sum, part) => sum + part.bytes, 0);
      if (total > maxBytes) {
        remove(key);
        return false;
      }
      account(weight, 1);
      const slot = slotOf(key);
      if (slot === undefined) {
        window.set(key, { value, weight, inWindow: true });
      } else {
        // A replaced value keeps its region; it becomes that region's most recent.
        account(slot.weight, -1);
        const region = slot.inWindow ? window : main;
        region.delete(key);
        region.set(key, { value, weight, inWindow: slot.inWindow });
      }
      evict();
      return slotOf(key) !== undefined;
    },
    delete(key) {
      remove(key);
    },
    clear() {
      window.clear();
      main.clear();
      partHolders.clear();
      bytes = 0;
    },
    get size() {
      return window.size + main.size;
    },
    get bytes() {
      return bytes;
    },
  };
}
