import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { Redis } from "ioredis";
import { decodeSignedBlob, PayloadPrefix } from "../../../src/crypto/index.ts";
import {
  type CacheLayer,
  createPolicyChangePublisher,
  createRedisPolicyStore,
  createVerifiedPolicyCache,
  deriveCacheKeys,
  type FreshnessLease,
  openEntry,
  type PolicyChangePublisher,
  type PolicyRecordFetcher,
  policyEntryKey,
  policyEntryName,
  policyHeadKey,
  type RedisPolicyStore,
  sealEntry,
  type VerifiedPolicyCacheOptions,
} from "../../../src/policy/cache/index.ts";
import type { PolicyChange } from "../../../src/policy/change-log.ts";
import { createLocalPolicyProtector } from "../../../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../../../src/policy/process-key-rings.ts";
import type { PolicyOpener } from "../../../src/policy/protector.ts";
import type { PolicyRecord } from "../../../src/policy/record.ts";
import { createSignedPolicyVerifier } from "../../../src/policy/signed-policy.ts";
import { entry } from "../../core/fixtures.ts";
import { POLICY_CACHE_SETTINGS } from "../../helpers/policy-cache-settings.ts";
import { type RedisServerHandle, startRedisServer } from "../../helpers/redis-server.ts";
import { protectedRecord, recordSource, sidecarOpener } from "./helpers.ts";

function clock(start = Date.now()) {
  const state = { at: start };
  return {
    now: () => state.at,
    advance(ms: number) {
      state.at += ms;
    },
  };
}

const keys = deriveCacheKeys(new Uint8Array(randomBytes(32)));

