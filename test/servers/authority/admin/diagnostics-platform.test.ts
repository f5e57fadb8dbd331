import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { probeHttp, probeRedis } from "../../../../src/admin/platform-diagnostics.ts";
import { Kek } from "../../../../src/crypto/index.ts";
import { createJwtVerifier } from "../../../../src/identity/jwt-verifier.ts";
import { supportedProtocolVersions } from "../../../../src/mcp/protocol-server.ts";
import { createLogger } from "../../../../src/observability/logger.ts";
import { type CryptoServer, createCryptoServer } from "../../../../src/servers/crypto/index.ts";
import { createIdpServer } from "../../../../src/servers/idp/server.ts";
import { openStore } from "../../../../src/store/index.ts";
import type { Store } from "../../../../src/store/store.ts";
import { type RedisServerHandle, startRedisServer } from "../../../helpers/redis-server.ts";
import { stablePort } from "../../../helpers/stable-port.ts";
import { makeTempDir, type TempDir } from "../../../helpers/temp-dir.ts";
import { cast, type Harness, startHarness } from "./harness.ts";

const REDIS_PASSWORD = "redis-password-must-not-show";
const CRYPTO_PASSWORD = "crypto-userinfo-must-not-show";
const JWKS_TOKEN = "jwks-query-token-must-not-show";

