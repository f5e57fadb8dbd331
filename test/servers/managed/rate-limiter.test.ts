import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { createRateLimiter } from "../../../src/servers/managed/rate-limiter.ts";

describe("per-user rate limiter", () => {
  it("allows a burst, then refuses with the seconds until the next request fits", () => {
    let now = 0;
    const limiter = createRateLimiter({ perUserPerMinute: 60, burst: 3 }, { now: () => now });
    for (let i = 0; i < 3; i++) assert.deepEqual(limiter.take("alice"), { allowed: true });
    assert.deepEqual(limiter.take("alice"), { allowed: false, retryAfterSec: 1 });
    now += 1000;
    assert.deepEqual(limiter.take("alice"), { allowed: true });
    assert.equal(limiter.take("alice").allowed, false);
  });

  it("keeps users apart and refills up to the burst only", () => {
    let now = 0;
    const limiter = createRateLimiter({ perUserPerMinute: 6, burst: 2 }, { now: () => now });
    assert.equal(limiter.take("a").allowed, true);
    assert.equal(limiter.take("a").allowed, true);
    const refused = limiter.take("a");
    assert.deepEqual(refused, { allowed: false, retryAfterSec: 10 });
    assert.equal(limiter.take("b").allowed, true);
    now += 3_600_000;
    assert.equal(limiter.take("a").allowed, true);
    assert.equal(limiter.take("a").allowed, true);
    assert.equal(limiter.take("a").allowed, false);
  });

  it("forgets the least recently used users beyond maxKeys", () => {
    const limiter = createRateLimiter({ perUserPerMinute: 1, burst: 1 }, { now: () => 0, maxKeys: 2 });
    assert.equal(limiter.take("a").allowed, true);
    assert.equal(limiter.take("b").allowed, true);
    assert.equal(limiter.take("c").allowed, true);
    // "a" was evicted, so it starts again with a full bucket; "c" is still limited.
    assert.equal(limiter.take("a").allowed, true);
    assert.equal(limiter.take("c").allowed, false);
  });
});
