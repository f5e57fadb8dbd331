import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  createPolicyChangePublisher,
  createRedisPolicyStore,
  type PolicyChangeMessage,
  type PolicyChangePublisher,
  type RedisPolicyStore,
} from "../../../src/policy/cache/index.ts";
import { type RedisServerHandle, startRedisServer } from "../../helpers/redis-server.ts";

async function waitFor(probe: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return true;
}

describe("policy change publisher and the sidecar's Redis view (real redis-server)", () => {
  let server: RedisServerHandle;
  let publisher: PolicyChangePublisher;
  let store: RedisPolicyStore;
  const changes: PolicyChangeMessage[] = [];

  before(async () => {
    server = await startRedisServer();
    publisher = createPolicyChangePublisher({ url: server.url, retryDelayMs: 20, maxRetryDelayMs: 100 });
    store = createRedisPolicyStore({ url: server.url });
    store.onChange((change) => changes.push(change));
    await store.waitReady(5000);
    // The publisher has no offline queue: until its own connection is up, publish() answers
    // false and retries later. The tests below start once it is connected.
    assert.equal(await waitFor(() => publisher.publish("connected-probe", 1)), true);
  });
  after(async () => {
    await publisher.close();
    await store.close();
    await server.stop();
  });

  test("publish sets the head and announces {subject_id, head} on the channel", async () => {
    assert.equal(await publisher.publish("s-1", 5), true);
    assert.equal(await store.readHead("s-1"), 5);
    assert.equal(await waitFor(() => changes.some((c) => c.subject_id === "s-1" && c.head === 5)), true);
  });

  test("heads only go up, whoever writes them", async () => {
    await publisher.publish("s-2", 7);
    await publisher.publish("s-2", 6);
    await store.raiseHead("s-2", 3);
    assert.equal(await store.readHead("s-2"), 7);
    await store.raiseHead("s-2", 8);
    assert.equal(await store.readHead("s-2"), 8);
    // A sidecar that raised a head announces it (only when it went up).
    await store.sync();
    assert.ok(changes.some((c) => c.subject_id === "s-2" && c.head === 8));
    assert.ok(!changes.some((c) => c.subject_id === "s-2" && c.head === 3));
    assert.equal(await store.readHead("never-published"), null);
  });

  test("sync: once it resolves, every change published before it has reached the listeners", async () => {
    for (let head = 1; head <= 20; head++) await publisher.publish("s-sync", head);
    await store.sync();
    assert.ok(changes.some((c) => c.subject_id === "s-sync" && c.head === 20));
    const generation = store.subscribedGeneration();
    assert.ok(generation !== undefined);
    assert.equal(store.syncedWithin(generation, 60_000), true);
    assert.equal(store.syncedWithin(generation + 1, 60_000), false);
  });

  test("an invalid change is refused before it reaches Redis", async () => {
    await assert.rejects(publisher.publish("", 1), { code: "invalid_options" });
    await assert.rejects(publisher.publish("s", -1), { code: "invalid_options" });
  });

  test("while Redis is down: reads fail fast, changes are kept and delivered after it is back", async () => {
    await server.stop();
    await assert.rejects(store.readHead("s-3"), {
      code: "freshness_unavailable",
      authorityCode: "upstream_unavailable",
    });
    assert.equal(await publisher.publish("s-3", 2), false);
    assert.equal(await publisher.publish("s-3", 4), false);
    assert.equal(publisher.pending, 1);
    await server.start();
    assert.equal(await waitFor(async () => publisher.pending === 0), true);
    assert.equal(await waitFor(async () => (await store.readHead("s-3").catch(() => null)) === 4), true);
    // The subscriber resubscribes by itself (pub/sub keeps nothing for a subscriber that is
    // not there yet, so wait for it); a change published then arrives.
    await store.waitReady(10_000);
    await publisher.publish("s-4", 1);
    assert.equal(await waitFor(() => changes.some((c) => c.subject_id === "s-4")), true);
  });
});
