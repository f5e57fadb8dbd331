import assert from "node:assert/strict";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { createWorkloadTokenService } from "../../src/bindings/workload-tokens.ts";
import { loadAuthorityConfig, resolveAuthorityConfig } from "../../src/config/authority.ts";
import { parseConfigText } from "../../src/config/file.ts";
import { ConfigError } from "../../src/core/config-error.ts";
import { authorityEgressPolicy } from "../../src/servers/authority/build.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

/**
 * The tests of other settings resolve the one-process mode, chosen explicitly: without it (or
 * the crypto service's settings) `serve` refuses to start (the policy-protection test below).
 */
function resolveTrial(inputs: Parameters<typeof resolveAuthorityConfig>[0]) {
  return resolveAuthorityConfig({
    ...inputs,
    env: { AUTHORITY_POLICY_PROTECTION: "embedded", ...inputs.env },
  });
}

describe("authority serve configuration", () => {
  let dir: TempDir;
  before(async () => {
    dir = await makeTempDir("config-");
  });
  after(() => dir.cleanup());

  test("egress-allow: CIDRs, address:port and host entries; nothing internal by default; own services refused", async () => {
    assert.deepEqual(resolveTrial({ env: {} }).egress.allow, []);
    const config = resolveTrial({
      env: { AUTHORITY_EGRESS_ALLOW: "10.0.0.0/8, 127.0.0.1:18080,[::1]:9000" },
      flags: { "crypto-url": "http://10.1.1.1:8082" },
    });
    assert.deepEqual(
      config.egress.allow.map((entry) => entry.text),
      ["10.0.0.0/8", "127.0.0.1:18080", "[::1]:9000"],
    );
    const policy = authorityEgressPolicy(config);
    assert.deepEqual(await policy.checkUrl("http://10.2.3.4/"), { ok: true });
    assert.deepEqual(await policy.checkUrl("http://127.0.0.1:18080/"), { ok: true });
    // The crypto service is inside the allowed range but is the platform's own service.
    assert.deepEqual(await policy.checkUrl("http://10.1.1.1:8082/"), {
      ok: false,
      rule: "platform_service",
      resolved: false,
    });
    // So is the default IdP and the authority's own listen address.
    for (const url of ["http://127.0.0.1:8083/oauth2/token", "http://127.0.0.1:8080/"]) {
      assert.equal((await policy.checkUrl(url)).ok, false, url);
    }
    for (const bad of ["*.orders.internal:443", "10.0.0.1/8", "127.1:80", "*"]) {
      assert.throws(
        () => resolveTrial({ env: { AUTHORITY_EGRESS_ALLOW: bad } }),
        (error: unknown) =>
          error instanceof ConfigError && error.message.startsWith("AUTHORITY_EGRESS_ALLOW"),
        bad,
      );
    }
  });

  test("defaults follow docs/configuration.md", () => {
    const config = resolveTrial({ env: {}, cwd: "/srv" });
    assert.deepEqual(config.listen, { host: "127.0.0.1", port: 8080 });
    assert.equal(config.publicUrl, "http://127.0.0.1:8080");
    assert.equal(config.issuer, "http://127.0.0.1:8083");
    assert.equal(config.jwksUrl, "http://127.0.0.1:8083/.well-known/jwks.json");
    assert.equal(config.audience, "authority");
    assert.equal(config.stateDir, "/srv/.authority");
    assert.equal(config.storeUrl, "sqlite:/srv/.authority/authority.db");
    assert.equal(config.kek.file, "/srv/.authority/kek");
    // No silent new master key: a missing KEK file is an error unless --init-kek asks for one.
    assert.equal(config.kek.createIfMissing, false);
    assert.equal(config.logLevel, "info");
    assert.equal(config.auditBuffer, 100_000);
    assert.deepEqual(config.policyCache, { max: 10_000, ttlMs: 300_000 });
    assert.equal(config.shutdownTimeoutMs, 10_000);
    assert.deepEqual(config.parameterScoping, { enabled: false, partnerAllowlist: [] });
  });

  test("flags win over the environment, which wins over the file", () => {
    const config = resolveTrial({
      flags: { listen: "0.0.0.0:9000" },
      env: {
        AUTHORITY_LISTEN: "127.0.0.1:1",
        AUTHORITY_AUDIENCE: "from-env",
        AUTHORITY_PARAMETER_SCOPING: "yes",
      },
      file: {
        listen: "127.0.0.1:2",
        audience: "from-file",
        issuer: "https://idp.example.com/",
        "audit-buffer": 50,
      },
      fileName: "authority.yaml",
    });
    assert.deepEqual(config.listen, { host: "0.0.0.0", port: 9000 });
    assert.equal(config.audience, "from-env");
    assert.equal(config.issuer, "https://idp.example.com");
    assert.equal(config.jwksUrl, "https://idp.example.com/.well-known/jwks.json");
    assert.equal(config.auditBuffer, 50);
    assert.equal(config.parameterScoping.enabled, true);
    assert.equal(config.sources.listen, "flag");
    assert.equal(config.sources.audience, "env");
    assert.equal(config.sources.issuer, "file");
    assert.equal(config.sources["public-url"], "default");
  });

  test("a KEK is generated only on --init-kek, and never for a shared (Redis) store", () => {
    const config = resolveTrial({ env: { AUTHORITY_STORE_URL: "redis://127.0.0.1:6390/2" } });
    assert.equal(config.kek.createIfMissing, false);
    assert.equal(resolveTrial({ flags: { "init-kek": "true" } }).kek.createIfMissing, true);
    assert.throws(
      () =>
        resolveTrial({
          flags: { "init-kek": "true" },
          env: { AUTHORITY_STORE_URL: "redis://127.0.0.1:6390/2" },
        }),
      /--init-kek is only for the embedded SQLite store/,
    );
  });

  test("policy protection: crypto by default, refused at start without the crypto service's settings; embedded only when chosen", () => {
    // Nothing set: no silent fallback to holding every key; the message names both ways out.
    for (const inputs of [{ env: {} }, { env: { AUTHORITY_POLICY_PROTECTION: "crypto" } }]) {
      assert.throws(
        () => resolveAuthorityConfig(inputs),
        (error: Error) =>
          /--crypto-credentials-file \(AUTHORITY_CRYPTO_CREDENTIALS_FILE\)/.test(error.message) &&
          /--crypto-url/.test(error.message) &&
          /--policy-protection embedded \(AUTHORITY_POLICY_PROTECTION=embedded\)/.test(error.message),
      );
    }
    assert.throws(
      () => resolveAuthorityConfig({ flags: { "policy-protection": "managed" } }),
      /--policy-protection managed needs the crypto service: --crypto-credentials-file .*--managed-url/,
    );
    assert.deepEqual(
      resolveAuthorityConfig({ flags: { "policy-protection": "embedded" } }).policyProtection,
      {
        mode: "embedded",
      },
    );
    const crypto = resolveAuthorityConfig({
      env: { AUTHORITY_CRYPTO_CREDENTIALS_FILE: "/var/run/secrets/authority/crypto.json" },
      cwd: "/srv",
    });
    assert.deepEqual(crypto.policyProtection, {
      mode: "crypto",
      credentialsFile: "/var/run/secrets/authority/crypto.json",
      tokenUrl: "http://127.0.0.1:8083/oauth2/token",
    });
    assert.deepEqual(
      resolveAuthorityConfig({
        flags: { "policy-protection": "embedded", "crypto-credentials-file": "/x.json" },
      }).policyProtection,
      { mode: "embedded" },
    );
    // The crypto service keeps every key: a master key handed to this mode is a mistake, said at start.
    for (const extra of [{ flags: { "init-kek": "true" } }, { env: { AUTHORITY_KEK: "a".repeat(44) } }]) {
      assert.throws(
        () =>
          resolveAuthorityConfig({
            flags: { "crypto-credentials-file": "/x.json", ...("flags" in extra ? extra.flags : {}) },
            env: "env" in extra ? extra.env : {},
          }),
        (error: Error) =>
          /holds no key-encryption key/.test(error.message) && !error.message.includes("aaaa"),
      );
    }
  });

  test("invalid values name the setting and where it came from, never a secret value", () => {
    const cases: Array<[Parameters<typeof resolveAuthorityConfig>[0], RegExp]> = [
      [{ flags: { listen: "nope" } }, /--listen must be host:port/],
      [{ env: { AUTHORITY_ISSUER: "ftp://x" } }, /AUTHORITY_ISSUER must be an absolute http\(s\) URL/],
      [{ env: { AUTHORITY_LOG_LEVEL: "loud" } }, /AUTHORITY_LOG_LEVEL must be one of/],
      [{ file: { "body-limit": "12" }, fileName: "c.yaml" }, /body-limit in c.yaml must be an integer/],
      [{ file: { listen: { host: "x" } } }, /must be a string, number or boolean/],
      [{ file: { lisen: "127.0.0.1:1" }, fileName: "c.yaml" }, /c.yaml has unknown settings: lisen/],
      [{ file: { kek: "c2VjcmV0" } }, /unknown settings: kek/],
    ];
    for (const [inputs, message] of cases) {
      assert.throws(
        () => resolveTrial(inputs),
        (error: unknown) => {
          assert.ok(error instanceof ConfigError);
          assert.match(error.message, message);
          return true;
        },
      );
    }
    assert.throws(
      () => resolveTrial({ env: { AUTHORITY_STORE_URL: "mysql://user:hunter2@db" } }),
      (error: unknown) => error instanceof ConfigError && !error.message.includes("hunter2"),
    );
  });

  test("a setting's bound is the component's: a workload-token lifetime the service refuses is refused as a setting", () => {
    // Before: the setting took up to 86400 s and the token service then threw at start-up
    // (a TypeError naming no flag) for anything past 3600 s.
    assert.throws(
      () => resolveTrial({ flags: { "workload-token-lifetime": "7200" } }),
      (error: unknown) => error instanceof ConfigError && /--workload-token-lifetime/.test(error.message),
    );
    const longest = resolveTrial({ flags: { "workload-token-lifetime": "3600" } }).bindings
      .workloadTokenLifetimeSec;
    assert.equal(longest, 3600);
    const keys = { current: () => Promise.reject(new Error("not used")) } as never;
    assert.doesNotThrow(() =>
      createWorkloadTokenService({ keys, issuer: "https://a.example", lifetimeSec: longest }),
    );
  });

  test("loads a YAML file named by AUTHORITY_CONFIG_FILE and a JSON file named by --config", async () => {
    const yamlPath = join(dir.path, "authority.yaml");
    await writeFile(
      yamlPath,
      "listen: 127.0.0.1:7000\npolicy-cache-ttl: 30\nparameter-scoping-partners: a, b\npolicy-protection: embedded\n",
    );
    const fromYaml = await loadAuthorityConfig({ env: { AUTHORITY_CONFIG_FILE: yamlPath } });
    assert.equal(fromYaml.listen.port, 7000);
    assert.equal(fromYaml.policyCache.ttlMs, 30_000);
    assert.deepEqual(fromYaml.parameterScoping.partnerAllowlist, ["a", "b"]);
    const jsonPath = join(dir.path, "authority.json");
    await writeFile(jsonPath, JSON.stringify({ audience: "json-aud", "policy-protection": "embedded" }));
    const fromJson = await loadAuthorityConfig({ flags: { config: jsonPath }, env: {} });
    assert.equal(fromJson.audience, "json-aud");
    await assert.rejects(
      loadAuthorityConfig({ flags: { config: join(dir.path, "missing.yaml") }, env: {} }),
      ConfigError,
    );
  });

  test("config text must be a mapping", () => {
    assert.deepEqual(parseConfigText("", "x.yaml"), {});
    assert.throws(() => parseConfigText("- a\n- b\n", "x.yaml"), ConfigError);
    assert.throws(() => parseConfigText("{", "x.json"), /not valid JSON/);
  });

  test("a parse error names the line and column, never the content", () => {
    assert.throws(
      () => parseConfigText("listen: 127.0.0.1:8080\nstore: [sqlite:x\n  secret: s3cr3t }\n", "a.yaml"),
      (error: unknown) => {
        assert.ok(error instanceof ConfigError);
        assert.match(error.message, /^a\.yaml:2:9 is not valid YAML$/);
        return true;
      },
    );
    assert.throws(
      () => parseConfigText('{\n  "listen": [1,\n', "b.json"),
      /^ConfigError: b\.json:\d+:\d+ is not valid JSON$/,
    );
  });
});
