import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import fc from "fast-check";
import { decodeJwt, decodeProtectedHeader, generateKeyPair, SignJWT } from "jose";
import type { VerifiedToken } from "../../src/identity/jwt-verifier.ts";
import { createVerifiedTokenCache } from "../../src/identity/verified-token-cache.ts";
import { type CountingVerifier, startCountingVerifier } from "../helpers/counting-verifier.ts";

/** Same header and payload text, and a signature that decodes to the same bytes. */
function sameSignedBytes(a: string, b: string): boolean {
  const [ah, ap, as] = a.split(".");
  const [bh, bp, bs] = b.split(".");
  if (ah !== bh || ap !== bp || as === undefined || bs === undefined) return false;
  if (!/^[A-Za-z0-9_-]*$/.test(as)) return false;
  return Buffer.from(as, "base64url").equals(Buffer.from(bs, "base64url"));
}

describe("verified-token cache (real dev IdP, real JWKS over HTTP)", () => {
  let dev: CountingVerifier;

  const cacheOver = (options: { maxAgeMs?: number; maxEntries?: number; now?: () => number } = {}) =>
    createVerifiedTokenCache<VerifiedToken>({
      verify: (token) => dev.verifier.verify(token),
      expiresAtMs: (verified) => verified.expiresAt.getTime(),
      maxAgeMs: options.maxAgeMs ?? 300_000,
      ...(options.maxEntries === undefined ? {} : { maxEntries: options.maxEntries }),
      ...(options.now === undefined ? {} : { now: options.now }),
    });
  const issue = async (subject: string, lifetimeSec = 600) =>
    (await dev.idp.issueToken({ subject, lifetimeSec })).accessToken;

  before(async () => {
    dev = await startCountingVerifier();
  });
  after(() => dev.close());

  test("a forged token with the genuine token's claims and key id is never served from the cache", async () => {
    const cache = cacheOver();
    const genuine = await issue("agent-1");
    await cache.verify(genuine);
    // Same header (kid, alg) and claims, signed by a key the issuer never published.
    const { privateKey } = await generateKeyPair("ES256");
    const header = decodeProtectedHeader(genuine);
    const forged = await new SignJWT(decodeJwt(genuine))
      .setProtectedHeader({ ...header, alg: "ES256" })
      .sign(privateKey);
    for (let i = 0; i < 2; i++) {
      const before = dev.verifications;
      assert.equal(cache.peek(forged), undefined);
      await assert.rejects(cache.verify(forged));
      assert.equal(dev.verifications, before + 1, "every attempt goes to the verifier");
    }
    assert.equal(cache.peek(genuine)?.subject, "agent-1");
  });

  test("any other string than a verified token misses the cache and is refused (property)", async () => {
    const cache = cacheOver();
    const genuine = await issue("agent-2");
    await cache.verify(genuine);
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.string(),
          fc
            .tuple(fc.nat({ max: genuine.length - 1 }), fc.string({ minLength: 1, maxLength: 1 }))
            .map(([at, c]) => `${genuine.slice(0, at)}${c}${genuine.slice(at + 1)}`),
        ),
        async (token) => {
          // A changed last character of the signature may leave its unused low bits only: the
          // same signed bytes, so the same token to every verifier, not a forgery.
          fc.pre(token !== genuine && !sameSignedBytes(token, genuine));
          assert.equal(cache.peek(token), undefined);
          await assert.rejects(cache.verify(token));
        },
      ),
      { numRuns: 60 },
    );
    assert.equal(cache.size, 1, "refusals are not kept");
  });

  test("an expired token is not served from the cache: the verifier refuses it", async () => {
    const cache = cacheOver();
    const token = await issue("agent-3", 1);
    await cache.verify(token);
    const expiresAt = (decodeJwt(token).exp ?? 0) * 1000;
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, expiresAt - Date.now()) + 50));
    const before = dev.verifications;
    assert.equal(cache.peek(token), undefined);
    await assert.rejects(cache.verify(token));
    assert.equal(dev.verifications, before + 1);
    assert.equal(cache.size, 0);
  });

  test("an entry lives at most maxAgeMs, then the verifier decides again", async () => {
    let now = Date.now();
    const cache = cacheOver({ maxAgeMs: 1000, now: () => now });
    const token = await issue("agent-4");
    await cache.verify(token);
    const before = dev.verifications;
    now += 999;
    await cache.verify(token);
    assert.equal(dev.verifications, before);
    now += 2;
    assert.equal(cache.peek(token), undefined);
    await cache.verify(token);
    assert.equal(dev.verifications, before + 1);
  });

  test("the cache is bounded: the least recently used token is dropped", async () => {
    const cache = cacheOver({ maxEntries: 3 });
    const tokens = await Promise.all(["a", "b", "c", "d", "e"].map((s) => issue(`agent-5${s}`)));
    for (const token of tokens) await cache.verify(token);
    assert.equal(cache.size, 3);
    assert.equal(cache.peek(tokens[0] as string), undefined);
    assert.equal(cache.peek(tokens[4] as string)?.subject, "agent-5e");
  });

  test("concurrent first sightings share one verification; a shared refusal is not kept", async () => {
    const cache = cacheOver();
    const token = await issue("agent-6");
    let before = dev.verifications;
    const results = await Promise.all(Array.from({ length: 20 }, () => cache.verify(token)));
    assert.ok(results.every((r) => r.subject === "agent-6"));
    assert.equal(dev.verifications, before + 1);

    const bad = `${token.slice(0, -4)}AAAA`;
    before = dev.verifications;
    const refused = await Promise.allSettled(Array.from({ length: 5 }, () => cache.verify(bad)));
    assert.ok(refused.every((r) => r.status === "rejected"));
    assert.equal(dev.verifications, before + 1);
    await assert.rejects(cache.verify(bad));
    assert.equal(dev.verifications, before + 2);
  });

  test("a token without an expiry is answered but not remembered", async () => {
    let calls = 0;
    const cache = createVerifiedTokenCache({
      verify: async (token: string) => {
        calls++;
        return { token };
      },
      expiresAtMs: () => undefined,
      maxAgeMs: 60_000,
    });
    assert.deepEqual(await cache.verify("x"), { token: "x" });
    assert.equal(cache.peek("x"), undefined);
    await cache.verify("x");
    assert.equal(calls, 2);
    assert.equal(cache.size, 0);
  });
});
