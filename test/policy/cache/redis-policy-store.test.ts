import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { Redis } from "ioredis";
import { createRedisPolicyStore, type RedisPolicyStore } from "../../../src/policy/cache/index.ts";
import { type RedisServerHandle, startRedisServer } from "../../helpers/redis-server.ts";

/** PINGs the server has answered so far (every client's). */
async function pingsAnswered(admin: Redis): Promise<number> {
  const info = await admin.info("commandstats");
  const calls = /cmdstat_ping:calls=(\d+)/.exec(info);
  return calls === null ? 0 : Number(calls[1]);
}

describe("the sidecar's Redis view syncs only while lookups use it (real redis-server)", () => {
  let server: RedisServerHandle;
  let admin: Redis;
  let store: RedisPolicyStore;

  before(async () => {
    server = await startRedisServer();
    admin = new Redis(server.url);
    store = createRedisPolicyStore({ url: server.url, syncIntervalMs: 20, syncIdleAfterMs: 100 });
    await store.waitReady(5000);
  });
  after(async () => {
    await store.close();
    admin.disconnect();
    await server.stop();
  });

  test("an idle store sends no PING; a lookup that finds the view stale starts syncing, which stops once lookups stop", async () => {
    const generation = store.subscribedGeneration();
    assert.ok(generation !== undefined);
    await sleep(300);
    const idleStart = await pingsAnswered(admin);
    await sleep(400);
    assert.equal(await pingsAnswered(admin), idleStart, "no PING while nothing reads the view");

    // A lookup finds the view older than its bound: not trusted, and a sync starts at once.
    assert.equal(store.syncedWithin(generation, 50), false);
    let synced = false;
    for (let i = 0; i < 500 && !synced; i++) {
      await sleep(10);
      synced = store.syncedWithin(generation, 1000);
    }
    assert.equal(synced, true);
    assert.ok((await pingsAnswered(admin)) > idleStart);

    // Lookups stop: the PINGs stop after syncIdleAfterMs.
    await sleep(1000);
    const quietStart = await pingsAnswered(admin);
    await sleep(400);
    assert.equal(await pingsAnswered(admin), quietStart, "no PING once lookups stopped");
  });

  test("sync() still answers at once, used or not", async () => {
    await store.sync();
    const generation = store.subscribedGeneration();
    assert.ok(generation !== undefined);
    assert.equal(store.syncedWithin(generation, 60_000), true);
  });
});
