import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { createSidecarMetrics } from "../../../src/servers/sidecar/metrics.ts";

describe("sidecar metrics", () => {
  it("export redis_up only where a Redis is configured (no 0 that would fire RedisDown everywhere)", async () => {
    const without = createSidecarMetrics();
    assert.doesNotMatch(await without.registry.metrics(), /authority_sidecar_redis_up/);

    const withRedis = createSidecarMetrics();
    let up = true;
    withRedis.trackRedisUp(() => up);
    withRedis.trackRedisUp(() => true); // a second registration changes nothing
    assert.match(await withRedis.registry.metrics(), /^authority_sidecar_redis_up 1$/m);
    up = false;
    assert.match(await withRedis.registry.metrics(), /^authority_sidecar_redis_up 0$/m);
  });
});
