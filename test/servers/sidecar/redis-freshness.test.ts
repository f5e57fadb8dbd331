import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Redis } from "ioredis";
import { createSubject } from "../../../src/admin/subjects.ts";
import { policyEntryKey, policyHeadKey } from "../../../src/policy/cache/index.ts";
import {
  AGENT,
  deniedBody,
  eventually,
  PARTNER,
  type SidecarHandle,
  startWorld,
  type World,
} from "./world.ts";

/**
 * Two sidecars share one real Redis with the authority service. Revocations are made on the
 * authority through its real admin HTTP route.
 */
describe("sidecar freshness with Redis: revocation, outage, tampering", () => {
  let world: World;
  let first: SidecarHandle;
  let second: SidecarHandle;
  let redis: Redis;

  const newSubject = async (subjectId: string): Promise<string> => {
    await createSubject(world.context, PARTNER, {
      subject_id: subjectId,
      subject_type: "agent",
      display_name: subjectId,
    });
    await world.assign(subjectId, {});
    return world.token(subjectId);
  };

  before(async () => {
    world = await startWorld({ redis: true });
    first = await world.startSidecar();
    second = await world.startSidecar();
    if (world.redis === undefined) throw new Error("redis missing");
    redis = new Redis(world.redis.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
    redis.on("error", () => undefined);
    await redis.connect();
  });
  after(async () => {
    redis.disconnect();
    await world.close();
  });

  /** One sync round trip on each sidecar's change subscription: every change published before has arrived. */
  const synced = () => Promise.all([first, second].map((sidecar) => sidecar.sidecar.redis?.sync()));

  test("a revocation on the authority is denied by both sidecars once its change message has arrived", async () => {
    const token = await newSubject("agent-revoke-both");
    for (const sidecar of [first, second]) {
      assert.equal((await sidecar.check({ token })).http_response, "ok_response");
    }
    const started = performance.now();
    assert.equal(await world.revoke("agent-revoke-both"), 200);
    // The authority published before answering; the message reaches a sidecar within a
    // loopback hop (in practice before this request does). A sync round trip makes that
    // deterministic here: no waiting, no polling.
    await synced();
    const [a, b] = await Promise.all([first.check({ token }), second.check({ token })]);
    const elapsedMs = performance.now() - started;
    for (const response of [a, b]) {
      assert.equal(response.http_response, "denied_response");
      assert.equal(deniedBody(response).reason, "policy_revoked");
      assert.equal(response.denied_response.status.code, "Forbidden");
    }
    assert.ok(Number.isFinite(elapsedMs));
    assert.equal(await redis.get(policyHeadKey("agent-revoke-both")), "2");
  });

  test("both sidecars also deny through the forward proxy after a revocation", async () => {
    const token = await newSubject("agent-revoke-proxy");
    const target = "http://orders.internal/orders/7";
    assert.equal((await first.proxy({ target, token })).status, 200);
    assert.equal((await second.proxy({ target, token })).status, 200);
    assert.equal(await world.revoke("agent-revoke-proxy"), 200);
    await synced();
    for (const sidecar of [first, second]) {
      const reply = await sidecar.proxy({ target, token });
      assert.equal(reply.status, 403);
      assert.equal(reply.json().reason, "policy_revoked");
    }
  });

  test("the head view answers repeat requests without a Redis read, and stops when the subscription is lost", async () => {
    const token = await newSubject("agent-view");
    const headReads = async (result: string) =>
      Number(
        (await first.metricsText()).match(
          new RegExp(`^authority_sidecar_policy_head_reads_total\\{result="${result}"\\} (\\d+)`, "m"),
        )?.[1] ?? 0,
      );
    for (let i = 0; i < 3; i++) assert.equal((await first.check({ token })).http_response, "ok_response");
    const fromView = await headReads("view");
    const fromRedis = await headReads("ok");
    assert.equal((await first.check({ token })).http_response, "ok_response");
    assert.equal(await headReads("view"), fromView + 1);
    assert.equal(await headReads("ok"), fromRedis);

    // Redis drops the sidecar's pub/sub connection: changes could be missed, so the view is
    // out of service until the subscription is back and the head has been read again.
    const store = first.sidecar.redis;
    assert.ok(store !== undefined);
    const generation = store.subscribedGeneration();
    await redis.call("CLIENT", "KILL", "TYPE", "pubsub");
    assert.equal(await eventually(async () => store.subscribedGeneration() !== generation), true);
    assert.equal((await first.check({ token })).http_response, "ok_response");
    assert.equal(await headReads("ok"), fromRedis + 1);
    await store.waitReady(10_000);
  });

  test("a policy verified by one sidecar is served to the other from the sealed Redis entry", async () => {
    const token = await newSubject("agent-shared-entry");
    // The entry's head must be one the authority confirmed to this sidecar (its change log):
    // Redis' word alone would take a rolled-back pair of head and entry too.
    await second.sidecar.freshness.sync();
    const before = await second.metricsText();
    assert.equal((await first.check({ token })).http_response, "ok_response");
    // The sealed entry is written after the Check is answered.
    assert.ok(await eventually(async () => (await redis.get(policyEntryKey("agent-shared-entry"))) !== null));
    assert.equal((await second.check({ token })).http_response, "ok_response");
    const after = await second.metricsText();
    const series = 'authority_sidecar_cache_hits_total{kind="policy",layer="redis"}';
    const count = (text: string) =>
      Number(text.match(new RegExp(`^${series.replace(/[{}]/g, "\\$&")} (\\d+)`, "m"))?.[1] ?? 0);
    assert.equal(count(after), count(before) + 1);
    const sealed = await redis.get(policyEntryKey("agent-shared-entry"));
    assert.match(sealed ?? "", /^v1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/);
    // Sealed: the policy's contents are not readable in Redis.
    assert.doesNotMatch(sealed ?? "", /orders/);
  });

  test("a tampered Redis entry is discarded, reloaded from the authority and re-verified, never trusted", async () => {
    const token = await newSubject("agent-tampered");
    const victim = await newSubject("agent-victim");
    assert.equal((await first.check({ token })).http_response, "ok_response");
    assert.equal((await first.check({ token: victim })).http_response, "ok_response");
    const key = policyEntryKey("agent-tampered");
    // The sealed entries are written after the Checks are answered.
    const written = async () =>
      (await redis.get(key)) !== null && (await redis.get(policyEntryKey("agent-victim"))) !== null;
    assert.ok(await eventually(written));
    const sealed = await redis.get(key);
    assert.ok(sealed !== null);
    const victimEntry = await redis.get(policyEntryKey("agent-victim"));
    assert.ok(victimEntry !== null);

    // Revoke, then put the old (pre-revocation) entry back with one byte flipped, and
    // separately another subject's valid entry under this key: neither may be believed.
    assert.equal(await world.revoke("agent-tampered"), 200);
    const parts = sealed.split(".");
    const body = parts[2] ?? "";
    const flipped = `${body.slice(0, 10)}${body[10] === "A" ? "B" : "A"}${body.slice(11)}`;
    for (const forged of [[parts[0], parts[1], flipped, parts[3]].join("."), victimEntry, "garbage"]) {
      await redis.set(key, forged);
      const fresh = await world.startSidecar();
      const before = await fresh.metricsText();
      const response = await fresh.check({ token });
      assert.equal(response.http_response, "denied_response");
      assert.equal(deniedBody(response).reason, "policy_revoked");
      const after = await fresh.metricsText();
      assert.match(after, /authority_sidecar_policy_verification_failures_total\{layer="redis"\} 1/);
      assert.doesNotMatch(before, /layer="redis"\} 1/);
      // The reload wrote a valid sealed entry back (after the Check was answered).
      assert.ok(await eventually(async () => (await redis.get(key)) !== forged));
      await fresh.close();
    }
  });

  test("Redis without head keys (e.g. restarted empty): the authority is asked and the head written back", async () => {
    const token = await newSubject("agent-no-head");
    await redis.del(policyHeadKey("agent-no-head"));
    assert.equal((await first.check({ token })).http_response, "ok_response");
    assert.equal(await redis.get(policyHeadKey("agent-no-head")), "1");
  });

  test("Redis stopped and restarted: allows stop within the staleness bound (503), never after it; recovery is automatic", async () => {
    const stalenessMs = 300;
    const probe = await world.startSidecar({ stalenessMs });
    const token = await newSubject("agent-outage");
    assert.equal((await probe.check({ token })).http_response, "ok_response");
    assert.equal((await probe.check({ token: world.tokens.agent })).http_response, "ok_response");
    const server = world.redis;
    if (server === undefined) throw new Error("redis missing");

    await server.stop();
    const stoppedAt = Date.now();
    const outcomes: Array<{ at: number; allowed: boolean; reason?: string; status?: string }> = [];
    while (Date.now() - stoppedAt < stalenessMs + 400) {
      const at = Date.now();
      const response = await probe.check({ token });
      outcomes.push(
        response.http_response === "ok_response"
          ? { at, allowed: true }
          : {
              at,
              allowed: false,
              reason: deniedBody(response).reason,
              status: response.denied_response.status.code,
            },
      );
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    // Never an allow once the staleness bound has passed since Redis was last read.
    const late = outcomes.filter((o) => o.at > stoppedAt + stalenessMs);
    assert.ok(late.length > 0);
    for (const outcome of late) {
      assert.equal(outcome.allowed, false);
      assert.equal(outcome.reason, "upstream_unavailable");
      assert.equal(outcome.status, "ServiceUnavailable");
    }
    // Subjects never seen before are denied during the outage too (no freshness at all).
    const unseen = await probe.check({ token: world.tokens.otherAgent });
    assert.equal(deniedBody(unseen).reason, "upstream_unavailable");

    // A revocation made during the outage must hold once Redis is back (it restarts empty).
    assert.equal(await world.revoke("agent-outage"), 200);
    await server.start();
    const recovered = await eventually(
      async () => (await probe.check({ token: world.tokens.agent })).http_response === "ok_response",
    );
    assert.equal(recovered, true, "the sidecar recovers by itself once Redis is back");
    const revoked = await probe.check({ token });
    assert.equal(deniedBody(revoked).reason, "policy_revoked");
    assert.match(
      await probe.metricsText(),
      /authority_sidecar_policy_head_reads_total\{result="error"\} [1-9]/,
    );
    await probe.close();
    assert.equal(AGENT.length > 0, true);
  });
});