describe("verified-policy cache without Redis", () => {
  const protector = createLocalPolicyProtector({ keyRings: createProcessKeyRings(), serviceIdentity: "t" });

  test("authority, then local within the TTL, then a conditional revalidation", async () => {
    const source = recordSource(protector);
    source.records.set("s1", await protectedRecord(protector, "s1", 1));
    const time = clock();
    const cache = createVerifiedPolicyCache({
      ...POLICY_CACHE_SETTINGS,
      source,
      opener: sidecarOpener(protector),
      ttlWithoutRedisMs: 1000,
      now: time.now,
    });
    const first = await cache.get("s1");
    assert.equal(first.layer, "authority");
    assert.equal(first.policy.load.ok, true);
    assert.equal(first.policy.partnerId, "partner-1");
    assert.equal((await cache.get("s1")).layer, "local");
    time.advance(1001);
    const revalidated = await cache.get("s1");
    assert.equal(revalidated.layer, "authority");
    assert.deepEqual(source.calls.at(-1), { subjectId: "s1", knownHead: 1 });
    assert.equal(revalidated.policy.load.ok, true);
    assert.equal(source.calls.length, 2);
  });

  test("a held section spares the payload's SHA-512 of the next subject's policy; a payload changed inside it is refused", async () => {
    const source = recordSource(protector);
    for (const subjectId of ["h1", "h2", "h3"])
      source.records.set(subjectId, await protectedRecord(protector, subjectId, 1));
    /**
     * The held prefixes the cache offered the verifier; h3's payload with one byte of its section
     * changed, well before the section's last 64 bytes (its look-up key is the held one's).
     */
    const offered: Array<PayloadPrefix | undefined> = [];
    const asBytes: PolicyRecordFetcher = {
      async fetchPolicy(subjectId, options) {
        const result = await source.fetchPolicy(subjectId, options);
        if (result.status !== "found" || typeof result.signedPolicy !== "string") return result;
        const blob = Buffer.from(result.signedPolicy, "base64");
        const payloadAt = decodeSignedBlob(blob).payload.byteOffset - blob.byteOffset;
        if (subjectId !== "h3") return { ...result, signedPolicy: new Uint8Array(blob) };
        // Another auth profile, as valid as the signed one.
        blob.write("billing-oautx", blob.indexOf("billing-oauth", payloadAt));
        // An answer whose record binds the changed text: only the signature can refuse it.
        const documentHash =
          `sha256:${createHash("sha256").update(blob.subarray(payloadAt)).digest("hex")}` as const;
        return {
          ...result,
          record: { ...result.record, document_hash: documentHash },
          signedPolicy: new Uint8Array(blob),
        };
      },
    };
    const verifier = sidecarOpener(protector);
    const cache = createVerifiedPolicyCache({
      ...POLICY_CACHE_SETTINGS,
      source: asBytes,
      opener: {
        open: (artifact, context, options) => verifier.open(artifact, context, options),
        openSigned: (blob, context, options) => {
          offered.push(options?.heldPrefix?.(decodeSignedBlob(blob).payload));
          return verifier.openSigned?.(blob, context, options) ?? Promise.reject(new Error("no openSigned"));
        },
      },
    });
    assert.equal((await cache.get("h1")).policy.load.ok, true);
    assert.equal((await cache.get("h2")).policy.load.ok, true);
    assert.deepEqual((await cache.get("h3")).policy.load, {
      ok: false,
      reason: "policy_verification_failed",
    });
    assert.equal(offered[0], undefined, "nothing held before the first policy was verified");
    assert.ok(offered[1] instanceof PayloadPrefix, "h2's payload starts with h1's section");
    assert.equal(offered[2], offered[1], "the changed section is offered the held prefix, and refused");
  });

  test("past the TTL with the authority unreachable, the cached policy is not used (upstream_unavailable)", async () => {
    const source = recordSource(protector);
    source.records.set("s2", await protectedRecord(protector, "s2", 1));
    const time = clock();
    const cache = createVerifiedPolicyCache({
      ...POLICY_CACHE_SETTINGS,
      source,
      opener: sidecarOpener(protector),
      ttlWithoutRedisMs: 1000,
      now: time.now,
    });
    await cache.get("s2");
    source.down = true;
    time.advance(1001);
    await assert.rejects(cache.get("s2"), {
      code: "source_unavailable",
      authorityCode: "upstream_unavailable",
    });
  });

  test("no record → missing_policy; a record that does not verify → policy_verification_failed", async () => {
    const source = recordSource(protector);
    const failures: string[] = [];
    const cache = createVerifiedPolicyCache({
      ...POLICY_CACHE_SETTINGS,
      source,
      opener: sidecarOpener(protector),
      events: { verificationFailure: (l) => failures.push(l) },
    });
    assert.deepEqual((await cache.get("nobody")).policy.load, { ok: false, reason: "missing_policy" });

    const good = await protectedRecord(protector, "s3", 1);
    const other = createLocalPolicyProtector({ keyRings: createProcessKeyRings(), serviceIdentity: "t" });
    source.records.set("s3", { ...good, artifact: (await protectedRecord(other, "s3", 1)).artifact });
    assert.deepEqual((await cache.get("s3")).policy.load, {
      ok: false,
      reason: "policy_verification_failed",
    });
    source.records.set("s4", {
      ...(await protectedRecord(protector, "s4", 1)),
      document_hash: `sha256:${"1".repeat(64)}`,
    });
    assert.deepEqual((await cache.get("s4")).policy.load, {
      ok: false,
      reason: "policy_verification_failed",
    });
    source.records.set("s5", { ...(await protectedRecord(protector, "s5", 1)), subject_id: "someone-else" });
    assert.deepEqual((await cache.get("s5")).policy.load, {
      ok: false,
      reason: "policy_verification_failed",
    });
    assert.deepEqual(failures, ["authority", "authority", "authority"]);
  });

  test("a revocation marker on the record (crypto service down at revoke time) revokes the verified document", async () => {
    const source = recordSource(protector);
    const record = await protectedRecord(protector, "s-marker", 1);
    source.records.set("s-marker", { ...record, revoked_at: "2026-01-02T03:04:05.000Z" });
    const cache = createVerifiedPolicyCache({
      ...POLICY_CACHE_SETTINGS,
      source,
      opener: sidecarOpener(protector),
    });
    const load = (await cache.get("s-marker")).policy.load;
    assert.ok(load.ok);
    assert.equal(load.document.revoked_at, "2026-01-02T03:04:05.000Z");
  });

  test("keys that cannot be reached are a fault (503), not a verdict", async () => {
    const source = recordSource(protector);
    source.records.set("s6", await protectedRecord(protector, "s6", 1));
    const broken: PolicyOpener = { open: () => Promise.reject(new (class extends Error {})("down")) };
    const unavailable = createSignedPolicyVerifier({
      serviceIdentity: "t",
      source: { fetchPolicyKeys: () => Promise.reject(new Error("authority down")) },
    });
    const cache = createVerifiedPolicyCache({ ...POLICY_CACHE_SETTINGS, source, opener: unavailable });
    await assert.rejects(cache.get("s6"), { code: "source_unavailable" });
    const refusing = createVerifiedPolicyCache({ ...POLICY_CACHE_SETTINGS, source, opener: broken });
    assert.deepEqual((await refusing.get("s6")).policy.load, {
      ok: false,
      reason: "policy_verification_failed",
    });
  });
});

