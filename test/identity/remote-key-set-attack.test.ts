import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, it, mock } from "node:test";
import { exportJWK, generateKeyPair, SignJWT } from "jose";
import type { JsonFetch } from "../../src/core/json-fetch.ts";
import { TokenVerificationError } from "../../src/identity/errors.ts";
import { createJwtVerifier } from "../../src/identity/jwt-verifier.ts";
import { createNodeJsonFetch } from "../../src/servers/sidecar/node-json-fetch.ts";

/**
 * The attack pass on the verifier's own remote key set (it replaced jose's createRemoteJWKSet,
 * decision 3081; attack pass 3121): tokens naming random key ids must not turn into a request to
 * the issuer each (amplification against the issuer and our event loop), whether the issuer
 * answers or fails; a key set that is not one, or comes by redirect, is never used; and both
 * transports (fetch, the sidecar's node:http) read it alike.
 */

const ISSUER = "https://issuer.attack.test";
const { privateKey, publicKey } = await generateKeyPair("ES256", { extractable: true });
const goodSet = { keys: [{ ...(await exportJWK(publicKey)), kid: "good", alg: "ES256", use: "sig" }] };

const sign = (kid: string) =>
  new SignJWT({ sub: "s" })
    .setProtectedHeader({ alg: "ES256", kid })
    .setIssuer(ISSUER)
    .setAudience("a")
    .setIssuedAt()
    .setExpirationTime("10m")
    .sign(privateKey);

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return "verified";
  } catch (error) {
    assert.ok(error instanceof TokenVerificationError, String(error));
    return error.code;
  }
}

/** An issuer whose JWKS answer `respond` writes; counts the requests. */
async function issuer(respond: (response: ServerResponse) => void) {
  const state = { requests: 0, respond };
  const server = createServer((_request, response) => {
    state.requests++;
    state.respond(response);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    state,
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks`,
    close: () => {
      server.closeAllConnections();
      server.close();
    },
  };
}

const serve =
  (body: unknown, status = 200) =>
  (response: ServerResponse) =>
    response.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));

const transports: ReadonlyArray<[string, JsonFetch]> = [
  ["fetch", globalThis.fetch],
  ["node:http", createNodeJsonFetch({ maxAnswerBytes: 1024 * 1024 })],
];

describe("the remote key set against tokens naming random key ids", () => {
  afterEach(() => mock.timers.reset());

  for (const [name, fetch] of transports) {
    it(`asks a healthy issuer at most once per cooldown, however many unknown kids (${name})`, async () => {
      const idp = await issuer(serve(goodSet));
      try {
        const verifier = createJwtVerifier({
          issuer: ISSUER,
          audience: "a",
          jwks: { url: idp.url, fetch, cooldownMs: 60_000 },
        });
        assert.equal(await codeOf(verifier.verify(await sign("good"))), "verified");
        const flood = await Promise.all(
          Array.from({ length: 40 }, async () => codeOf(verifier.verify(await sign(randomUUID())))),
        );
        assert.deepEqual(new Set(flood), new Set(["token_unknown_kid"]));
        assert.equal(idp.state.requests, 1);
      } finally {
        idp.close();
      }
    });
  }

  it("asks a failing issuer at most once per cooldown too, and keeps verifying with the keys it holds", async () => {
    mock.timers.enable({ apis: ["Date"], now: Date.now() });
    const idp = await issuer(serve(goodSet));
    try {
      const verifier = createJwtVerifier({
        issuer: ISSUER,
        audience: "a",
        jwks: {
          url: idp.url,
          fetch: createNodeJsonFetch({ maxAnswerBytes: 1024 * 1024 }),
          cooldownMs: 10_000,
        },
      });
      const good = await sign("good");
      assert.equal(await codeOf(verifier.verify(good)), "verified");
      idp.state.respond = serve({ error: "down" }, 503);
      mock.timers.tick(11_000);
      // One at a time: concurrent ones would share a reload anyway.
      const codes: string[] = [];
      for (let i = 0; i < 20; i++) codes.push(await codeOf(verifier.verify(await sign(randomUUID()))));
      assert.equal(idp.state.requests, 2, "one reload for the unknown kids of a cooldown, not one per token");
      // The issuer could not be asked: unavailable (503), never "unknown kid" (401), in the cooldown too.
      assert.deepEqual(new Set(codes), new Set(["jwks_unavailable"]));
      // The keys held are still fresh (cacheMaxAgeMs): a good token still verifies.
      assert.equal(await codeOf(verifier.verify(good)), "verified");
      mock.timers.tick(11_000);
      await codeOf(verifier.verify(await sign(randomUUID())));
      assert.equal(idp.state.requests, 3, "the next cooldown may ask again");
    } finally {
      idp.close();
    }
  });
});

describe("the remote key set against key sets that are not one", () => {
  const notKeySets: ReadonlyArray<[string, (response: ServerResponse) => void]> = [
    ["null", serve(null)],
    ["an array", serve([goodSet.keys[0]])],
    ["keys not an array", serve({ keys: goodSet.keys[0] })],
    ["no keys", serve({})],
    ["a key that is not an object", serve({ keys: ["good"] })],
    ["not JSON", (response) => response.writeHead(200).end("{keys:")],
    ["a 302 to a good set", (response) => response.writeHead(302, { location: "/jwks" }).end()],
    ["a 500 with a good set", serve(goodSet, 500)],
    [
      "a 101 upgrade",
      (response) =>
        response.socket?.write(
          "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n",
        ),
    ],
    ["a private key", serve({ keys: [{ ...goodSet.keys[0], d: "AAAA" }] })],
  ];
  for (const [name, fetch] of transports) {
    it(`refuses each as jwks_unavailable and never a prototype (${name})`, async () => {
      for (const [what, respond] of notKeySets) {
        const idp = await issuer(respond);
        try {
          const verifier = createJwtVerifier({
            issuer: ISSUER,
            audience: "a",
            jwks: { url: idp.url, fetch, timeoutMs: 2000 },
          });
          assert.equal(await codeOf(verifier.verify(await sign("good"))), "jwks_unavailable", what);
        } finally {
          idp.close();
        }
      }
      // `__proto__` in a key set is an own key of the parsed JSON: neither a key nor a pollution.
      const idp = await issuer((response) =>
        response
          .writeHead(200)
          .end(`{"__proto__":{"keys":[]},"keys":[{"__proto__":{"kid":"good"},"kty":"EC"}]}`),
      );
      try {
        const verifier = createJwtVerifier({ issuer: ISSUER, audience: "a", jwks: { url: idp.url, fetch } });
        assert.equal(await codeOf(verifier.verify(await sign("good"))), "token_unknown_kid");
        assert.equal(({} as { kid?: unknown }).kid, undefined);
        assert.equal(({} as { keys?: unknown }).keys, undefined);
      } finally {
        idp.close();
      }
    });
  }

  it("two keys answering one kid are refused, not one picked", async () => {
    const idp = await issuer(serve({ keys: [goodSet.keys[0], goodSet.keys[0]] }));
    try {
      const verifier = createJwtVerifier({
        issuer: ISSUER,
        audience: "a",
        jwks: { url: idp.url, fetch: createNodeJsonFetch({ maxAnswerBytes: 1024 * 1024 }) },
      });
      assert.equal(await codeOf(verifier.verify(await sign("good"))), "token_unknown_kid");
    } finally {
      idp.close();
    }
  });
});
