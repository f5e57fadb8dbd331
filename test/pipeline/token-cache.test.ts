import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createJwtVerifier } from "../../src/identity/jwt-verifier.ts";
import { createVerifiedTokenCache } from "../../src/pipeline/token-cache.ts";
import { type CountingVerifier, startCountingVerifier } from "../helpers/counting-verifier.ts";

describe("verified-token cache (real dev IdP, real JWKS over HTTP)", () => {
  let dev: CountingVerifier;

  before(async () => {
    dev = await startCountingVerifier();
  });
  after(() => dev.close());

  test("a token verified once is answered from the cache until it expires", async () => {
    let now = Date.now();
    const cache = createVerifiedTokenCache({ verifier: dev.verifier, now: () => now });
    const token = (
      await dev.idp.issueToken({ subject: "agent-1", lifetimeSec: 60, claims: { partner_id: "acme" } })
    ).accessToken;
    const start = dev.verifications;
    const first = await cache.check(token);
    assert.ok(first.ok);
    assert.equal(first.cached, false);
    assert.equal(first.principal.subject, "agent-1");
    assert.equal(first.principal.partnerId, "acme");
    const second = await cache.check(token);
    assert.ok(second.ok && second.cached);
    assert.equal(dev.verifications, start + 1);
    // Past the token's exp the cache does not answer; the verifier decides again.
    now += 61_000;
    await cache.check(token);
    assert.equal(dev.verifications, start + 2);
  });

  test("entries live at most maxAgeMs, so a key removed from the JWKS stops being trusted", async () => {
    let now = Date.now();
    const cache = createVerifiedTokenCache({ verifier: dev.verifier, maxAgeMs: 1000, now: () => now });
    const token = (await dev.idp.issueToken({ subject: "agent-2", lifetimeSec: 600 })).accessToken;
    await cache.check(token);
    const start = dev.verifications;
    now += 1001;
    await cache.check(token);
    assert.equal(dev.verifications, start + 1);
  });

  test("concurrent checks of one token share one verification", async () => {
    const cache = createVerifiedTokenCache({ verifier: dev.verifier });
    const token = (await dev.idp.issueToken({ subject: "agent-3" })).accessToken;
    const start = dev.verifications;
    const results = await Promise.all(Array.from({ length: 20 }, () => cache.check(token)));
    assert.equal(
      results.every((r) => r.ok),
      true,
    );
    assert.equal(dev.verifications, start + 1);
  });

  test("rejections are remembered briefly, then checked again", async () => {
    let now = Date.now();
    const cache = createVerifiedTokenCache({ verifier: dev.verifier, rejectTtlMs: 500, now: () => now });
    const bad = `${(await dev.idp.issueToken({ subject: "x" })).accessToken.slice(0, -4)}AAAA`;
    const start = dev.verifications;
    assert.deepEqual(await cache.check(bad), { ok: false, unavailable: false });
    assert.deepEqual(await cache.check(bad), { ok: false, unavailable: false });
    assert.equal(dev.verifications, start + 1);
    now += 501;
    await cache.check(bad);
    assert.equal(dev.verifications, start + 2);
  });

  test("an unreachable JWKS is reported as unavailable and not remembered", async () => {
    const offline = createJwtVerifier({
      issuer: dev.issuer,
      audience: "authority",
      jwks: { url: "http://127.0.0.1:9/jwks.json", timeoutMs: 200 },
    });
    const cache = createVerifiedTokenCache({ verifier: offline });
    const token = (await dev.idp.issueToken({ subject: "agent-4" })).accessToken;
    assert.deepEqual(await cache.check(token), { ok: false, unavailable: true });
    assert.equal(cache.size, 0);
  });
});