describe("verified-policy cache with Redis (real redis-server)", () => {
  let server: RedisServerHandle;
  const stores: RedisPolicyStore[] = [];
  let publisher: PolicyChangePublisher;
  let redis: Redis;
  const protector = createLocalPolicyProtector({ keyRings: createProcessKeyRings(), serviceIdentity: "t" });

  before(async () => {
    server = await startRedisServer();
    publisher = createPolicyChangePublisher({ url: server.url });
    redis = new Redis(server.url);
  });
  after(async () => {
    for (const store of stores) await store.close();
    await publisher.close();
    redis.disconnect();
    await server.stop();
  });

  const sidecarCache = async (
    source: PolicyRecordFetcher,
    extra: Partial<VerifiedPolicyCacheOptions> = {},
  ) => {
    const store = createRedisPolicyStore({ url: server.url });
    stores.push(store);
    await store.waitReady(5000);
    const layers: Array<[CacheLayer, boolean]> = [];
    const cache = createVerifiedPolicyCache({
      ...POLICY_CACHE_SETTINGS,
      source,
      opener: sidecarOpener(protector),
      redis: { store, keys },
      events: { lookup: (layer, hit) => layers.push([layer, hit]) },
      ...extra,
    });
    return { cache, store, layers };
  };

  test("no head yet: the authority answers, the head and a sealed entry are written; a second sidecar reads Redis", async () => {
    const source = recordSource(protector);
    source.records.set("r1", await protectedRecord(protector, "r1", 4));
    const a = await sidecarCache(source);
    const first = await a.cache.get("r1");
    assert.equal(first.layer, "authority");
    // The head is raised before the Check is answered; the sealed entry is written after it.
    assert.equal(await redis.get(policyHeadKey("r1")), "4");
    await a.cache.writtenBack();
    assert.ok((await redis.get(policyEntryKey("r1")))?.startsWith("v1."));
    assert.equal((await a.cache.get("r1")).layer, "local");

    const b = await sidecarCache(source);
    const calls = source.calls.length;
    const second = await b.cache.get("r1");
    assert.equal(second.layer, "redis");
    assert.equal(source.calls.length, calls);
    assert.equal(second.policy.load.ok, true);
    assert.equal(second.policy.head, 4);
  });

  test("a signed policy handed as its blob's bytes is verified as its base64 is; its sealed entry serves a second sidecar", async () => {
    const source = recordSource(protector);
    source.records.set("b1", await protectedRecord(protector, "b1", 2));
    source.records.set("b2", await protectedRecord(protector, "b2", 2));
    /** The client's answer when it decoded the blob from the body's bytes; b2's with one byte flipped. */
    const asBytes: PolicyRecordFetcher = {
      async fetchPolicy(subjectId, options) {
        const result = await source.fetchPolicy(subjectId, options);
        if (result.status !== "found" || typeof result.signedPolicy !== "string") return result;
        const blob = Buffer.from(result.signedPolicy, "base64");
        if (subjectId === "b2") blob.writeUInt8(blob.readUInt8(blob.length - 10) ^ 1, blob.length - 10);
        return { ...result, signedPolicy: new Uint8Array(blob) };
      },
    };
    const a = await sidecarCache(asBytes);
    const first = await a.cache.get("b1");
    assert.equal(first.layer, "authority");
    assert.equal(first.policy.load.ok, true);
    assert.deepEqual((await a.cache.get("b2")).policy.load, {
      ok: false,
      reason: "policy_verification_failed",
    });
    await a.cache.writtenBack();
    const b = await sidecarCache(source);
    const calls = source.calls.length;
    const second = await b.cache.get("b1");
    assert.equal(second.layer, "redis");
    assert.equal(source.calls.length, calls);
    assert.equal(second.policy.load.ok, true);
    // An opener that takes base64 only is handed the blob's base64.
    source.records.set("b3", await protectedRecord(protector, "b3", 2));
    const base64Only = sidecarOpener(protector);
    const c = await sidecarCache(asBytes, {
      opener: { open: (artifact, context, options) => base64Only.open(artifact, context, options) },
    });
    assert.equal((await c.cache.get("b3")).policy.load.ok, true);
  });

  test("a first Check is answered before its sealed entry is written: a stalled Redis write does not hold it", async () => {
    const source = recordSource(protector);
    source.records.set("w1", await protectedRecord(protector, "w1", 2));
    const store = createRedisPolicyStore({ url: server.url, commandTimeoutMs: 60_000 });
    stores.push(store);
    await store.waitReady(5000);
    let release: () => void = () => undefined;
    const stalled = new Promise<void>((resolve) => {
      release = resolve;
    });
    const puts: string[] = [];
    const slowStore: typeof store = Object.create(store, {
      putEntry: {
        value: async (subjectId: string, sealed: string, ttlMs: number) => {
          puts.push(subjectId);
          await stalled;
          return store.putEntry(subjectId, sealed, ttlMs);
        },
      },
    });
    const results: string[] = [];
    const cache = createVerifiedPolicyCache({
      ...POLICY_CACHE_SETTINGS,
      source,
      opener: sidecarOpener(protector),
      redis: { store: slowStore, keys },
      events: { writeBack: (result) => results.push(result) },
    });
    const late = new Promise<never>((_, reject) => {
      setTimeout(() => reject(new Error("the Check waited for the write-back")), 10_000).unref();
    });
    const first = await Promise.race([cache.get("w1"), late]);
    assert.equal(first.layer, "authority");
    assert.equal(first.policy.load.ok, true);
    // The head other sidecars rely on is raised before the answer, as before.
    assert.equal(await redis.get(policyHeadKey("w1")), "2");
    release();
    await cache.writtenBack();
    assert.deepEqual(puts, ["w1"]);
    assert.deepEqual(results, ["written"]);
    assert.ok((await redis.get(policyEntryKey("w1")))?.startsWith("v1."));
    cache.close();
  });

  test("write-backs beyond the queue's bound are dropped and counted, never block a Check", async () => {
    const source = recordSource(protector);
    for (const id of ["d1", "d2", "d3"]) source.records.set(id, await protectedRecord(protector, id, 1));
    const results: string[] = [];
    const { cache } = await sidecarCache(source, {
      // No room for any pending write-back.
      writeBackMaxChars: 1,
      events: { writeBack: (result) => results.push(result) },
    });
    await Promise.all(["d1", "d2", "d3"].map((id) => cache.get(id)));
    await cache.writtenBack();
    assert.deepEqual(results, ["dropped", "dropped", "dropped"]);
    assert.equal(await redis.get(policyEntryKey("d1")), null);
    // The heads are raised all the same.
    assert.equal(await redis.get(policyHeadKey("d3")), "1");
    cache.close();
  });

  test("the head view: repeat lookups read no head from Redis; a change that arrived is seen at once", async () => {
    const source = recordSource(protector);
    source.records.set("v1", await protectedRecord(protector, "v1", 1));
    const reads: string[] = [];
    const a = await sidecarCache(source, { events: { headRead: (result) => reads.push(result) } });
    await a.cache.get("v1"); // no head in Redis yet: the authority answers and the head is written
    await a.cache.get("v1"); // the head is read from Redis, which seeds the view
    reads.length = 0;
    assert.equal((await a.cache.get("v1")).layer, "local");
    assert.equal(a.cache.peek("v1")?.policy.head, 1);
    assert.deepEqual(reads, ["view", "view"]);

    source.records.set(
      "v1",
      await protectedRecord(protector, "v1", 2, { revoked_at: "2026-01-01T00:00:00Z" }),
    );
    await publisher.publish("v1", 2);
    await a.store.sync();
    assert.equal(a.cache.peek("v1"), undefined);
    const lookup = await a.cache.get("v1");
    assert.equal(lookup.policy.head, 2);
    assert.ok(lookup.policy.load.ok);
    assert.equal(lookup.policy.load.document.revoked_at, "2026-01-01T00:00:00Z");
  });

  test("the head view is used only while the store's last sync is recent enough (viewMaxLagMs)", async () => {
    const source = recordSource(protector);
    source.records.set("v2", await protectedRecord(protector, "v2", 1));
    const store = createRedisPolicyStore({ url: server.url, syncIntervalMs: 3_600_000 });
    stores.push(store);
    await store.waitReady(5000);
    const reads: string[] = [];
    const cache = createVerifiedPolicyCache({
      ...POLICY_CACHE_SETTINGS,
      source,
      opener: sidecarOpener(protector),
      redis: { store, keys },
      viewMaxLagMs: 1000,
      stalenessMs: 5000,
      events: { headRead: (result) => reads.push(result) },
    });
    await cache.get("v2");
    await cache.get("v2");
    await store.sync();
    reads.length = 0;
    await cache.get("v2");
    assert.deepEqual(reads, ["view"]);
    // No sync for longer than the bound: the head is read from Redis again.
    await new Promise((resolve) => setTimeout(resolve, 1100));
    reads.length = 0;
    assert.equal(cache.peek("v2"), undefined);
    await cache.get("v2");
    assert.deepEqual(reads, ["ok"]);
  });

  test("a published change is seen on the next lookup of every sidecar (head read per lookup)", async () => {
    const source = recordSource(protector);
    source.records.set("r2", await protectedRecord(protector, "r2", 1));
    const a = await sidecarCache(source);
    const b = await sidecarCache(source);
    await a.cache.get("r2");
    await b.cache.get("r2");
    source.records.set(
      "r2",
      await protectedRecord(protector, "r2", 2, { revoked_at: "2026-01-01T00:00:00Z" }),
    );
    assert.equal(await publisher.publish("r2", 2), true);
    for (const { cache } of [a, b]) {
      const lookup = await cache.get("r2");
      assert.equal(lookup.policy.head, 2);
      assert.ok(lookup.policy.load.ok);
      assert.equal(lookup.policy.load.document.revoked_at, "2026-01-01T00:00:00Z");
    }
  });

  test("the change channel evicts stale local entries", async () => {
    const source = recordSource(protector);
    source.records.set("r3", await protectedRecord(protector, "r3", 1));
    const a = await sidecarCache(source);
    await a.cache.get("r3");
    assert.equal(a.cache.size, 1);
    await publisher.publish("r3", 2);
    const evicted = await waitFor(() => a.cache.size === 0);
    assert.equal(evicted, true);
  });

  test("heads never go backwards, and a head below what a sidecar verified is not believed", async () => {
    const source = recordSource(protector);
    source.records.set("r4", await protectedRecord(protector, "r4", 3));
    const a = await sidecarCache(source);
    await a.cache.get("r4");
    await publisher.publish("r4", 1);
    assert.equal(await redis.get(policyHeadKey("r4")), "3");
    await redis.set(policyHeadKey("r4"), "1");
    const calls = source.calls.length;
    const lookup = await a.cache.get("r4");
    assert.equal(lookup.layer, "authority");
    assert.equal(lookup.policy.head, 3);
    assert.equal(source.calls.length, calls + 1);
  });

  test("Redis announcing a newer head than the authority returns is refused (source_inconsistent)", async () => {
    const source = recordSource(protector);
    source.records.set("r5", await protectedRecord(protector, "r5", 1));
    const a = await sidecarCache(source);
    await redis.set(policyHeadKey("r5"), "9");
    await assert.rejects(a.cache.get("r5"), {
      code: "source_inconsistent",
      authorityCode: "upstream_unavailable",
    });
  });

  test("entries older than maxAgeMs are revalidated with the authority whatever Redis says", async () => {
    const source = recordSource(protector);
    source.records.set("r6", await protectedRecord(protector, "r6", 1));
    const time = clock();
    const a = await sidecarCache(source, { maxAgeMs: 10_000, now: time.now });
    await a.cache.get("r6");
    const calls = source.calls.length;
    time.advance(4000);
    assert.equal((await a.cache.get("r6")).layer, "local");
    assert.equal(source.calls.length, calls);
    time.advance(7000);
    const lookup = await a.cache.get("r6");
    assert.equal(lookup.layer, "authority");
    assert.deepEqual(source.calls.at(-1), { subjectId: "r6", knownHead: 1 });
  });
});

