import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Redis } from "ioredis";
import { POLICY_CHANGES_CHANNEL, policyHeadKey } from "../../../../src/policy/cache/redis-keys.ts";
import { type RedisServerHandle, startRedisServer } from "../../../helpers/redis-server.ts";
import { type Harness, startHarness } from "./harness.ts";

describe("authority serve with --redis-url publishes policy changes", () => {
  let redis: RedisServerHandle;
  let harness: Harness;
  let client: Redis;

  before(async () => {
    redis = await startRedisServer();
    harness = await startHarness({ settings: { "redis-url": redis.url } });
    client = new Redis(redis.url);
  });
  after(async () => {
    client.disconnect();
    await harness.close();
    await redis.stop();
  });

  // The publisher's connection may still be opening when the change is made: the change then
  // waits in its retry queue and goes out once the connection is ready, so both are polled.
  it("raises the subject's head and announces it on the channel", async (t) => {
    const subscriber = new Redis(redis.url);
    t.after(() => subscriber.disconnect());
    const messages: string[] = [];
    subscriber.on("message", (_channel: string, message: string) => messages.push(message));
    await subscriber.subscribe(POLICY_CHANGES_CHANNEL);
    const onPolicyChange = harness.service.context.onPolicyChange;
    assert.ok(onPolicyChange, "onPolicyChange is wired when a Redis URL is configured");
    await onPolicyChange("agent-publishing", 7);
    for (let i = 0; i < 250 && messages.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(JSON.parse(messages[0] ?? "{}"), { subject_id: "agent-publishing", head: 7 });
    assert.equal(await client.get(policyHeadKey("agent-publishing")), "7");
  });
});
