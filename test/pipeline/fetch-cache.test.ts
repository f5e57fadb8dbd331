import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createFetchCache } from "../../src/pipeline/fetch-cache.ts";

/** A loader whose answers the test releases by hand, counting the loads it was asked for. */
function manualLoader<V>() {
  const waiting: Array<{
    key: string;
    resolve: (v: { value: V; ttlMs: number }) => void;
    reject: (e: Error) => void;
  }> = [];
  return {
    waiting,
    load: (key: string) =>
      new Promise<{ value: V; ttlMs: number }>((resolve, reject) => waiting.push({ key, resolve, reject })),
  };
}

const tick = () => new Promise((resolve) => setImmediate(resolve));

describe("sidecar fetch cache (single flight on lru-cache fetch)", () => {
  test("concurrent misses share one load; later gets are hits until the TTL passes", async () => {
    let now = 1_000;
    const loader = manualLoader<string>();
    const cache = createFetchCache({ load: loader.load, now: () => now });
    const gets = Array.from({ length: 10 }, () => cache.get("k"));
    await tick();
    assert.equal(loader.waiting.length, 1);
    loader.waiting[0]?.resolve({ value: "v1", ttlMs: 500 });
    const results = await Promise.all(gets);
    assert.ok(results.every((r) => r.value === "v1" && !r.hit));
    assert.deepEqual(await cache.get("k"), { value: "v1", hit: true });
    assert.deepEqual(cache.peek("k"), { value: "v1", until: 1_500 });
    now += 500;
    assert.equal(cache.peek("k"), undefined);
    const again = cache.get("k");
    await tick();
    assert.equal(loader.waiting.length, 2);
    loader.waiting[1]?.resolve({ value: "v2", ttlMs: 500 });
    assert.deepEqual(await again, { value: "v2", hit: false });
  });

  test("a failed load is not cached: every waiting caller sees the error, the next get loads again", async () => {
    const loader = manualLoader<string>();
    const cache = createFetchCache({ load: loader.load });
    const gets = [cache.get("k"), cache.get("k")];
    await tick();
    const failure = new Error("upstream down");
    loader.waiting[0]?.reject(failure);
    for (const get of gets) await assert.rejects(get, (error) => error === failure);
    const next = cache.get("k");
    await tick();
    assert.equal(loader.waiting.length, 2);
    loader.waiting[1]?.resolve({ value: "ok", ttlMs: 1000 });
    assert.deepEqual(await next, { value: "ok", hit: false });
  });

  test("a value loaded with ttlMs 0 is answered but never served from the cache", async () => {
    let loads = 0;
    const cache = createFetchCache({
      load: async () => {
        loads++;
        return { value: loads, ttlMs: 0 };
      },
    });
    assert.deepEqual(await cache.get("k"), { value: 1, hit: false });
    assert.equal(cache.peek("k"), undefined);
    assert.deepEqual(await cache.get("k"), { value: 2, hit: false });
  });

  test("clear() or eviction while a load runs still answers the callers waiting on it", async () => {
    const loader = manualLoader<string>();
    const cache = createFetchCache({ load: loader.load, maxEntries: 1 });
    const first = cache.get("a");
    await tick();
    cache.clear();
    const other = cache.get("b");
    await tick();
    loader.waiting[0]?.resolve({ value: "A", ttlMs: 1000 });
    loader.waiting[1]?.resolve({ value: "B", ttlMs: 1000 });
    assert.deepEqual(await first, { value: "A", hit: false });
    assert.deepEqual(await other, { value: "B", hit: false });
    assert.deepEqual(await cache.get("b"), { value: "B", hit: true });
  });
});
