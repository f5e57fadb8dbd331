import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Client, credentials as grpcCredentials } from "@grpc/grpc-js";
import { putAuthProfile } from "../../../src/admin/auth-profiles.ts";
import { importOpenApi } from "../../../src/admin/capabilities.ts";
import { createPartner } from "../../../src/admin/partners.ts";
import { assignCapability } from "../../../src/admin/policies.ts";
import {
  REPROTECT_CHECKPOINT,
  type ReprotectProgress,
  reprotectPolicies,
} from "../../../src/admin/reprotect.ts";
import { createSubject } from "../../../src/admin/subjects.ts";
import { resolveAuthorityConfig } from "../../../src/config/authority.ts";
import { createJwtVerifier } from "../../../src/identity/jwt-verifier.ts";
import { createLogger } from "../../../src/observability/logger.ts";
import { createCapabilityMap } from "../../../src/pipeline/capability-map.ts";
import { KEY_RINGS_COLLECTION } from "../../../src/policy/stored-key-rings.ts";
import { type AuthorityService, buildAuthorityService } from "../../../src/servers/authority/build.ts";
import { createIdpServer, type IdpServer } from "../../../src/servers/idp/server.ts";
import { createAuthorityClient } from "../../../src/servers/sidecar/authority-client.ts";
import { staticTokenSource } from "../../../src/servers/sidecar/service-token.ts";
import { createSidecar, type Sidecar } from "../../../src/servers/sidecar/sidecar.ts";
import { type RestartableCrypto, startRestartableCrypto } from "../../helpers/crypto-service.ts";
import { createLogCapture } from "../../helpers/log-capture.ts";
import { sidecarTestOptions } from "../../helpers/sidecar-config.ts";
import { makeTempDir, type TempDir } from "../../helpers/temp-dir.ts";
import { checkMethod, envoyCheckRequest, unary } from "../sidecar/grpc/helpers.ts";
import { ordersApi } from "../sidecar/world.ts";

/**
 * `authority serve`'s own wiring (resolveAuthorityConfig → buildAuthorityService) in
 * `crypto` mode: policies are protected and opened by the real crypto service with the
 * service identity's credentials from a mounted file and the IdP token of its service
 * account. No policy key ring is ever written to the authority's store; the sidecar gets
 * signed policies and the crypto service's public keys. The crypto service stopped →
 * policy loads fail closed (503); back → they recover without restarting the authority.
 */