describe("admin API: diagnostics of MCP, OAuth and platform resources", () => {
  let h: Harness;
  let t: Awaited<ReturnType<typeof cast>>;
  let redis: RedisServerHandle;
  let openRedis: RedisServerHandle;
  let crypto: CryptoServer;
  let cryptoUrl: string;
  let cryptoStore: Store;
  let dir: TempDir;
  let closedPort: number;

  before(async () => {
    dir = await makeTempDir("authority-diagnostics-");
    redis = await startRedisServer({ password: REDIS_PASSWORD });
    openRedis = await startRedisServer();
    cryptoStore = await openStore(`sqlite:${join(dir.path, "crypto.db")}`);
    const idp = await createIdpServer({ audience: "authority" });
    const issuer = await idp.listen();
    crypto = await createCryptoServer({
      store: cryptoStore,
      kek: Kek.generate().kek,
      verifier: createJwtVerifier({ issuer, audience: "authority", jwks: `${issuer}/.well-known/jwks.json` }),
      logger: createLogger("crypto-test", "silent"),
    });
    cryptoUrl = await crypto.listen({ host: "127.0.0.1", port: 0 });
    await idp.close();
    closedPort = await stablePort();
    const withPassword = new URL(cryptoUrl);
    withPassword.username = "svc";
    withPassword.password = CRYPTO_PASSWORD;
    h = await startHarness({
      platform: {
        redisUrl: redis.url,
        cryptoUrl: withPassword.toString(),
        cryptoInUse: true,
        managedUrl: `http://127.0.0.1:${closedPort}`,
        jwksUrl: `http://user:pw@127.0.0.1:${closedPort}/jwks.json?token=${JWKS_TOKEN}`,
      },
      mcp: { allowedOrigins: ["https://app.example.com"], upstreamTimeoutMs: 2500 },
    });
    t = await cast(h);
  });
  after(async () => {
    await h.close();
    await crypto.close();
    await cryptoStore.close();
    await redis.stop();
    await openRedis.stop();
    await dir.cleanup();
  });

  it("reports the MCP configuration", async () => {
    const r = await h.call("GET", "/admin/diagnostics", { token: t.auditor });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.body.mcp, {
      endpoint: "http://127.0.0.1:8080/mcp",
      protocol_versions: [...supportedProtocolVersions],
      latest_protocol_version: supportedProtocolVersions[0],
      allowed_origins: ["https://app.example.com"],
      upstream_timeout_ms: 2500,
      max_response_bytes: 1024 * 1024,
      scopes_supported: ["authority/mcp"],
      tool_cache_size: 1000,
    });
    assert.ok(r.body.mcp.protocol_versions.includes("2025-06-18"));
  });

  it("reports the OAuth configuration with the JWKS state the verifier saw", async () => {
    const r = await h.call("GET", "/admin/diagnostics", { token: t.admin });
    assert.equal(r.body.oauth.issuers.length, 1);
    const [issuer] = r.body.oauth.issuers;
    assert.equal(issuer.issuer, h.context.config.issuer);
    assert.deepEqual(issuer.audiences, ["authority"]);
    assert.equal(issuer.jwks_url, `http://127.0.0.1:${closedPort}/jwks.json`);
    // The admin's own token was verified against the key set: fetched, with its keys.
    assert.equal(issuer.jwks.source, "remote");
    assert.equal(issuer.jwks.state, "ok");
    assert.ok(issuer.jwks.key_count >= 1);
    assert.ok(!Number.isNaN(Date.parse(issuer.jwks.checked_at)));
  });

  it("reports the store, Redis, the crypto service and the managed API, probed", async () => {
    const r = await h.call("GET", "/admin/diagnostics", { token: t.admin });
    const resources = r.body.resources;
    assert.deepEqual(resources.store, { backend: "sqlite", ok: true });
    assert.deepEqual(resources.redis, {
      configured: true,
      url: `redis://127.0.0.1:${redis.port}`,
      reachable: true,
      detail: "authentication_required",
      version: null,
    });
    assert.equal(resources.crypto_service.url, cryptoUrl.endsWith("/") ? cryptoUrl : `${cryptoUrl}/`);
    assert.equal(resources.crypto_service.in_use, true);
    assert.equal(resources.crypto_service.reachable, true);
    assert.equal(resources.crypto_service.detail, "ok");
    assert.deepEqual(resources.managed_api, {
      configured: true,
      url: `http://127.0.0.1:${closedPort}`,
      reachable: false,
      detail: "connection_failed",
      version: null,
    });
    const codes = r.body.warnings.map((w: { code: string }) => w.code);
    assert.ok(!codes.includes("resource_unreachable"), "the managed API is not in use; the rest answer");
  });

  it("never shows a password, userinfo or query of a configured URL", async () => {
    const r = await h.call("GET", "/admin/diagnostics", { token: t.admin });
    for (const secret of [REDIS_PASSWORD, CRYPTO_PASSWORD, JWKS_TOKEN, "user:pw", "svc:"]) {
      assert.ok(!r.text.includes(secret), `diagnostics showed ${secret}`);
    }
  });

  it("says whether a Redis answers, with its version, and when it does not", async () => {
    const open = await probeRedis(openRedis.url);
    assert.deepEqual([open.reachable, open.detail], [true, "ok"]);
    assert.match(String(open.version), /^\d+\.\d+/);
    const closed = await probeRedis(`redis://127.0.0.1:${closedPort}`);
    assert.deepEqual(closed, { reachable: false, detail: "connection_failed", version: null });
    openRedis.pause();
    try {
      const frozen = await probeRedis(openRedis.url, 300);
      assert.deepEqual(frozen, { reachable: false, detail: "timeout", version: null });
    } finally {
      openRedis.resume();
    }
    const http = await probeHttp(`http://127.0.0.1:${closedPort}`, 300);
    assert.deepEqual(http, { reachable: false, detail: "connection_failed", version: null });
  });

  it("warns when a service in use does not answer, and says so for a JWKS that failed", async () => {
    await redis.stop();
    try {
      const r = await h.call("GET", "/admin/diagnostics", { token: t.admin });
      assert.equal(r.body.resources.redis.reachable, false);
      assert.ok(r.body.warnings.some((w: { code: string }) => w.code === "resource_unreachable"));
    } finally {
      await redis.start();
    }
    const verifier = createJwtVerifier({
      issuer: "http://127.0.0.1:1",
      audience: "authority",
      jwks: `http://127.0.0.1:${closedPort}/jwks.json`,
    });
    assert.equal(verifier.jwksStatus?.().state, "not_fetched");
    const idp = await createIdpServer({ audience: "authority" });
    await idp.listen();
    const token = (await idp.issueToken({ subject: "someone" })).accessToken;
    await idp.close();
    await assert.rejects(verifier.verify(token));
    const status = verifier.jwksStatus?.();
    assert.deepEqual([status?.state, status?.key_count], ["failed", null]);
  });

  it("stays for admins and auditors only", async () => {
    const r = await h.call("GET", "/admin/diagnostics", { token: t.acmeAdmin });
    assert.equal(r.status, 403);
  });
});
