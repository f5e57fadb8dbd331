import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { reprotectPolicies } from "../../../src/admin/reprotect.ts";
import { CryptoClientError, createCryptoClient } from "../../../src/clients/crypto-service/client.ts";
import { resolveAuthorityConfig } from "../../../src/config/authority.ts";
import { loadKek } from "../../../src/crypto/index.ts";
import { createLogger } from "../../../src/observability/logger.ts";
import { createLocalPolicyProtector } from "../../../src/policy/local-protector.ts";
import { createStoredKeyRings } from "../../../src/policy/stored-key-rings.ts";
import { type AuthorityService, buildAuthorityService } from "../../../src/servers/authority/build.ts";
import { createDevCertificate } from "../../../src/servers/managed/dev-certificate.ts";
import { createManagedServer, type ManagedServer } from "../../../src/servers/managed/server.ts";
import { type RestartableCrypto, startRestartableCrypto } from "../../helpers/crypto-service.ts";
import { egressAllowValue } from "../../helpers/egress.ts";
import { type HttpReply, httpRequest } from "../../helpers/http-client.ts";
import { createLogCapture } from "../../helpers/log-capture.ts";
import { type RestartableIdp, startRestartableIdp } from "../../helpers/restartable-idp.ts";
import { makeTempDir, type TempDir } from "../../helpers/temp-dir.ts";
import { itemsOpenApi, startTestUpstream, type TestUpstream } from "../../helpers/upstream-api.ts";

/**
 * Onboarding in the custody modes without a restart or a file edit (decision 2513): the
 * credentials file holds the service identity's credentials only; creating a
 * subject_credentials_v1 subject provisions its owner at the crypto service, delegated to the
 * service identity, which acts for it (`act_as`); assign, allow, rotate, revoke and delete run
 * through the admin API alone. A missing or foreign owner is a specific 503
 * (`subject_keys_unavailable`) shown in readiness and diagnostics, never a bare one; and the
 * crypto service lets no one but the delegate act for the owner.
 */
