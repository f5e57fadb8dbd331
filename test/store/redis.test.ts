import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Redis } from "ioredis";
import { openStore, RedisStore, StoreError } from "../../src/store/index.ts";
import { type RedisServerHandle, startRedisServer } from "../helpers/redis-server.ts";
import { eventually, runStoreContract } from "./contract.ts";

/** Fails the test if a call neither resolves nor rejects in time: the point is "no hang". */
async function settles<T>(
  promise: Promise<T>,
  what: string,
  limitMs = 15_000,
): Promise<PromiseSettledResult<T>> {
  let timer: NodeJS.Timeout | undefined;
  const hang = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} hung`)), limitMs);
  });
  try {
    return await Promise.race([
      Promise.allSettled([promise]).then(([result]) => result as PromiseSettledResult<T>),
      hang,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

async function assertUnavailable(promise: Promise<unknown>, what: string, secret?: string): Promise<void> {
  const result = await settles(promise, what);
  assert.equal(result.status, "rejected", `${what} should fail while Redis is down`);
  const error: unknown = result.status === "rejected" ? result.reason : undefined;
  assert.ok(error instanceof StoreError, `${what}: expected StoreError, got ${String(error)}`);
  assert.equal(error.code, "store_unavailable", `${what}: ${error.message}`);
  assert.equal(error.name, "StoreUnavailableError");
  if (secret !== undefined) {
    assert.ok(!error.message.includes(secret), "message must not reveal the password");
    assert.ok(!String(error.stack).includes(secret), "stack must not reveal the password");
  }
}

function everyCall(store: RedisStore): Array<[string, () => Promise<unknown>]> {
  return [
    ["get", () => store.get("c", "k")],
    ["put", () => store.put("c", "k", 1)],
    ["create", () => store.create("c", "k2", 1)],
    ["delete", () => store.delete("c", "k")],
    ["putIfMatch", () => store.putIfMatch("c", "k", 1, { field: "claim", equals: "t" })],
    ["deleteIfMatch", () => store.deleteIfMatch("c", "k", { field: "claim", equals: "t" })],
    ["list", () => store.list("c")],
    ["count", () => store.count("c")],
    ["append", () => store.append("log", 1)],
    ["readLog", () => store.readLog("log")],
    ["logLength", () => store.logLength("log")],
    ["increment", () => store.increment("n", "k")],
    ["readCounters", () => store.readCounters("n")],
  ];
}

let server: RedisServerHandle;
let stores = 0;
before(async () => {
  server = await startRedisServer();
});
after(() => server.stop());

runStoreContract("redis", async () => {
  stores++;
  // A key prefix per test keeps tests apart on one server.
  const store = new RedisStore({ url: server.url, keyPrefix: `contract${stores}:` });
  return { store, cleanup: () => store.close() };
});

describe("RedisStore specifics", () => {
  it("keeps everything under its key prefix and follows the documented layout", async () => {
    const a = new RedisStore({ url: server.url, keyPrefix: "layout-a:" });
    const b = new RedisStore({ url: server.url, keyPrefix: "layout-b:" });
    const raw = new Redis(server.url);
    try {
      await a.put("docs", "x:1", { v: 1 }, { ttlMs: 600_000 });
      await a.append("audit", "e");
      await a.increment("usage", "calls", 3);
      assert.equal(await b.get("docs", "x:1"), undefined);
      assert.equal(await b.count("docs"), 0);
      assert.deepEqual((await raw.keys("layout-a:*")).sort(), [
        "layout-a:ctr:usage",
        "layout-a:ctrk:usage",
        "layout-a:doc:docs:x:1",
        "layout-a:exp:docs",
        "layout-a:idx:docs",
        "layout-a:log:audit",
        "layout-a:logseq:audit",
        "layout-a:lt:audit",
      ]);
      assert.equal(await raw.get("layout-a:doc:docs:x:1"), '{"v":1}');
      assert.ok((await raw.pttl("layout-a:doc:docs:x:1")) > 0);
      assert.deepEqual(await raw.zrange("layout-a:idx:docs", "0", "-1"), ["x:1"]);
      assert.equal(await raw.hget("layout-a:ctr:usage", "calls"), "3");
      const defaults = new RedisStore({ url: server.url });
      await defaults.put("docs", "d", 1);
      assert.equal(await raw.exists("authority:doc:docs:d"), 1);
      await defaults.close();
    } finally {
      await a.close();
      await b.close();
      raw.disconnect();
    }
  });

  it("prunes expired ids from the index", async () => {
    const store = new RedisStore({ url: server.url, keyPrefix: "prune:" });
    const raw = new Redis(server.url);
    try {
      for (let i = 0; i < 50; i++) await store.put("sessions", `s${i}`, i, { ttlMs: 20 });
      await store.put("sessions", "live", "x");
      await eventually(async () => (await store.count("sessions")) === 1, "sessions expire");
      assert.deepEqual(await raw.zrange("prune:idx:sessions", "0", "-1"), ["live"]);
      assert.equal(await raw.zcard("prune:exp:sessions"), 0);
      // Written-only collections are swept by later writes with a TTL. The TTL outlasts the 20
      // writes even on a loaded machine: a write made after the first ids are due sweeps them.
      for (let i = 0; i < 20; i++) await store.create("nonces", `n${i}`, 1, { ttlMs: 1_000 });
      // Watched through a raw client: a store get would prune the ids itself.
      const nonceKeys = Array.from({ length: 20 }, (_, i) => `prune:doc:nonces:n${i}`);
      await eventually(async () => (await raw.exists(...nonceKeys)) === 0, "nonces expire");
      assert.equal(await raw.zcard("prune:idx:nonces"), 20);
      // Each write with a TTL sweeps up to 16 due ids, more than it adds.
      await store.create("nonces", "fresh1", 1, { ttlMs: 600_000 });
      await store.create("nonces", "fresh2", 1, { ttlMs: 600_000 });
      assert.deepEqual(await raw.zrange("prune:idx:nonces", "0", "-1"), ["fresh1", "fresh2"]);
    } finally {
      await store.close();
      raw.disconnect();
    }
  });

  it("reads and removes a prefix of counters by their key index, never by scanning the hash", async () => {
    const store = new RedisStore({ url: server.url, keyPrefix: "ctr-index:" });
    const raw = new Redis(server.url);
    try {
      // 200 hours of usage rollups, 50 keys each: the view asks for one hour.
      for (let hour = 0; hour < 200; hour++) {
        const period = `h|2026-01-${String(1 + Math.floor(hour / 24)).padStart(2, "0")}T${String(hour % 24).padStart(2, "0")}`;
        await store.writeAll(
          Array.from({ length: 50 }, (_, k) => ({
            op: "increment" as const,
            counters: "usage",
            key: `${period}|p|agent-${k}|cap|perm|allowed`,
            by: 1,
          })),
        );
      }
      await raw.config("RESETSTAT");
      const hour = await store.readCounters("usage", "h|2026-01-03T07|");
      assert.equal(Object.keys(hour).length, 50);
      assert.equal(hour["h|2026-01-03T07|p|agent-7|cap|perm|allowed"], 1);
      assert.equal(await store.deleteCounters("usage", "h|", "h|2026-01-01T02", 500), 100);
      const stats = await raw.info("commandstats");
      assert.doesNotMatch(stats, /cmdstat_(hgetall|hscan|hkeys|hvals):/, "no walk of the whole hash");
      // One range for the read, one inside the deleting script.
      assert.match(stats, /cmdstat_zrangebylex:calls=2,/);
      assert.match(stats, /cmdstat_hmget:calls=1,/);
      assert.equal(await raw.hlen("ctr-index:ctr:usage"), 9_900);
      assert.equal(await raw.zcard("ctr-index:ctrk:usage"), 9_900);
    } finally {
      await store.close();
      raw.disconnect();
    }
  });

  it("indexes counters an older release wrote or removed without the key index, once", async () => {
    const store = new RedisStore({ url: server.url, keyPrefix: "ctr-old:" });
    const raw = new Redis(server.url);
    try {
      await store.increment("usage", "d|2026-01-01|a", 2);
      // What a release without the index did: HINCRBY and HDEL on the hash alone.
      for (let i = 0; i < 30; i++) await raw.hincrby("ctr-old:ctr:usage", `d|2026-01-02|k${i}`, i + 1);
      await raw.hdel("ctr-old:ctr:usage", "d|2026-01-01|a");
      const day = await store.readCounters("usage", "d|2026-01-02|");
      assert.equal(Object.keys(day).length, 30);
      assert.equal(day["d|2026-01-02|k29"], 30);
      assert.deepEqual(await store.readCounters("usage", "d|2026-01-01|"), {});
      assert.equal(await raw.zcard("ctr-old:ctrk:usage"), 30);
      await raw.config("RESETSTAT");
      await store.readCounters("usage", "d|2026-01-02|");
      assert.doesNotMatch(await raw.info("commandstats"), /cmdstat_(hscan|zscan):/, "indexed once");
      assert.equal(await store.deleteCounters("usage", "d|", "d|2026-01-03"), 30);
      assert.equal(await raw.exists("ctr-old:ctr:usage", "ctr-old:ctrk:usage"), 0);
    } finally {
      await store.close();
      raw.disconnect();
    }
  });

  it("opens from redis:// URLs and reports host:port in health", async () => {
    const store = await openStore(server.url, { redis: { keyPrefix: "open:" } });
    assert.equal(store.backend, "redis");
    await store.put("c", "k", "v");
    assert.equal(await store.get("c", "k"), "v");
    const health = await store.health();
    assert.equal(health.ok, true);
    assert.ok(health.detail.includes(`127.0.0.1:${server.port}`), health.detail);
    await store.close();
  });

  it("validates its options without echoing the URL", () => {
    assert.throws(
      () => new RedisStore({ url: "redis://:pw-should-not-show@" }),
      (error: unknown) => {
        assert.ok(error instanceof StoreError);
        assert.ok(!error.message.includes("pw-should-not-show"));
        return true;
      },
    );
    assert.throws(() => new RedisStore({ url: "http://x" }), StoreError);
    assert.throws(() => new RedisStore({ url: server.url, keyPrefix: "has space" }), StoreError);
    assert.throws(() => new RedisStore({ url: server.url, commandTimeoutMs: 0 }), StoreError);
  });
});

describe("RedisStore when Redis fails", () => {
  it("rejects every call with StoreUnavailableError while Redis is stopped, then recovers on the same instance", async () => {
    const own = await startRedisServer();
    const store = new RedisStore({ url: own.url, keyPrefix: "fault:" });
    try {
      await store.put("c", "before", 1);
      await own.stop();
      for (const [what, call] of everyCall(store)) await assertUnavailable(call(), what);
      const health = await settles(store.health(), "health");
      assert.equal(health.status, "fulfilled");
      if (health.status === "fulfilled") {
        assert.equal(health.value.ok, false);
        assert.ok(health.value.detail.includes(`127.0.0.1:${own.port}`), health.value.detail);
      }
      await own.start();
      await eventually(async () => {
        try {
          await store.put("c", "after", 2);
          return true;
        } catch (error) {
          assert.ok(error instanceof StoreError && error.code === "store_unavailable", String(error));
          return false;
        }
      }, "the same store works again after Redis restarts");
      assert.equal(await store.get("c", "after"), 2);
      assert.equal(await store.append("log", "x"), 1);
      assert.equal((await store.health()).ok, true);
    } finally {
      await store.close();
      await own.stop();
    }
  });

  it("settles every in-flight call when Redis is killed mid-burst", async () => {
    const own = await startRedisServer();
    const store = new RedisStore({ url: own.url, keyPrefix: "burst:" });
    try {
      await store.append("log", "warm-up");
      const burst = Array.from({ length: 300 }, (_, i) => store.append("log", i));
      const killed = own.kill();
      const results = await Promise.all(burst.map((call, i) => settles(call, `append ${i}`)));
      await killed;
      for (const result of results) {
        if (result.status === "rejected") {
          assert.ok(result.reason instanceof StoreError, String(result.reason));
          assert.equal(result.reason.code, "store_unavailable");
        } else {
          assert.equal(typeof result.value, "number");
        }
      }
      await assertUnavailable(store.get("c", "k"), "get after kill");
      await own.start();
      await eventually(async () => (await store.health()).ok, "reconnect after crash");
      assert.equal(await store.append("log", "fresh"), 1, "a restarted empty server starts a new log");
    } finally {
      await store.close();
      await own.stop();
    }
  });

  it("times out calls to a hung server instead of waiting forever", async () => {
    const own = await startRedisServer();
    const store = new RedisStore({ url: own.url, keyPrefix: "hung:", commandTimeoutMs: 300 });
    try {
      await store.put("c", "k", 1);
      own.pause();
      await assertUnavailable(store.get("c", "k"), "get on a paused server");
      await assertUnavailable(store.append("log", 1), "append on a paused server");
      assert.equal((await settles(store.health(), "health")).status, "fulfilled");
      own.resume();
      await eventually(async () => {
        try {
          return (await store.get("c", "k")) === 1;
        } catch {
          return false;
        }
      }, "answers again after resume");
    } finally {
      own.resume();
      await store.close();
      await own.stop();
    }
  });

  it("waits for a server that starts after the store was created", async () => {
    const own = await startRedisServer();
    await own.stop();
    const store = new RedisStore({ url: own.url, keyPrefix: "late:" });
    try {
      await assertUnavailable(store.get("c", "k"), "get before the server exists");
      await own.start();
      await eventually(async () => (await store.health()).ok, "connects once the server is up");
      await store.put("c", "k", "v");
      assert.equal(await store.get("c", "k"), "v");
    } finally {
      await store.close();
      await own.stop();
    }
  });

  it("never reveals the password, whether up, down or rejected", async () => {
    const password = "pw-Zk9-do-not-leak";
    const own = await startRedisServer({ password });
    assert.ok(own.url.includes(password));
    const store = new RedisStore({ url: own.url, keyPrefix: "secret:" });
    const wrong = new RedisStore({
      url: own.url.replace(password, "wrong-password-xyz"),
      keyPrefix: "secret:",
    });
    try {
      await store.put("c", "k", 1);
      const up = await store.health();
      assert.equal(up.ok, true);
      assert.ok(!up.detail.includes(password), up.detail);
      await assertUnavailable(wrong.get("c", "k"), "get with a wrong password", "wrong-password-xyz");
      const rejected = await wrong.health();
      assert.equal(rejected.ok, false);
      assert.ok(!rejected.detail.includes("wrong-password-xyz"), rejected.detail);
      await own.stop();
      await assertUnavailable(store.get("c", "k"), "get while down", password);
      const down = await store.health();
      assert.equal(down.ok, false);
      assert.ok(!down.detail.includes(password), down.detail);
    } finally {
      await store.close();
      await wrong.close();
      await own.stop();
    }
  });
});
