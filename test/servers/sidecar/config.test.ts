import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ConfigError } from "../../../src/core/config-error.ts";
import { resolveSidecarConfig, sidecarSettings } from "../../../src/servers/sidecar/config.ts";
import { createSidecar, type SidecarOptions } from "../../../src/servers/sidecar/sidecar.ts";
import { sidecarTestOptions } from "../../helpers/sidecar-config.ts";

const minimal = {
  AUTHORITY_SIDECAR_TOKEN_FILE: "/var/run/secrets/authority/token",
};

describe("authority sidecar configuration", () => {
  test("the sidecar needs no store and no KEK, and has no setting that could give it one", () => {
    const config = resolveSidecarConfig({ env: minimal });
    const names = Object.values(sidecarSettings).map((setting) => setting.key);
    for (const forbidden of ["store", "kek", "kek-file"]) assert.ok(!names.includes(forbidden), forbidden);
    const envs = Object.values(sidecarSettings).map((setting) => setting.env);
    for (const forbidden of ["AUTHORITY_STORE_URL", "AUTHORITY_KEK", "AUTHORITY_KEK_FILE"])
      assert.ok(!envs.includes(forbidden), forbidden);
    assert.equal(JSON.stringify(config).includes("kek"), false);
    assert.equal(config.serviceIdentity, "authority");
    assert.equal(config.policyKeysFile, undefined);
    const pinned = resolveSidecarConfig({
      env: { ...minimal, AUTHORITY_SIDECAR_POLICY_KEYS_FILE: "/etc/authority/policy-keys.json" },
    });
    assert.equal(pinned.policyKeysFile, "/etc/authority/policy-keys.json");
  });

  test("defaults match docs/configuration.md", () => {
    const config = resolveSidecarConfig({ env: minimal });
    assert.equal(config.authorityUrl, "http://127.0.0.1:8080");
    assert.deepEqual(config.listen, {
      grpc: { host: "127.0.0.1", port: 9191 },
      proxy: { host: "127.0.0.1", port: 15101 },
      metrics: { host: "127.0.0.1", port: 9464 },
    });
    assert.equal(config.issuer, "http://127.0.0.1:8083");
    assert.equal(config.jwksUrl, "http://127.0.0.1:8083/.well-known/jwks.json");
    assert.equal(config.audience, "authority");
    assert.equal(config.redis, undefined);
    assert.equal(config.decisionTimeoutMs, 200);
    assert.equal(config.stalenessMs, 1000);
    assert.equal(config.policyTtlMs, 1000);
    assert.equal(config.maxResponseBytes, 1048576);
    assert.deepEqual(config.credentials, { kind: "token_file", path: "/var/run/secrets/authority/token" });
    assert.equal(config.auditMaxPending, 10_000);
  });

  test("the decision-record queue bound is configurable, within limits", () => {
    const env = { ...minimal, AUTHORITY_SIDECAR_AUDIT_MAX_PENDING: "50000" };
    assert.equal(resolveSidecarConfig({ env }).auditMaxPending, 50_000);
    assert.throws(
      () => resolveSidecarConfig({ env: { ...minimal, AUTHORITY_SIDECAR_AUDIT_MAX_PENDING: "10" } }),
      /audit-max-pending|AUDIT_MAX_PENDING/,
    );
  });

  test("createSidecar takes every setting from the configuration: one a root forgot fails at construction", () => {
    // Their defaults live in the schema only (decisions 2646, 2901): no silent second default.
    for (const name of ["stalenessMs", "policyTtlMs", "auditMaxPending", "journalMaxBytes"] as const) {
      const options: Partial<SidecarOptions> = { ...sidecarTestOptions() };
      delete options[name];
      assert.throws(
        () => createSidecar(options as SidecarOptions),
        new RegExp(`${name} must be a positive integer`),
      );
    }
    const { maxBytes: _, ...partial } = sidecarTestOptions().policyCache;
    assert.throws(
      () => createSidecar({ ...sidecarTestOptions(), policyCache: partial } as unknown as SidecarOptions),
      /policyCache\.maxBytes must be a positive integer/,
    );
  });

  test("flags win over the environment", () => {
    const config = resolveSidecarConfig({
      env: { ...minimal, AUTHORITY_SIDECAR_GRPC_LISTEN: "0.0.0.0:9000" },
      flags: { "grpc-listen": "127.0.0.1:9292", "staleness-ms": "500" },
    });
    assert.deepEqual(config.listen.grpc, { host: "127.0.0.1", port: 9292 });
    assert.equal(config.stalenessMs, 500);
  });

  test("Redis needs the cache key file; client credentials are an alternative to a token file", () => {
    assert.throws(
      () => resolveSidecarConfig({ env: { ...minimal, AUTHORITY_REDIS_URL: "redis://r:6379" } }),
      ConfigError,
    );
    const withRedis = resolveSidecarConfig({
      env: { ...minimal, AUTHORITY_REDIS_URL: "redis://r:6379", AUTHORITY_SIDECAR_CACHE_KEY_FILE: "/k" },
    });
    assert.deepEqual(withRedis.redis, { url: "redis://r:6379", cacheKeyFile: "/k" });
    const { AUTHORITY_SIDECAR_TOKEN_FILE: _ignored, ...noToken } = minimal;
    assert.throws(() => resolveSidecarConfig({ env: noToken }), /own credentials/);
    const viaGrant = resolveSidecarConfig({
      env: { ...noToken, AUTHORITY_CLIENT_ID: "sidecar", AUTHORITY_CLIENT_SECRET: "s3cret-value" },
    });
    assert.deepEqual(viaGrant.credentials, {
      kind: "client_credentials",
      tokenUrl: "http://127.0.0.1:8083/oauth2/token",
      clientId: "sidecar",
      clientSecret: "s3cret-value",
    });
  });

  test("malformed values are refused with the setting's name, never a secret's value", () => {
    assert.throws(
      () => resolveSidecarConfig({ env: { ...minimal, AUTHORITY_SIDECAR_PROXY_LISTEN: "nope" } }),
      /AUTHORITY_SIDECAR_PROXY_LISTEN/,
    );
    assert.throws(
      () => resolveSidecarConfig({ env: { ...minimal, AUTHORITY_SIDECAR_STALENESS_MS: "0" } }),
      /STALENESS/,
    );
    assert.throws(
      () => resolveSidecarConfig({ env: { ...minimal, AUTHORITY_REDIS_URL: "http://user:hunter2@r" } }),
      (error: Error) => !error.message.includes("hunter2"),
    );
  });

  test("no listener may take a port Istio's sidecar owns, in any mode", () => {
    for (const port of [15000, 15001, 15004, 15006, 15008, 15009, 15020, 15021, 15053, 15090]) {
      for (const [flag, env] of [
        ["--grpc-listen", "AUTHORITY_SIDECAR_GRPC_LISTEN"],
        ["--proxy-listen", "AUTHORITY_SIDECAR_PROXY_LISTEN"],
        ["--metrics-listen", "AUTHORITY_SIDECAR_METRICS_LISTEN"],
      ] as const) {
        assert.throws(
          () => resolveSidecarConfig({ env: { ...minimal, [env]: `127.0.0.1:${port}` } }),
          (error: unknown) =>
            error instanceof ConfigError &&
            error.message.includes(flag) &&
            error.message.includes(`port ${port}`) &&
            error.message.includes("Istio"),
        );
      }
    }
    // The default is outside Istio's 150xx range, and a neighbouring port is accepted.
    assert.equal(resolveSidecarConfig({ env: minimal }).listen.proxy.port, 15101);
    const env = { ...minimal, AUTHORITY_SIDECAR_PROXY_LISTEN: "127.0.0.1:15002" };
    assert.equal(resolveSidecarConfig({ env }).listen.proxy.port, 15002);
  });
});
