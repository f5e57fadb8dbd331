/**
 * The signer-key cache (signer-key-cache.ts) under attack: signer names and key ids come from
 * a document whose signature is not checked yet, so they are attacker-chosen. Whatever they
 * are, one lookup costs at most one fetch, concurrent lookups share it, the cache holds at most
 * `maxOwners` owners, names like `__proto__` are ordinary names, and a ring for another owner
 * never answers for this one.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { KeyRing, PublicKeyRing } from "../../src/crypto/index.ts";
import { createSignerKeyCache } from "../../src/crypto/signer-key-cache.ts";

function ringsOf(...owners: string[]): Map<string, PublicKeyRing> {
  return new Map(
    owners.map((owner) => [owner, PublicKeyRing.import(KeyRing.generate({ owner }).exportPublic())]),
  );
}

function counting(rings: Map<string, PublicKeyRing>, delayMs = 0) {
  const fetched: string[] = [];
  return {
    fetched,
    fetchRing: async (owner: string) => {
      fetched.push(owner);
      if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
      return rings.get(owner);
    },
  };
}

describe("signer-key cache", () => {
  it("without a cooldown (the authority's), each forged key id costs one fetch, never more", async () => {
    const rings = ringsOf("service:a");
    const source = counting(rings);
    const cache = createSignerKeyCache({ fetchRing: source.fetchRing, refetchCooldownMs: 0 });
    const real = rings.get("service:a")?.current.keyId ?? "";
    assert.ok(await cache.keyFor("service:a", real));
    assert.equal(source.fetched.length, 1);
    for (let i = 0; i < 25; i++) assert.equal(await cache.keyFor("service:a", `k-forged-${i}`), undefined);
    assert.equal(source.fetched.length, 26);
    // The real key is answered from the (refetched) ring without another fetch.
    assert.ok(await cache.keyFor("service:a", real));
    assert.equal(source.fetched.length, 26);
  });

  it("concurrent lookups of one owner share one fetch", async () => {
    const rings = ringsOf("service:a");
    const source = counting(rings, 30);
    const cache = createSignerKeyCache({ fetchRing: source.fetchRing, refetchCooldownMs: 0 });
    const answers = await Promise.all(
      Array.from({ length: 50 }, (_, i) => cache.keyFor("service:a", `k-forged-${i}`)),
    );
    assert.ok(answers.every((answer) => answer === undefined));
    assert.equal(source.fetched.length, 1);
  });

  it("holds at most maxOwners owners: forged signer names cannot grow it", async () => {
    const source = counting(new Map());
    const cache = createSignerKeyCache({ fetchRing: source.fetchRing, maxOwners: 3 });
    for (let i = 0; i < 10; i++) await cache.keyFor(`ghost-${i}`, "k1");
    assert.equal(source.fetched.length, 10);
    // ghost-9 is still cached (its refetch is now on cooldown); ghost-0 was evicted and is fetched again.
    await cache.keyFor("ghost-9", "k1");
    await cache.keyFor("ghost-9", "k2");
    assert.equal(source.fetched.length, 11, "a cached unknown owner refetches once, then cools down");
    await cache.keyFor("ghost-0", "k1");
    assert.equal(source.fetched.length, 12, "an evicted owner is fetched again");
  });

  it("treats __proto__, constructor and other odd names as plain owner names", async () => {
    const rings = ringsOf(
      "__proto__",
      "constructor",
      "toString",
      "hasOwnProperty",
      "sérvice",
      "a".repeat(256),
    );
    const source = counting(rings);
    const pinnedRing = PublicKeyRing.import(KeyRing.generate({ owner: "valueOf" }).exportPublic());
    const cache = createSignerKeyCache({ fetchRing: source.fetchRing, pinned: [pinnedRing] });
    for (const [owner, ring] of rings) {
      assert.equal(await cache.keyFor(owner, ring.current.keyId), ring.current.sigPublicKey);
      // Another owner's key id never answers for this one.
      assert.equal(await cache.keyFor(owner, pinnedRing.current.keyId), undefined);
    }
    assert.equal(await cache.keyFor("valueOf", pinnedRing.current.keyId), pinnedRing.current.sigPublicKey);
    assert.equal(await cache.keyFor("__proto__", "__proto__"), undefined);
    assert.equal(Object.getPrototypeOf({}), Object.prototype);
  });

  it("a ring for another owner is not this owner's, even with the same key id", async () => {
    const real = KeyRing.generate({ owner: "service:a" });
    const impostor = PublicKeyRing.import(
      KeyRing.generate({ owner: "service:b", keyId: real.current.keyId }).exportPublic(),
    );
    const cache = createSignerKeyCache({ fetchRing: async () => impostor, refetchCooldownMs: 0 });
    assert.equal(await cache.keyFor("service:a", real.current.keyId), undefined);
  });

  it("a fetch failure reaches the caller and is not remembered", async () => {
    const rings = ringsOf("service:a");
    let down = true;
    const cache = createSignerKeyCache({
      refetchCooldownMs: 10_000,
      fetchRing: async (owner) => {
        if (down) throw new Error("unreachable");
        return rings.get(owner);
      },
    });
    const keyId = rings.get("service:a")?.current.keyId ?? "";
    await assert.rejects(cache.keyFor("service:a", keyId), /unreachable/);
    down = false;
    assert.ok(await cache.keyFor("service:a", keyId), "no cooldown after a failed fetch");
  });
});
