import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createTokenCache, type PasswordGrant } from "../../../src/clients/idp/token-cache.ts";
import { createIdpServer, type IdpServer } from "../../../src/servers/idp/index.ts";
import { ManagedError } from "../../../src/servers/managed/errors.ts";
import { managedPasswordGrant } from "../../../src/servers/managed/idp.ts";
import { silentLogger } from "./harness.ts";

describe("token cache over the real identity provider", () => {
  let idp: IdpServer;
  let grant: PasswordGrant;
  let grants = 0;
  const password = "cache-test-password";

  before(async () => {
    idp = await createIdpServer({
      scryptCost: { log2N: 10, r: 8, p: 1 },
      failureLimit: false,
      logger: silentLogger(),
      tokenLifetimeSec: 300,
    });
    const url = await idp.listen({ host: "127.0.0.1", port: 0 });
    await idp.directory.addServiceAccount({ username: "svc-cache", password, scopes: ["crypto"] });
    const real = managedPasswordGrant({ tokenUrl: `${url}/oauth2/token`, timeoutMs: 2000 });
    grant = (username, pw) => {
      grants++;
      return real(username, pw);
    };
  });
  after(() => idp.close());

  it("runs one password grant for many concurrent callers and reuses the token", async () => {
    grants = 0;
    const cache = createTokenCache(grant);
    const tokens = await Promise.all(Array.from({ length: 20 }, () => cache.get("svc-cache", password)));
    assert.equal(grants, 1);
    assert.equal(new Set(tokens).size, 1);
    assert.equal(await cache.get("svc-cache", password), tokens[0]);
    assert.equal(grants, 1);
  });

  it("refreshes shortly before expiry and after invalidation", async () => {
    grants = 0;
    let now = 0;
    const cache = createTokenCache(grant, { refreshBeforeExpirySec: 30, now: () => now });
    const first = await cache.get("svc-cache", password);
    now += 269_000;
    assert.equal(await cache.get("svc-cache", password), first);
    now += 2000;
    const second = await cache.get("svc-cache", password);
    assert.equal(grants, 2);
    assert.notEqual(second, first);
    cache.invalidate("svc-cache", password, first);
    assert.equal(await cache.get("svc-cache", password), second);
    cache.invalidate("svc-cache", password, second);
    await cache.get("svc-cache", password);
    assert.equal(grants, 3);
  });

  it("never serves a cached token for another password, and caches no failure", async () => {
    grants = 0;
    const cache = createTokenCache(grant);
    await cache.get("svc-cache", password);
    for (let i = 0; i < 2; i++) {
      await assert.rejects(cache.get("svc-cache", "wrong-password"), (error: unknown) => {
        assert.ok(error instanceof ManagedError);
        assert.equal(error.reason, "invalid_idp_credentials");
        assert.equal(error.message.includes("wrong-password"), false);
        return true;
      });
    }
    assert.equal(grants, 3);
  });
});
