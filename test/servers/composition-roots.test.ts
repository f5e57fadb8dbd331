/**
 * Every process is built by its composition root from a validated configuration, with the
 * overrides tests use, and the result serves: `authority serve` (buildAuthorityService),
 * `authority sidecar` (buildSidecar) against that authority, `authority crypto`
 * (buildCryptoService), `authority managed` (buildManagedService), `authority idp`
 * (createIdpServer) and `authority inject` (createWebhookServer). The authority's services
 * exist once per process — one decision runtime, one client-credentials token cache — and
 * two authorities in one process share none of them.
 */
import assert from "node:assert/strict";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { decodeJwt } from "jose";
import pkg from "../../package.json" with { type: "json" };
import { resolveAuthorityConfig } from "../../src/config/authority.ts";
import { resolveCryptoConfig } from "../../src/config/crypto.ts";
import { resolveIdpConfig } from "../../src/config/idp.ts";
import { resolveManagedConfig } from "../../src/config/managed.ts";
import { createLogger } from "../../src/observability/logger.ts";
import { createLocalPolicyProtector } from "../../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../../src/policy/process-key-rings.ts";
import { type AuthorityService, buildAuthorityService } from "../../src/servers/authority/build.ts";
import { buildCryptoService } from "../../src/servers/crypto/build.ts";
import { createIdpServer, type IdpServer } from "../../src/servers/idp/server.ts";
import { parseSidecarSettings } from "../../src/servers/inject/settings.ts";
import { createWebhookServer } from "../../src/servers/inject/webhook-server.ts";
import { buildManagedService } from "../../src/servers/managed/build.ts";
import { createDevCertificate } from "../../src/servers/managed/dev-certificate.ts";
import { buildSidecar } from "../../src/servers/sidecar/build.ts";
import { resolveSidecarConfig } from "../../src/servers/sidecar/config.ts";
import type { WorkloadClientRecord } from "../../src/store/binding-model.ts";
import { openStore } from "../../src/store/index.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";
import { httpsRequest, selfSignedCert } from "./inject/tls.ts";

const silent = createLogger("composition-test", "silent");

const workloadClient: WorkloadClientRecord = {
  client_id: "wc_composition",
  binding_id: "composition-app",
  partner_id: "acme",
  name: "composition",
  scopes: ["authority/bindings.invoke"],
  secret_hash: "unused",
  status: "active",
  created_at: new Date().toISOString(),
  revoked_at: null,
};