describe("authority serve with --policy-protection crypto", () => {
  let dir: TempDir;
  let idp: IdpServer;
  let crypto: RestartableCrypto;
  let authorityUrl: string;
  let sidecar: Sidecar;
  let grpc: Client;
  const SERVICE = "svc-test";
  const PARTNER = "acme";
  const subjectKeys = () => ({
    api_key: `apk_${randomBytes(8).toString("hex")}`,
    access_key: `ak_${randomBytes(8).toString("hex")}`,
    secret_key: `sk_${randomBytes(8).toString("hex")}`,
  });
  const keysOf = (k: ReturnType<typeof subjectKeys>) => ({
    apiKey: k.api_key,
    accessKey: k.access_key,
    secretKey: k.secret_key,
  });

  const token = async (subject: string, roles: string[] = []) =>
    (await idp.issueToken({ subject, roles, lifetimeSec: 3600 })).accessToken;

  const authorize = async (subjectId: string, path = "/orders") => {
    const response = await fetch(`${authorityUrl}/v1/authorize-invocation`, {
      method: "POST",
      headers: { authorization: `Bearer ${await token(subjectId)}`, "content-type": "application/json" },
      body: JSON.stringify({
        subject: { subject_id: subjectId },
        capability_id: "orders",
        method: "GET",
        path,
      }),
    });
    return { status: response.status, body: (await response.json()) as { status: string; reason?: string } };
  };

  before(async () => {
    dir = await makeTempDir("crypto-protection-");
    idp = await createIdpServer({
      audience: "authority",
      failureLimit: false,
      logger: createLogger("idp", "silent"),
    });
    await idp.listen({ host: "127.0.0.1", port: 0 });
    await idp.directory.addServiceAccount({
      username: "authority-svc",
      password: "pw-0123456789abcdef",
      scopes: [],
    });
    crypto = await startRestartableCrypto({
      dir: dir.path,
      logs: createLogCapture("silent"),
      issuer: idp.issuer,
      jwksUri: idp.jwksUri,
    });
    const serviceKeys = subjectKeys();
    const agent1 = subjectKeys();
    const agent2 = subjectKeys();
    await crypto
      .server()
      .provisionOwner({ id: `service:${SERVICE}`, kind: "service", credentials: keysOf(serviceKeys) });
    await crypto
      .server()
      .provisionOwner({ id: "subject:agent-1", kind: "subject", credentials: keysOf(agent1) });
    await crypto
      .server()
      .provisionOwner({ id: "subject:agent-2", kind: "subject", credentials: keysOf(agent2) });
    const credentialsFile = join(dir.path, "crypto-credentials.json");
    await writeFile(
      credentialsFile,
      JSON.stringify({
        username: "authority-svc",
        password: "pw-0123456789abcdef",
        ...serviceKeys,
        subjects: { "agent-1": agent1, "agent-2": agent2 },
      }),
      { mode: 0o600 },
    );
    const config = resolveAuthorityConfig({
      flags: {
        "state-dir": join(dir.path, "state"),
        listen: "127.0.0.1:0",
        issuer: idp.issuer,
        "crypto-url": crypto.proxy.url,
        "crypto-credentials-file": credentialsFile,
        "service-identity": SERVICE,
        "record-cache-ms": "0",
        // The catalog's (never called) upstream, opened as a platform admin would.
        "egress-allow": "127.0.0.1:9",
      },
      env: {},
    });
    assert.equal(config.policyProtection.mode, "crypto");
    built = await buildAuthorityService(config, { logger: createLogger("authority", "silent") });
    authorityUrl = await built.listen();

    const actor = { subject: "root-admin", requestId: "seed" };
    const context = built.context;
    await createPartner(context, { partner_id: PARTNER, name: "Acme" });
    for (const subjectId of ["agent-1", "agent-2"])
      await createSubject(context, PARTNER, {
        subject_id: subjectId,
        subject_type: "agent",
        display_name: subjectId,
      });
    await putAuthProfile(context, PARTNER, "orders-key", {
      type: "static",
      kind: "api_key",
      in: "header",
      name: "x-api-key",
      secret: "upstream-secret-0123456789",
    });
    await importOpenApi(context, actor, PARTNER, {
      capability_id: "orders",
      name: "Orders",
      document: ordersApi(),
      upstream_base_url: "http://127.0.0.1:9",
      auth_profile_ref: "orders-key",
    });
    for (const subjectId of ["agent-1", "agent-2"])
      await assignCapability(context, actor, PARTNER, subjectId, "orders", {
        allowed_permission_ids: ["orders:get:/orders"],
        ttl_seconds: 3600,
      });

    sidecar = createSidecar({
      ...sidecarTestOptions(),
      authority: createAuthorityClient({
        baseUrl: authorityUrl,
        token: staticTokenSource(await token("sidecar-1", ["sidecar", "sidecar_platform"])),
      }),
      verifier: createJwtVerifier({ issuer: idp.issuer, audience: "authority", jwks: idp.jwksUri }),
      policyKeys: { serviceIdentity: SERVICE },
      capabilityMap: createCapabilityMap({ "orders.internal": "orders" }),
      listen: {
        grpc: { host: "127.0.0.1", port: 0 },
        proxy: { host: "127.0.0.1", port: 0 },
        metrics: { host: "127.0.0.1", port: 0 },
      },
      decisionTimeoutMs: 5000,
    });
    const ports = await sidecar.start();
    grpc = new Client(`127.0.0.1:${ports.grpc}`, grpcCredentials.createInsecure());
  });
  let built: AuthorityService;
  after(async () => {
    grpc?.close();
    await sidecar?.close({ graceMs: 0 });
    await built?.close();
    await crypto?.close();
    await idp?.close();
    await dir?.cleanup();
  });

  test("policies are protected and opened by the crypto service: no policy key ring in the authority's store", async () => {
    const allowed = await authorize("agent-1");
    assert.equal(allowed.status, 200, JSON.stringify(allowed.body));
    assert.equal(allowed.body.status, "allowed");
    const denied = await authorize("agent-1", "/orders/{orderId}");
    assert.equal(denied.body.reason, "operation_not_allowed");
    for (const owner of [`service:${SERVICE}`, "subject:agent-1", "subject:agent-2"]) {
      assert.equal(await built.context.store.get(KEY_RINGS_COLLECTION, owner), undefined, owner);
    }
  });

  test("the sidecar decides on the signed policy the crypto service signed, verified with its public keys", async () => {
    const agentToken = await token("agent-1");
    const allowed = await unary(
      grpc,
      checkMethod,
      envoyCheckRequest({
        method: "GET",
        path: "/orders",
        host: "orders.internal",
        headers: { authorization: `Bearer ${agentToken}` },
        contextExtensions: { capability_id: "orders" },
        id: "req-allowed",
      }),
    );
    assert.equal(allowed.http_response, "ok_response");
    const keys = await (
      await fetch(`${authorityUrl}/v1/sidecar/policy-keys/${encodeURIComponent("subject:agent-1")}`, {
        headers: { authorization: `Bearer ${await token("sidecar-1", ["sidecar", "sidecar_platform"])}` },
      })
    ).json();
    assert.deepEqual(keys, await crypto.server().publicKeys("subject:agent-1"));
  });

  test("rotation: policies protected before and after a key rotation are all decided correctly, by the authority and the sidecar", async () => {
    const sidecarCheck = async (subject: string) =>
      unary(
        grpc,
        checkMethod,
        envoyCheckRequest({
          method: "GET",
          path: "/orders",
          host: "orders.internal",
          headers: { authorization: `Bearer ${await token(subject)}` },
          contextExtensions: { capability_id: "orders" },
          id: `req-${randomBytes(4).toString("hex")}`,
        }),
      );
    // agent-1's policy was protected before the rotation; agent-2's is re-protected after it.
    const before = (await crypto.server().publicKeys("subject:agent-2")).keys.length;
    await crypto.server().rotateOwner("subject:agent-1");
    await crypto.server().rotateOwner("subject:agent-2");
    await assignCapability(
      built.context,
      { subject: "root-admin", requestId: "rotate" },
      PARTNER,
      "agent-2",
      "orders",
      {
        allowed_permission_ids: ["orders:get:/orders"],
        ttl_seconds: 3600,
      },
    );
    // agent-1: decided first on its old signature, then re-protected under the new key, which
    // the sidecar (holding agent-1's key set from before the rotation) fetches on sight.
    for (const subject of ["agent-1", "agent-2"]) {
      assert.equal((await authorize(subject)).body.status, "allowed", subject);
    }
    sidecar.policies.evict("agent-1");
    assert.equal((await sidecarCheck("agent-1")).http_response, "ok_response");
    await assignCapability(
      built.context,
      { subject: "root-admin", requestId: "rotate" },
      PARTNER,
      "agent-1",
      "orders",
      {
        allowed_permission_ids: ["orders:get:/orders"],
        ttl_seconds: 3600,
      },
    );
    assert.equal((await crypto.server().publicKeys("subject:agent-2")).keys.length, before + 1);
    for (const subject of ["agent-1", "agent-2"]) {
      const decided = await authorize(subject);
      assert.equal(decided.body.status, "allowed", subject);
      sidecar.policies.evict(subject);
      assert.equal((await sidecarCheck(subject)).http_response, "ok_response", subject);
    }
  });

  test("re-protection after a rotation: one resumable run re-signs every policy under the current key, reporting progress", async () => {
    await crypto.server().rotateOwner("subject:agent-1");
    await crypto.server().rotateOwner("subject:agent-2");
    const current = async (subject: string) =>
      (await crypto.server().publicKeys(`subject:${subject}`)).keys.find((key) => key.status === "active")
        ?.keyId;
    const signerKeyId = async (subject: string) => {
      const reply = await fetch(`${authorityUrl}/v1/sidecar/policies/${subject}`, {
        headers: { authorization: `Bearer ${await token("sidecar-1", ["sidecar", "sidecar_platform"])}` },
      });
      const body = (await reply.json()) as { signed_policy: string };
      const blob = Buffer.from(body.signed_policy, "base64");
      return JSON.parse(blob.subarray(5, 5 + blob.readUInt32BE(1)).toString("utf8")).signer_key_id as string;
    };
    const seen: ReprotectProgress[] = [];
    // Interrupted after one policy: the checkpoint keeps the place.
    const first = await reprotectPolicies(built.context, { maxPolicies: 1, onProgress: (p) => seen.push(p) });
    assert.equal(first.finished, false);
    assert.equal(first.reprotected, 1);
    assert.equal(first.lastSubject, "agent-1");
    assert.equal(await signerKeyId("agent-1"), await current("agent-1"));
    assert.notEqual(await signerKeyId("agent-2"), await current("agent-2"));
    // Resumed: it goes on after agent-1 and finishes.
    const second = await reprotectPolicies(built.context, { onProgress: (p) => seen.push(p) });
    assert.deepEqual(
      { finished: second.finished, reprotected: second.reprotected, total: second.total },
      { finished: true, reprotected: 2, total: 2 },
    );
    assert.deepEqual(
      seen.map((p) => p.reprotected),
      [1, 2, 2],
    );
    assert.equal(await signerKeyId("agent-2"), await current("agent-2"));
    assert.equal(
      await built.context.store.get(REPROTECT_CHECKPOINT.collection, REPROTECT_CHECKPOINT.id),
      undefined,
    );
    for (const subject of ["agent-1", "agent-2"])
      assert.equal((await authorize(subject)).body.status, "allowed");
  });

  test("the crypto service stopped: a policy to open is a 503 deny; back: recovery without a restart", async () => {
    // Nothing verified in memory: every policy must be opened again.
    built.runtime.policies.clear();
    await crypto.stop();
    try {
      const during = await authorize("agent-2");
      assert.equal(during.status, 503);
      assert.equal(during.body.status, "denied");
      assert.equal(during.body.reason, "upstream_unavailable");
    } finally {
      await crypto.start();
    }
    const back = await authorize("agent-2");
    assert.equal(back.status, 200);
    assert.equal(back.body.status, "allowed");
  });
});