for (const mode of ["crypto", "managed"] as const) {
  describe(`subject owners provisioned by the authority (${mode} mode)`, () => {
    const SERVICE = "custody-onboard";
    const PARTNER = "acme";
    const SERVICE_ACCOUNT = { username: "authority-svc", password: `pw-${randomBytes(12).toString("hex")}` };
    const logs = createLogCapture("silent");
    const keys = () => ({
      apiKey: `apk_${randomBytes(12).toString("hex")}`,
      accessKey: `ak_${randomBytes(12).toString("hex")}`,
      secretKey: `sk_${randomBytes(12).toString("hex")}`,
    });
    const serviceKeys = keys();
    const otherServiceKeys = keys();
    const partnerOwnerKeys = keys();
    let dir: TempDir;
    let idp: RestartableIdp;
    let crypto: RestartableCrypto;
    let managed: ManagedServer | undefined;
    let upstream: TestUpstream;
    let built: AuthorityService;
    let url: string;
    let credentialsFile: string;
    let config: ReturnType<typeof resolveAuthorityConfig>;
    /** The custody settings of this mode (crypto service, credentials file, managed API). */
    const custodyFlags: Record<string, string> = {};

    const token = async (subject: string, roles: string[] = []) =>
      (await idp.server().issueToken({ subject, roles, lifetimeSec: 3600 })).accessToken;
    const call = async (method: string, path: string, body?: unknown, bearer?: string, base = url) =>
      httpRequest(`${base}${path}`, {
        method,
        headers: bearer === undefined ? {} : { authorization: `Bearer ${bearer}` },
        ...(body === undefined ? {} : { json: body }),
        timeoutMs: 20_000,
      });
    const admin = async (method: string, path: string, body: unknown, status: number): Promise<HttpReply> => {
      const reply = await call(method, path, body, await token("root-admin", ["admin"]));
      assert.equal(reply.status, status, `${method} ${path}: ${reply.text}`);
      return reply;
    };
    const createAgent = (id: string) =>
      admin(
        "POST",
        `/partners/${PARTNER}/users`,
        { subject_id: id, subject_type: "agent", display_name: id },
        201,
      );
    const assign = (id: string) =>
      admin(
        "PUT",
        `/partners/${PARTNER}/caab/subjects/${id}/policies/items`,
        { allowed_permission_ids: ["items:get:/items/{itemId}"], ttl_seconds: 3600 },
        200,
      );
    const authorize = async (id: string) =>
      call(
        "POST",
        "/v1/authorize-invocation",
        { subject: { subject_id: id }, capability_id: "items", method: "GET", path: "/items/7" },
        await token(id),
      );
    before(async () => {
      dir = await makeTempDir("subject-custody-");
      idp = await startRestartableIdp({
        dir: dir.path,
        name: "idp",
        audience: "authority",
        logs,
        setup: (server) => server.directory.addServiceAccount({ ...SERVICE_ACCOUNT, scopes: [] }),
      });
      crypto = await startRestartableCrypto({
        dir: dir.path,
        logs,
        issuer: idp.issuer,
        jwksUri: idp.jwksUri,
      });
      await crypto
        .server()
        .provisionOwner({ id: `service:${SERVICE}`, kind: "service", credentials: serviceKeys });
      await crypto
        .server()
        .provisionOwner({ id: "service:other", kind: "service", credentials: otherServiceKeys });
      await crypto
        .server()
        .provisionOwner({ id: "partner-globex", kind: "partner", credentials: partnerOwnerKeys });
      // An owner the operator made, not delegated to this authority.
      await crypto.server().provisionOwner({ id: "subject:squatted", kind: "subject" });
      credentialsFile = join(dir.path, "crypto-credentials.json");
      await writeFile(
        credentialsFile,
        JSON.stringify({
          ...SERVICE_ACCOUNT,
          api_key: serviceKeys.apiKey,
          access_key: serviceKeys.accessKey,
          secret_key: serviceKeys.secretKey,
        }),
        { mode: 0o600 },
      );
      const flags = custodyFlags;
      if (mode === "managed") {
        const certificate = await createDevCertificate();
        managed = await createManagedServer({
          idpTokenUrl: idp.tokenEndpoint,
          cryptoUrl: crypto.url,
          upstreamTimeoutMs: 5000,
          https: { key: certificate.key, cert: certificate.cert },
          rateLimit: { perUserPerMinute: 1_000_000, burst: 100_000 },
          logger: logs.logger("managed"),
        });
        flags["managed-url"] = await managed.listen({ host: "127.0.0.1", port: 0 });
        const caFile = join(dir.path, "managed-ca.pem");
        await writeFile(caFile, certificate.cert);
        flags["managed-ca-file"] = caFile;
      }
      upstream = await startTestUpstream();
      Object.assign(flags, {
        "policy-protection": mode,
        "crypto-url": crypto.url,
        "crypto-credentials-file": credentialsFile,
      });
      config = resolveAuthorityConfig({
        flags: {
          ...flags,
          "state-dir": join(dir.path, "state"),
          listen: "127.0.0.1:0",
          issuer: idp.issuer,
          "service-identity": SERVICE,
          "record-cache-ms": "0",
          "egress-allow": egressAllowValue(upstream.url),
        },
        env: {},
      });
      built = await buildAuthorityService(config, { logger: createLogger("authority", "silent") });
      url = await built.listen();
      await admin("POST", "/partners", { partner_id: PARTNER, name: "Acme" }, 201);
      await admin(
        "PUT",
        `/partners/${PARTNER}/caab/auth-profiles/items-key`,
        {
          type: "static",
          kind: "api_key",
          in: "header",
          name: "x-api-key",
          secret: "upstream-secret-0123456789",
        },
        201,
      );
      await admin(
        "POST",
        `/partners/${PARTNER}/api-specs/import-openapi`,
        {
          capability_id: "items",
          name: "Items",
          document: itemsOpenApi(),
          upstream_base_url: upstream.url,
          auth_profile_ref: "items-key",
        },
        201,
      );
    });

    after(async () => {
      await built?.close();
      await managed?.close();
      await upstream?.close();
      await crypto?.close();
      await idp?.stop();
      await dir?.cleanup();
    });

    test("create, assign, allow, rotate, revoke, delete: no restart, no file edited", async () => {
      const fileBefore = await readFile(credentialsFile, "utf8");
      await createAgent("agent-1");
      assert.ok(await crypto.server().hasOwner("subject:agent-1"), "the owner is provisioned at creation");
      const firstKeys = await crypto.server().publicKeys("subject:agent-1");
      await assign("agent-1");
      const allowed = await authorize("agent-1");
      assert.equal(allowed.status, 200, allowed.text);
      assert.equal(allowed.json.status, "allowed");

      const rotated = await admin("POST", `/partners/${PARTNER}/users/agent-1/rotate-keys`, undefined, 200);
      assert.equal(rotated.json.subject_id, "agent-1");
      const rotatedKeys = await crypto.server().publicKeys("subject:agent-1");
      assert.equal(rotatedKeys.keys.length, firstKeys.keys.length + 1, "new current keys, the old kept");
      assert.equal((await authorize("agent-1")).json.status, "allowed", "the stored policy still opens");
      await assign("agent-1");
      assert.equal((await authorize("agent-1")).json.status, "allowed", "a policy under the new keys");

      await admin("POST", `/partners/${PARTNER}/caab/subjects/agent-1/policy/revoke`, {}, 200);
      const revoked = await authorize("agent-1");
      assert.notEqual(revoked.json.status, "allowed", revoked.text);

      await admin("DELETE", `/partners/${PARTNER}/users/agent-1`, undefined, 204);
      assert.equal(await crypto.server().hasOwner("subject:agent-1"), false, "the owner is retired");
      assert.equal(await readFile(credentialsFile, "utf8"), fileBefore);
    });

    test("a subject created while its owner cannot be made is refused, specifically", async () => {
      const reply = await call(
        "POST",
        `/partners/${PARTNER}/users`,
        { subject_id: "squatted", subject_type: "agent", display_name: "squatted" },
        await token("root-admin", ["admin"]),
      );
      assert.equal(reply.status, 503, reply.text);
      assert.equal(reply.json.error, "subject_keys_unavailable");
      assert.doesNotMatch(reply.text, /apk_|ak_|sk_/);
      await admin("GET", `/partners/${PARTNER}/users/squatted`, undefined, 404);
    });

    test("an owner gone behind the authority's back: a specific 503, in readiness and diagnostics, mended by rotate-keys", async () => {
      await createAgent("agent-2");
      await assign("agent-2");
      assert.equal((await authorize("agent-2")).json.status, "allowed");
      // The crypto service's operator deletes the owner (its keys are gone with it).
      const client = createCryptoClient({ baseUrl: crypto.url });
      await client.delegatedOwner(
        { token: await token(SERVICE_ACCOUNT.username), ...serviceKeys },
        "subject:agent-2",
        "retire",
      );
      // A replica that has not opened the policy yet (the first one keeps what it verified).
      const replica = await buildAuthorityService(
        { ...config, auditChain: { ...config.auditChain, replicaId: "custody-replica-2" } },
        { logger: createLogger("replica", "silent") },
      );
      try {
        const replicaUrl = await replica.listen();
        const refused = await call(
          "POST",
          "/v1/authorize-invocation",
          { subject: { subject_id: "agent-2" }, capability_id: "items", method: "GET", path: "/items/7" },
          await token("agent-2"),
          replicaUrl,
        );
        assert.equal(refused.status, 503, refused.text);
        assert.match(refused.text, /subject_keys_unavailable/);
        const ready = await call("GET", "/readyz", undefined, undefined, replicaUrl);
        assert.equal(ready.status, 200, "one subject does not take the service out of rotation");
        assert.equal(ready.json.subject_keys.unusable, 1);
        const diagnostics = await call(
          "GET",
          "/admin/diagnostics",
          undefined,
          await token("root-admin", ["admin"]),
          replicaUrl,
        );
        const warning = (diagnostics.json.warnings as Array<{ code: string; subject_id?: string }>).find(
          (w) => w.code === "subject_keys_unavailable",
        );
        assert.equal(warning?.subject_id, "agent-2", diagnostics.text);

        const mended = await call(
          "POST",
          `/partners/${PARTNER}/users/agent-2/rotate-keys`,
          undefined,
          await token("root-admin", ["admin"]),
          replicaUrl,
        );
        assert.equal(mended.status, 200, mended.text);
        assert.ok(await crypto.server().hasOwner("subject:agent-2"));
        assert.equal(
          (await call("GET", "/readyz", undefined, undefined, replicaUrl)).json.subject_keys.unusable,
          0,
        );
      } finally {
        await replica.close();
      }
      await assign("agent-2");
      assert.equal((await authorize("agent-2")).json.status, "allowed");
    });

    test("an embedded installation moves into custody with reprotect, without losing a policy", async () => {
      const stateDir = join(dir.path, "embedded-state");
      const embeddedFlags = {
        "state-dir": stateDir,
        listen: "127.0.0.1:0",
        issuer: idp.issuer,
        "service-identity": SERVICE,
        "record-cache-ms": "0",
        "egress-allow": egressAllowValue(upstream.url),
      };
      const kekFile = join(dir.path, "embedded-kek");
      const embedded = await buildAuthorityService(
        resolveAuthorityConfig({
          flags: {
            ...embeddedFlags,
            "policy-protection": "embedded",
            "kek-file": kekFile,
            "init-kek": "true",
          },
          env: {},
        }),
        { logger: createLogger("embedded", "silent") },
      );
      const embeddedUrl = await embedded.listen();
      const adminAt = async (base: string, method: string, path: string, body: unknown) =>
        call(method, path, body, await token("root-admin", ["admin"]), base);
      assert.equal(
        (await adminAt(embeddedUrl, "POST", "/partners", { partner_id: "moving", name: "M" })).status,
        201,
      );
      const profile = await adminAt(embeddedUrl, "PUT", "/partners/moving/caab/auth-profiles/k", {
        type: "static",
        kind: "api_key",
        in: "header",
        name: "x-api-key",
        secret: "moving-secret-0123456789",
      });
      assert.equal(profile.status, 201, profile.text);
      const imported = await adminAt(embeddedUrl, "POST", "/partners/moving/api-specs/import-openapi", {
        capability_id: "items",
        name: "Items",
        document: itemsOpenApi(),
        upstream_base_url: upstream.url,
        auth_profile_ref: "k",
      });
      assert.equal(imported.status, 201, imported.text);
      const created = await adminAt(embeddedUrl, "POST", "/partners/moving/users", {
        subject_id: "mover",
        subject_type: "agent",
        display_name: "mover",
      });
      assert.equal(created.status, 201, created.text);
      const assigned = await adminAt(
        embeddedUrl,
        "PUT",
        "/partners/moving/caab/subjects/mover/policies/items",
        {
          allowed_permission_ids: ["items:get:/items/{itemId}"],
          ttl_seconds: 3600,
        },
      );
      assert.equal(assigned.status, 200, assigned.text);
      await embedded.close();

      const custody = await buildAuthorityService(
        resolveAuthorityConfig({
          flags: { ...embeddedFlags, ...custodyFlags },
          env: {},
        }),
        { logger: createLogger("custody", "silent") },
      );
      try {
        const custodyUrl = await custody.listen();
        const decide = async () =>
          call(
            "POST",
            "/v1/authorize-invocation",
            { subject: { subject_id: "mover" }, capability_id: "items", method: "GET", path: "/items/7" },
            await token("mover"),
            custodyUrl,
          );
        assert.notEqual((await decide()).json.status, "allowed", "embedded artifacts do not open in custody");
        const from = createLocalPolicyProtector({
          keyRings: createStoredKeyRings({ store: custody.context.store, kek: await loadKek({ kekFile }) }),
          serviceIdentity: SERVICE,
        });
        const moved = await reprotectPolicies(custody.context, { from });
        assert.equal(moved.finished, true);
        assert.equal(moved.reprotected, 1);
        assert.equal(moved.unverifiable, 0);
        const allowed = await decide();
        assert.equal(allowed.json.status, "allowed", allowed.text);
        assert.ok(await crypto.server().hasOwner("subject:mover"), "the migration provisioned the owner");
      } finally {
        await custody.close();
      }
    });

    test("only the delegate acts for, rotates or retires a delegated owner", async () => {
      await createAgent("agent-3");
      const client = createCryptoClient({ baseUrl: crypto.url });
      const bearer = await token(SERVICE_ACCOUNT.username);
      const refusedAs = async (run: () => Promise<unknown>) => {
        await assert.rejects(run, (error: unknown) => {
          assert.ok(error instanceof CryptoClientError, String(error));
          assert.equal(error.code, "not_delegated");
          return true;
        });
      };
      for (const other of [otherServiceKeys, partnerOwnerKeys]) {
        const credentials = { token: bearer, ...other };
        await refusedAs(() =>
          client.signEncrypt({ ...credentials, actAs: "subject:agent-3" }, "forged", {
            purpose: "authority-policy",
          }),
        );
        await refusedAs(() => client.delegatedOwner(credentials, "subject:agent-3", "rotate"));
        await refusedAs(() => client.delegatedOwner(credentials, "subject:agent-3", "retire"));
      }
      // A delegate may provision subjects' owners only, never take another kind of id.
      await refusedAs(() =>
        client.delegatedOwner({ token: bearer, ...serviceKeys }, "service:custody-onboard-2", "provision"),
      );
      await refusedAs(() =>
        client.signEncrypt({ token: bearer, ...serviceKeys, actAs: "partner-globex" }, "x", {}),
      );
      assert.ok(await crypto.server().hasOwner("subject:agent-3"));
      // Provisioning is idempotent, also when requests race (a first policy write and a create).
      const race = `subject:race-${mode}`;
      await Promise.all(
        [1, 2, 3, 4].map(() => client.delegatedOwner({ token: bearer, ...serviceKeys }, race, "provision")),
      );
      assert.ok(await crypto.server().hasOwner(race));
    });
  });
}