/** A freshness lease the test drives: current or not, changes and resets delivered by hand. */
function drivenLease() {
  const changeListeners = new Set<(changes: readonly PolicyChange[]) => void>();
  const resetListeners = new Set<() => void>();
  const state = { current: true };
  const lease: FreshnessLease = {
    current: () => state.current,
    onChanges(listener) {
      changeListeners.add(listener);
      return () => changeListeners.delete(listener);
    },
    onReset(listener) {
      resetListeners.add(listener);
      return () => resetListeners.delete(listener);
    },
    whenCurrent: async () => state.current,
  };
  return {
    lease,
    state,
    /** The change log delivers `record` (its head, signed text and revocation). */
    log(record: Pick<PolicyRecord, "subject_id" | "head" | "document_hash" | "revoked_at">) {
      const { subject_id, head, document_hash, revoked_at } = record;
      for (const listener of changeListeners) listener([{ subject_id, head, document_hash, revoked_at }]);
    },
    reset() {
      for (const listener of resetListeners) listener();
    },
  };
}

describe("verified-policy cache under the authority's change log (freshness lease)", () => {
  let server: RedisServerHandle;
  const stores: RedisPolicyStore[] = [];
  let redis: Redis;
  const protector = createLocalPolicyProtector({ keyRings: createProcessKeyRings(), serviceIdentity: "t" });

  before(async () => {
    server = await startRedisServer();
    redis = new Redis(server.url);
  });
  after(async () => {
    for (const store of stores) await store.close();
    redis.disconnect();
    await server.stop();
  });

  const sidecar = async (source: ReturnType<typeof recordSource>) => {
    // A loaded machine may take longer than the default 100 ms to answer a head read.
    const store = createRedisPolicyStore({ url: server.url, commandTimeoutMs: 5000 });
    stores.push(store);
    await store.waitReady(5000);
    const driven = drivenLease();
    const layers: CacheLayer[] = [];
    const cache = createVerifiedPolicyCache({
      ...POLICY_CACHE_SETTINGS,
      source,
      opener: sidecarOpener(protector),
      redis: { store, keys },
      freshness: driven.lease,
      events: { lookup: (layer, hit) => void (hit ? layers.push(layer) : undefined) },
    });
    return { cache, driven, layers };
  };

  test("without a current lease nothing is answered, cached or not (503 freshness_unavailable)", async () => {
    const source = recordSource(protector);
    source.records.set("f1", await protectedRecord(protector, "f1", 1));
    const { cache, driven } = await sidecar(source);
    assert.equal((await cache.get("f1")).policy.load.ok, true);
    driven.state.current = false;
    assert.equal(cache.peek("f1"), undefined);
    await assert.rejects(cache.get("f1"), {
      code: "freshness_unavailable",
      authorityCode: "upstream_unavailable",
    });
    driven.state.current = true;
    assert.equal((await cache.get("f1")).layer, "local");
  });

  test("a logged change evicts the local policy at once; an answer older than a logged head is refused", async () => {
    const source = recordSource(protector);
    source.records.set("f2", await protectedRecord(protector, "f2", 1));
    const { cache, driven } = await sidecar(source);
    await cache.get("f2");
    const rewritten = await protectedRecord(protector, "f2", 2, { expires_at: "2098-01-01T00:00:00Z" });
    driven.log(rewritten);
    assert.equal(cache.peek("f2"), undefined);
    // The authority's answer was read before the change (it was on its way): never used.
    await assert.rejects(cache.get("f2"), { code: "source_inconsistent" });
    source.records.set("f2", rewritten);
    const lookup = await cache.get("f2");
    assert.ok(lookup.policy.load.ok);
    assert.equal(lookup.policy.head, 2);
  });

  test("a logged revocation of the cached policy denies at once, without asking the authority; a later grant replaces it", async () => {
    const source = recordSource(protector);
    source.records.set("f5", await protectedRecord(protector, "f5", 1));
    const { cache, driven } = await sidecar(source);
    assert.equal((await cache.get("f5")).policy.load.ok, true);
    // The second lookup reads the head Redis now holds: the head view knows the subject.
    assert.equal((await cache.get("f5")).layer, "local");
    assert.equal(source.calls.length, 1);
    const revoked = await protectedRecord(protector, "f5", 2, { revoked_at: "2026-01-01T00:00:00Z" });
    driven.log(revoked);
    const at = cache.peek("f5");
    assert.ok(at?.policy.load.ok);
    assert.equal(at.policy.head, 2);
    assert.equal(at.policy.load.document.revoked_at, "2026-01-01T00:00:00Z");
    const lookup = await cache.get("f5");
    assert.ok(lookup.policy.load.ok);
    assert.equal(lookup.policy.load.document.revoked_at, "2026-01-01T00:00:00Z");
    assert.equal(source.calls.length, 1, "no fetch: the log's revocation was applied to the cached policy");
    // Not sealed into Redis: the next reader there still asks the authority.
    const sealed = openEntry(keys, policyEntryName("f5"), (await redis.get(policyEntryKey("f5"))) ?? "");
    assert.ok(sealed.ok);
    assert.equal((sealed.value as { head: number }).head, 1);
    // A new grant (a later head, not revoked) is never served from the revoked entry.
    const granted = await protectedRecord(protector, "f5", 3);
    source.records.set("f5", granted);
    driven.log(granted);
    assert.equal(cache.peek("f5"), undefined);
    const regranted = await cache.get("f5");
    assert.ok(regranted.policy.load.ok);
    assert.equal(regranted.policy.load.document.revoked_at, null);
    assert.equal(regranted.policy.head, 3);
  });

  test("a revocation Redis announced first is still applied from the log; one that skips a head is not", async () => {
    const source = recordSource(protector);
    source.records.set("f6", await protectedRecord(protector, "f6", 1));
    source.records.set("f7", await protectedRecord(protector, "f7", 1));
    const { cache, driven } = await sidecar(source);
    for (const subject of ["f6", "f7"]) {
      await cache.get(subject);
      await cache.get(subject);
    }
    assert.equal(source.calls.length, 2);
    const publisher = createPolicyChangePublisher({ url: server.url });
    try {
      assert.ok(await waitFor(() => publisher.reachable));
      assert.equal(await publisher.publish("f6", 2), true);
      assert.equal(await publisher.publish("f7", 3), true);
    } finally {
      await publisher.close();
    }
    assert.ok(await waitFor(() => cache.peek("f6") === undefined && cache.peek("f7") === undefined));
    const at = "2026-01-01T00:00:00Z";
    driven.log(await protectedRecord(protector, "f6", 2, { revoked_at: at }));
    const revoked = await cache.get("f6");
    assert.ok(revoked.policy.load.ok);
    assert.equal(revoked.policy.load.document.revoked_at, at);
    assert.equal(source.calls.length, 2, "denied from the log, no fetch");
    // Head 3 after head 1: a change between them was not seen, so the authority is asked.
    const skipped = await protectedRecord(protector, "f7", 3, { revoked_at: at });
    driven.log(skipped);
    source.records.set("f7", skipped);
    const fetched = await cache.get("f7");
    assert.equal(fetched.layer, "authority");
    assert.ok(fetched.policy.load.ok);
    assert.equal(fetched.policy.load.document.revoked_at, at);
  });

  test("a lookup waiting on a fetch a Redis message started is answered by the logged revocation", async () => {
    const source = recordSource(protector);
    source.records.set("f8", await protectedRecord(protector, "f8", 1));
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const slow = {
      ...source,
      async fetchPolicy(subjectId: string, options: { readonly knownHead?: number }) {
        if (source.calls.length > 0) await gate;
        return source.fetchPolicy(subjectId, options);
      },
    };
    const { cache, driven } = await sidecar(slow);
    await cache.get("f8");
    await cache.get("f8");
    const publisher = createPolicyChangePublisher({ url: server.url });
    try {
      assert.ok(await waitFor(() => publisher.reachable));
      await publisher.publish("f8", 2);
    } finally {
      await publisher.close();
    }
    assert.ok(await waitFor(() => cache.peek("f8") === undefined));
    const pending = cache.get("f8");
    const revoked = await protectedRecord(protector, "f8", 2, { revoked_at: "2026-01-01T00:00:00Z" });
    source.records.set("f8", revoked);
    await new Promise((resolve) => setTimeout(resolve, 50));
    driven.log(revoked);
    const late = new Promise<never>((_, reject) => {
      setTimeout(() => reject(new Error("still waiting on the fetch")), 5000).unref();
    });
    const lookup = await Promise.race([pending, late]).finally(release);
    assert.equal(lookup.layer, "local");
    assert.ok(lookup.policy.load.ok);
    assert.equal(lookup.policy.load.document.revoked_at, "2026-01-01T00:00:00Z");
  });

  test("a sealed Redis entry is used only as the record the authority confirmed: not a rolled-back or relabelled one", async () => {
    const source = recordSource(protector);
    const active = await protectedRecord(protector, "f3", 1);
    source.records.set("f3", active);
    const first = await sidecar(source);
    await first.cache.get("f3");
    await first.cache.writtenBack();
    const oldHead = await redis.get(policyHeadKey("f3"));
    const oldEntry = await redis.get(policyEntryKey("f3"));
    assert.ok(oldHead !== null && oldEntry !== null);

    // A sidecar the log told of this very record takes the entry from Redis.
    const told = await sidecar(source);
    told.driven.log(active);
    assert.equal((await told.cache.get("f3")).layer, "redis");

    // Revoked at head 2; Redis rolled back to head 1 and its genuine entry. A fresh sidecar
    // (no record confirmed by the authority yet) asks the authority; one the log told of head 2 too.
    const revoked = await protectedRecord(protector, "f3", 2, { revoked_at: "2026-01-01T00:00:00Z" });
    source.records.set("f3", revoked);
    const fresh = await sidecar(source);
    const logged = await sidecar(source);
    logged.driven.log(revoked);
    // And the old genuine policy sealed under the new head by a holder of the cache key.
    const opened = openEntry(keys, policyEntryName("f3"), oldEntry);
    assert.ok(opened.ok);
    const relabelled = sealEntry(keys, policyEntryName("f3"), { ...(opened.value as object), head: 2 });
    const relabelledReader = await sidecar(source);
    relabelledReader.driven.log(revoked);
    for (const [{ cache, layers }, head, entry] of [
      [fresh, oldHead, oldEntry],
      [logged, oldHead, oldEntry],
      [relabelledReader, "2", relabelled],
    ] as const) {
      await redis.set(policyHeadKey("f3"), head);
      await redis.set(policyEntryKey("f3"), entry);
      const lookup = await cache.get("f3");
      // Its write-back lands before the next reader's Redis is set up.
      await cache.writtenBack();
      assert.equal(lookup.layer, "authority");
      assert.deepEqual(layers, ["authority"]);
      assert.ok(lookup.policy.load.ok);
      assert.equal(lookup.policy.load.document.revoked_at, "2026-01-01T00:00:00Z");
    }
  });

  test("a reset (the log could not be followed) forgets every local policy", async () => {
    const source = recordSource(protector);
    source.records.set("f4", await protectedRecord(protector, "f4", 1));
    const { cache, driven } = await sidecar(source);
    await cache.get("f4");
    assert.equal(cache.size, 1);
    driven.reset();
    assert.equal(cache.size, 0);
  });
});

