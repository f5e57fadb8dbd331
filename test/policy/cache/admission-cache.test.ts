import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import { LRUCache } from "lru-cache";
import { createAdmissionCache, createFrequencySketch } from "../../../src/policy/cache/admission-cache.ts";

interface Value {
  readonly key: string;
  readonly own: number;
  readonly parts: readonly string[];
}

const PART_BYTES = 50;
const weigh = (value: Value) => ({
  ownBytes: value.own,
  shared: value.parts.map((key) => ({ key, bytes: PART_BYTES })),
});

const operation = fc.oneof(
  fc.record({
    kind: fc.constant("set" as const),
    key: fc.integer({ min: 0, max: 30 }),
    own: fc.integer({ min: 1, max: 120 }),
    parts: fc.uniqueArray(fc.constantFrom("a", "b", "c", "d"), { maxLength: 3 }),
  }),
  fc.record({ kind: fc.constant("get" as const), key: fc.integer({ min: 0, max: 30 }) }),
  fc.record({ kind: fc.constant("delete" as const), key: fc.integer({ min: 0, max: 30 }) }),
);

describe("admission cache (W-TinyLFU)", () => {
  test("property: the bounds hold, bytes count own bytes plus each shared part once, and a key only ever answers its own value", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 12 }),
        fc.integer({ min: 120, max: 800 }),
        fc.array(operation, { maxLength: 200 }),
        (maxEntries, maxBytes, operations) => {
          const cache = createAdmissionCache<number, Value>({ maxEntries, maxBytes, weigh });
          const present = new Map<number, Value>();
          for (const op of operations) {
            if (op.kind === "set") {
              const value = { key: `k${op.key}`, own: op.own, parts: op.parts };
              cache.set(op.key, value);
            } else if (op.kind === "get") {
              const value = cache.get(op.key);
              if (value !== undefined) assert.equal(value.key, `k${op.key}`);
            } else {
              cache.delete(op.key);
              assert.equal(cache.quiet(op.key), undefined);
            }
            // The model: what the cache holds now.
            present.clear();
            for (let key = 0; key <= 30; key++) {
              const value = cache.quiet(key);
              if (value !== undefined) present.set(key, value);
            }
            assert.equal(cache.size, present.size);
            assert.ok(cache.size <= maxEntries);
            assert.ok(cache.bytes <= maxBytes);
            const parts = new Set([...present.values()].flatMap((value) => value.parts));
            const own = [...present.values()].reduce((sum, value) => sum + value.own, 0);
            assert.equal(cache.bytes, own + PART_BYTES * parts.size);
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  test("property: the last value set for a key is the one kept, and one heavier than the bound is not kept", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 500 }), fc.integer({ min: 1, max: 1000 }), (own, maxBytes) => {
        const cache = createAdmissionCache<string, Value>({ maxEntries: 4, maxBytes, weigh });
        cache.set("x", { key: "x", own: 1, parts: [] });
        const kept = cache.set("x", { key: "x", own, parts: [] });
        assert.equal(kept, own <= maxBytes);
        assert.equal(cache.quiet("x")?.own, own <= maxBytes ? own : undefined);
      }),
    );
  });

  test("a working set larger than the cache keeps a hit rate (an LRU's collapses to zero)", () => {
    const capacity = 1000;
    const keys = 1500;
    const cache = createAdmissionCache<number, Value>({
      maxEntries: capacity,
      maxBytes: Number.MAX_SAFE_INTEGER,
      weigh,
    });
    const lru = new LRUCache<number, Value>({ max: capacity });
    let hits = 0;
    let lruHits = 0;
    let lookups = 0;
    for (let pass = 0; pass < 20; pass++) {
      for (let key = 0; key < keys; key++) {
        const value = { key: `k${key}`, own: 1, parts: [] };
        if (pass >= 10) lookups++;
        if (cache.get(key) !== undefined) {
          if (pass >= 10) hits++;
        } else cache.set(key, value);
        if (lru.get(key) !== undefined) {
          if (pass >= 10) lruHits++;
        } else lru.set(key, value);
      }
    }
    assert.equal(lruHits, 0);
    // Ideal for a round-robin over 1.5× the capacity is 2/3: most of the capacity stays useful.
    assert.ok(hits / lookups > 0.5, `hit rate ${hits / lookups}`);
  });

  test("a flood of keys used once does not push out the keys in use", () => {
    const cache = createAdmissionCache<string, Value>({ maxEntries: 100, maxBytes: 1e9, weigh });
    const hot = Array.from({ length: 50 }, (_, i) => `hot-${i}`);
    const use = (key: string): boolean => {
      if (cache.get(key) !== undefined) return true;
      cache.set(key, { key, own: 1, parts: [] });
      return false;
    };
    let hotHits = 0;
    for (let round = 0; round < 100; round++) {
      for (const key of hot) if (use(key) && round >= 10) hotHits++;
      // Between two uses of each key in use, 200 keys never seen again (twice the capacity).
      for (let i = 0; i < 200; i++) use(`flood-${round}-${i}`);
    }
    assert.ok(
      hotHits / (90 * hot.length) > 0.9,
      `hit rate of the keys in use ${hotHits / (90 * hot.length)}`,
    );
  });

  test("frequency sketch: estimates never undercount up to the counter's ceiling", () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 200 }), { maxLength: 400 }), (keys) => {
        const sketch = createFrequencySketch<number>(1000);
        const counts = new Map<number, number>();
        for (const key of keys) {
          sketch.increment(key);
          counts.set(key, (counts.get(key) ?? 0) + 1);
        }
        for (const [key, count] of counts) assert.ok(sketch.estimate(key) >= Math.min(count, 15));
      }),
    );
  });

  test("options are validated", () => {
    assert.throws(() => createAdmissionCache({ maxEntries: 0, maxBytes: 1, weigh }), TypeError);
    assert.throws(() => createAdmissionCache({ maxEntries: 1, maxBytes: 1.5, weigh }), TypeError);
  });
});
