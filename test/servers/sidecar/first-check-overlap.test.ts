import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Redis } from "ioredis";
import type { JsonFetch } from "../../../src/core/json-fetch.ts";
import { createCapabilityMap } from "../../../src/pipeline/capability-map.ts";
import { policyEntryKey } from "../../../src/policy/cache/index.ts";
import { createAuthorityClient } from "../../../src/servers/sidecar/authority-client.ts";
import { createNodeJsonFetch } from "../../../src/servers/sidecar/node-json-fetch.ts";
import { staticTokenSource } from "../../../src/servers/sidecar/service-token.ts";
import { AGENT, CAPABILITY, eventually, PARTNER, startWorld, UPSTREAM_SECRET, type World } from "./world.ts";

/**
 * What a sidecar's first allowed Check waits for (decision 2871): the authority's answers it
 * needs come in two rounds, not four — the signer's keys beside the policy (their owner follows
 * from the subject), the upstream credentials beside the catalog (the verified policy names
 * their profile for the capability). Seen as the order of the sidecar's own requests: each
 * pair's second one starts before the first one's answer is in. With an earlier process's
 * sealed entry in Redis, the authority is asked beside it (decision 2951).
 */
/** An authority client that logs when each of its requests is asked and answered, by route. */
function recordingAuthority(world: World, token = world.tokens.sidecar) {
  const events: string[] = [];
  const kindOf = (url: string): string => new URL(url).pathname.split("/")[3] ?? "";
  // The sidecar's own transport (build.ts), recorded.
  const transport = createNodeJsonFetch({ maxAnswerBytes: 1024 * 1024 });
  const recording: JsonFetch = async (url, init) => {
    const kind = kindOf(url);
    events.push(`${kind} asked`);
    const response = await transport(url, init);
    events.push(`${kind} answered`);
    return response;
  };
  const authority = createAuthorityClient({
    baseUrl: world.authorityUrl,
    token: staticTokenSource(token),
    fetch: recording,
  });
  const at = (event: string): number => {
    const index = events.indexOf(event);
    assert.notEqual(index, -1, `${event} in ${events.join(", ")}`);
    return index;
  };
  return { events, authority, at };
}

describe("a sidecar's first Check", () => {
  let world: World;
  before(async () => {
    world = await startWorld({ redis: true });
  });
  after(async () => {
    await world?.close();
  });

  it("asks for the keys with the policy and the credentials with the catalog", async () => {
    const { events, authority, at } = recordingAuthority(world);
    // No capability mapped: the catalog is not fetched before ready.
    const sidecar = await world.startSidecar({ authority, capabilityMap: createCapabilityMap({}) });
    try {
      assert.equal(await sidecar.sidecar.whenReady(30_000), true);
      events.length = 0;
      const response = await sidecar.check({});
      assert.equal(response.status.code, 0, "allowed");
      const injected = (response.ok_response.headers as { header: { key: string; value: string } }[]).find(
        (h) => h.header.key === "x-api-key",
      );
      assert.equal(injected?.header.value, UPSTREAM_SECRET);
      assert.ok(at("policy-keys asked") < at("policies answered"), events.join(", "));
      assert.ok(at("auth-profiles asked") < at("capabilities answered"), events.join(", "));
    } finally {
      await sidecar.close();
    }
  });

  it("fetches its mapped capability's catalog before ready: the first Check does not ask for it", async () => {
    // An injected sidecar's credential: its partner and its pod's capability.
    const partnerToken = await world.token("sidecar-acme", {
      roles: ["sidecar"],
      claims: { partner_id: PARTNER },
      scopes: [`authority/sidecar.capability:${CAPABILITY}`],
    });
    const { events, authority, at } = recordingAuthority(world, partnerToken);
    const sidecar = await world.startSidecar({ authority });
    try {
      assert.equal(await sidecar.sidecar.whenReady(30_000), true);
      assert.ok(at("self answered") < at("capabilities asked"), events.join(", "));
      at("capabilities answered");
      events.length = 0;
      const response = await sidecar.check({});
      assert.equal(response.status.code, 0, "allowed");
      assert.ok(!events.includes("capabilities asked"), events.join(", "));
    } finally {
      await sidecar.close();
    }
  });

  it("asks the authority beside an earlier process's sealed Redis entry, and still verifies the entry", async () => {
    // An earlier sidecar leaves the subject's sealed entry in Redis (written after its Check).
    const earlier = await world.startSidecar();
    const redis = new Redis(world.redis?.url ?? "", { lazyConnect: true, maxRetriesPerRequest: 1 });
    redis.on("error", () => undefined);
    try {
      assert.equal(await earlier.sidecar.whenReady(30_000), true);
      assert.equal((await earlier.check({})).status.code, 0);
      await redis.connect();
      assert.ok(await eventually(async () => (await redis.get(policyEntryKey(AGENT))) !== null));
    } finally {
      await earlier.close();
    }
    // A new process: the authority has reported no record of the subject to it yet, so only the
    // authority's answer can allow; it is asked at once, not after the entry's keys and ML-DSA
    // verification (decision 2951) — the entry is still opened and verified with those keys.
    const { events, authority, at } = recordingAuthority(world);
    const sidecar = await world.startSidecar({ authority });
    try {
      assert.equal(await sidecar.sidecar.whenReady(30_000), true);
      events.length = 0;
      assert.equal((await sidecar.check({})).status.code, 0, "allowed");
      assert.ok(at("policies asked") < at("policy-keys answered"), events.join(", "));
      const metrics = await sidecar.metricsText();
      assert.match(metrics, /^authority_sidecar_cache_misses_total\{kind="policy",layer="redis"\} 1$/m);
      assert.doesNotMatch(metrics, /^authority_sidecar_policy_verification_failures_total\{layer="redis"\}/m);
    } finally {
      redis.disconnect();
      await sidecar.close();
    }
  });
});