describe("composition roots: each process built from its validated configuration", () => {
  let dir: TempDir;
  let idp: IdpServer;
  let issuer: string;
  let authority: AuthorityService;
  let authorityUrl: string;

  before(async () => {
    dir = await makeTempDir("composition-");
    idp = await createIdpServer({ audience: "authority", logger: silent });
    issuer = await idp.listen();
    // `authority serve` as the CLI builds it: configuration only (store, KEK, issuer), a
    // binding setting, and the logger as the one override.
    const config = resolveAuthorityConfig({
      flags: {
        listen: "127.0.0.1:0",
        store: `sqlite:${join(dir.path, "authority.db")}`,
        "kek-file": join(dir.path, "kek"),
        "init-kek": "true",
        "policy-protection": "embedded",
        issuer,
        "service-identity": "composition",
        "workload-token-lifetime": "120",
      },
      env: {},
    });
    authority = await buildAuthorityService(config, { logger: silent });
    authorityUrl = await authority.listen();
  });

  after(async () => {
    await authority?.close();
    await idp?.close();
    await dir?.cleanup();
  });

  it("authority: serves, and builds each shared service once, from the configuration", async () => {
    const ready = await fetch(`${authorityUrl}/readyz`);
    assert.equal(ready.status, 200);
    const admin = (await idp.issueToken({ subject: "composition-admin", roles: ["admin"] })).accessToken;
    const partners = await fetch(`${authorityUrl}/partners`, {
      headers: { authorization: `Bearer ${admin}` },
    });
    assert.equal(partners.status, 200, "the configured issuer's tokens are accepted");

    const services = authority.context;
    assert.equal(services.bindings.decisions, services.decisions, "one decision runtime per process");
    assert.equal(authority.runtime, services.decisions);
    assert.equal(services.decisions.recorder, authority.recorder, "one audit recorder per process");
    assert.equal(
      services.bindings.executor.clientCredentials,
      services.clientCredentials,
      "the binding executor uses the process's one client-credentials token cache",
    );
    // A binding setting of the configuration (--workload-token-lifetime) reaches the runtime the routes use.
    const issued = await services.bindings.tokens.issue(workloadClient, ["authority/bindings.invoke"]);
    assert.equal(issued.expires_in, 120);
    const claims = decodeJwt(issued.access_token);
    assert.equal((claims.exp ?? 0) - (claims.iat ?? 0), 120);
  });

  it("authority: a second one in the same process, built with overrides, shares nothing with the first", async () => {
    const store = await openStore(`sqlite:${join(dir.path, "second.db")}`);
    const keyRings = createProcessKeyRings();
    const fixed = new Date("2030-01-02T03:04:05Z");
    const config = resolveAuthorityConfig({
      flags: {
        listen: "127.0.0.1:0",
        issuer,
        "service-identity": "composition",
        "policy-protection": "embedded",
      },
      env: {},
    });
    const second = await buildAuthorityService(config, {
      store,
      keyRings,
      protector: createLocalPolicyProtector({ keyRings, serviceIdentity: "composition" }),
      logger: silent,
      now: () => fixed,
      platform: null,
    });
    try {
      const url = await second.listen();
      assert.equal((await fetch(`${url}/readyz`)).status, 200);
      // Seen through the view that stores waiting decision records before a log read (decision 2931).
      await second.context.store.put("composition_probe", "one", { ok: true });
      assert.deepEqual(
        await store.get("composition_probe", "one"),
        { ok: true },
        "the overriding store is used",
      );
      assert.equal(second.context.now().toISOString(), fixed.toISOString(), "the overriding clock is used");
      assert.equal(second.context.platform, undefined);
      for (const name of ["decisions", "bindings", "mcp", "clientCredentials", "signedPolicies"] as const) {
        assert.notEqual(
          second.context[name],
          authority.context[name],
          `${name} is per process root, not shared`,
        );
      }
      const issued = await second.context.bindings.tokens.issue(workloadClient, [
        "authority/bindings.invoke",
      ]);
      assert.equal(issued.expires_in, 300, "the default lifetime: the first root's setting did not leak");
    } finally {
      await second.close();
      await store.close();
    }
  });

  it("sidecar: from its configuration (token file, trusted issuer), ready against the authority", async () => {
    const tokenFile = join(dir.path, "sidecar-token");
    const token = (
      await idp.issueToken({
        subject: "composition-sidecar",
        roles: ["sidecar", "sidecar_platform"],
        lifetimeSec: 900,
      })
    ).accessToken;
    await writeFile(tokenFile, token, { mode: 0o600 });
    const config = resolveSidecarConfig({
      flags: {
        "authority-url": authorityUrl,
        "grpc-listen": "127.0.0.1:0",
        "proxy-listen": "127.0.0.1:0",
        "metrics-listen": "127.0.0.1:0",
        "token-file": tokenFile,
        issuer,
        "service-identity": "composition",
        "journal-dir": join(dir.path, "sidecar-journal"),
      },
      env: {},
    });
    const sidecar = await buildSidecar(config, { logger: silent });
    try {
      const ports = await sidecar.start();
      assert.equal(
        await sidecar.whenReady(20_000),
        true,
        "JWKS fetched, credentials proven, decision path checked",
      );
      const ready = await fetch(`http://127.0.0.1:${ports.metrics}/readyz`);
      assert.equal(ready.status, 200);
      // The callers' JWKS of the configured issuers is fetched before ready, not by the first Check.
      const { checks } = (await ready.json()) as { checks: Record<string, boolean> };
      assert.equal(checks.jwks, true, JSON.stringify(checks));
    } finally {
      await sidecar.close({ graceMs: 0 });
    }
  });

  it("crypto: from its configuration alone (store, KEK, verifier), and close() closes what it opened", async () => {
    const config = resolveCryptoConfig({
      flags: {
        listen: "127.0.0.1:0",
        "state-dir": join(dir.path, "crypto"),
        "init-kek": "true",
        issuer,
        "log-level": "silent",
      },
      env: {},
    });
    const crypto = await buildCryptoService(config, { logger: silent });
    const url = await crypto.listen();
    assert.equal((await fetch(`${url}/readyz`)).status, 200);
    await crypto.close();
    assert.equal((await crypto.store.health()).ok, false, "the store the root opened is closed");
  });

  it("managed: from its configuration with the TLS material overridden", async () => {
    const certificate = await createDevCertificate();
    const config = resolveManagedConfig({
      flags: {
        listen: "127.0.0.1:0",
        "state-dir": join(dir.path, "managed"),
        "idp-token-url": `${issuer}/oauth2/token`,
        "crypto-url": "http://127.0.0.1:9",
        "upstream-timeout-ms": "1000",
        "log-level": "silent",
      },
      env: {},
    });
    const managed = await buildManagedService(config, {
      https: { key: certificate.key, cert: certificate.cert },
      logger: silent,
    });
    try {
      const url = await managed.listen();
      const health = await httpsRequest(`${url}/healthz`, { ca: certificate.cert });
      assert.equal(health.status, 200);
    } finally {
      await managed.close();
    }
  });

  it("idp and inject: their server constructors are their roots (validated options in, nothing shared)", async () => {
    const idpConfig = resolveIdpConfig({ flags: { listen: "127.0.0.1:0", "log-level": "silent" }, env: {} });
    const second = await createIdpServer({ ...idpConfig.server, logger: silent });
    const tls = await selfSignedCert();
    const injector = createWebhookServer({
      tls,
      settings: parseSidecarSettings({}, { image: "authority:test", version: pkg.version }),
      logger: silent,
    });
    try {
      const idpUrl = await second.listen({ host: idpConfig.host, port: idpConfig.port });
      assert.equal((await fetch(`${idpUrl}/.well-known/jwks.json`)).status, 200);
      assert.notEqual(second.issuer, idp.issuer, "a second IdP has its own issuer and keys");
      const { url } = await injector.listen("127.0.0.1", 0);
      assert.equal((await httpsRequest(`${url}/healthz`, { ca: tls.cert })).status, 200);
    } finally {
      await injector.close();
      await second.close();
    }
  });
});