async function waitFor(probe: () => boolean, timeoutMs = 5000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!probe()) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return true;
}

describe("verified-policy cache weight bound and sharing", () => {
  const protector = createLocalPolicyProtector({ keyRings: createProcessKeyRings(), serviceIdentity: "t" });

  test("subjects with the same assignment share one frozen entry; the cached policy keeps no signed text", async () => {
    const source = recordSource(protector);
    for (const subject of ["w1", "w2"])
      source.records.set(subject, await protectedRecord(protector, subject, 1));
    source.records.set(
      "w3",
      await protectedRecord(protector, "w3", 1, {
        apis: [
          entry([
            ["GET", "/users/{id}"],
            ["GET", "/teams"],
          ]),
        ],
      }),
    );
    const cache = createVerifiedPolicyCache({
      ...POLICY_CACHE_SETTINGS,
      source,
      opener: sidecarOpener(protector),
    });
    const [one, two, three] = await Promise.all(
      ["w1", "w2", "w3"].map(async (s) => (await cache.get(s)).policy),
    );
    assert.ok(one?.load.ok && two?.load.ok && three?.load.ok);
    assert.notEqual(one.load.document, two.load.document);
    assert.equal(one.load.document.subject.subject_id, "w1");
    assert.equal(two.load.document.subject.subject_id, "w2");
    assert.equal(one.load.document.apis[0], two.load.document.apis[0]);
    // Another allowlist is another entry; its equal snapshot is still the one instance.
    assert.notEqual(three.load.document.apis[0], one.load.document.apis[0]);
    assert.deepEqual(three.load.document.apis[0]?.allowed_permission_ids.length, 2);
    assert.equal(
      three.load.document.apis[0]?.operations.find((op) => op.path === "/users/{id}"),
      one.load.document.apis[0]?.operations[0],
    );
    // What one subject's holder could change would change every subject's decision: nothing can.
    const shared = one.load.document.apis[0];
    assert.ok(shared !== undefined && Object.isFrozen(shared) && Object.isFrozen(shared.operations[0]));
    assert.throws(() => {
      (shared.allowed_permission_ids as string[]).push("billing:get:/admin");
    }, TypeError);
    // The signed text (kilobytes, the policy text again) went to Redis, not into the entry.
    assert.ok(JSON.stringify({ ...one, load: null }).length < 600);
  });

  test("the local layer keeps policies within localMaxBytes, counting a shared entry once; a policy heavier than the bound is used, not kept", async () => {
    const source = recordSource(protector);
    for (let i = 0; i < 40; i++) source.records.set(`b${i}`, await protectedRecord(protector, `b${i}`, 1));
    const roomy = createVerifiedPolicyCache({
      ...POLICY_CACHE_SETTINGS,
      source,
      opener: sidecarOpener(protector),
    });
    await roomy.get("b0");
    const first = roomy.bytes;
    await roomy.get("b1");
    const perSubject = roomy.bytes - first;
    assert.ok(perSubject > 0 && perSubject < first, `a second subject adds ${perSubject} of ${first} bytes`);

    const bounded = createVerifiedPolicyCache({
      ...POLICY_CACHE_SETTINGS,
      source,
      opener: sidecarOpener(protector),
      localMaxBytes: first + 9 * perSubject,
    });
    for (let i = 0; i < 40; i++) await bounded.get(`b${i}`);
    assert.ok(bounded.bytes <= first + 9 * perSubject);
    assert.equal(bounded.size, 10);

    const tiny = createVerifiedPolicyCache({
      ...POLICY_CACHE_SETTINGS,
      source,
      opener: sidecarOpener(protector),
      localMaxBytes: 100,
    });
    assert.equal((await tiny.get("b0")).policy.load.ok, true);
    assert.equal(tiny.size, 0);
  });
});

describe("verified-policy cache: more subjects than it holds, loaded at once", () => {
  const protector = createLocalPolicyProtector({ keyRings: createProcessKeyRings(), serviceIdentity: "t" });

  test("a burst of first loads past localMaxEntries is answered, not refused as predating a logged change", async () => {
    // Before: every eviction of any subject's authority facts made every fetch on its way
    // "unknowable" (503 source_inconsistent), so bursts of new subjects past the bound failed.
    const source = recordSource(protector);
    const subjects = Array.from({ length: 24 }, (_, i) => `burst-${i}`);
    for (const subject of subjects) source.records.set(subject, await protectedRecord(protector, subject, 1));
    const driven = drivenLease();
    const cache = createVerifiedPolicyCache({
      ...POLICY_CACHE_SETTINGS,
      source,
      opener: sidecarOpener(protector),
      freshness: driven.lease,
      localMaxEntries: 4,
    });
    const results = await Promise.allSettled(subjects.map((subject) => cache.get(subject)));
    const refused = results.filter((result) => result.status === "rejected");
    assert.deepEqual(refused, []);
  });

  test("a subject whose own logged facts were dropped while its fetch was on its way is still refused", async () => {
    const source = recordSource(protector);
    source.records.set("lost-1", await protectedRecord(protector, "lost-1", 1));
    const driven = drivenLease();
    const cache = createVerifiedPolicyCache({
      ...POLICY_CACHE_SETTINGS,
      source,
      opener: sidecarOpener(protector),
      freshness: driven.lease,
      localMaxEntries: 2,
    });
    // The log tells of head 2 of lost-1 while its fetch (answering head 1) is on its way, and
    // then of two other subjects, which evict what was known of lost-1 (the bound is 2).
    const fetching = source.fetchPolicy.bind(source);
    source.fetchPolicy = async (subjectId, options) => {
      const answer = await fetching(subjectId, options);
      driven.log({
        subject_id: "lost-1",
        head: 2,
        document_hash: `sha256:${"2".repeat(64)}`,
        revoked_at: null,
      });
      for (const other of ["x-1", "x-2"])
        driven.log({
          subject_id: other,
          head: 1,
          document_hash: `sha256:${"3".repeat(64)}`,
          revoked_at: null,
        });
      return answer;
    };
    await assert.rejects(cache.get("lost-1"), { code: "source_inconsistent" });
  });
});
