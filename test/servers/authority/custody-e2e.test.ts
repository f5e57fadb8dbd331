import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { access, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { REPROTECT_CHECKPOINT, reprotectPolicies } from "../../../src/admin/reprotect.ts";
import { argumentsDigest, buildEnvelopeClaims, PARTNER_PROFILE_V2 } from "../../../src/bindings/envelope.ts";
import { createCryptoClient } from "../../../src/clients/crypto-service/client.ts";
import { resolveAuthorityConfig } from "../../../src/config/authority.ts";
import { decodeSignedBlob, envelopeKeyId } from "../../../src/crypto/index.ts";
import { createJwtVerifier } from "../../../src/identity/jwt-verifier.ts";
import { createLogger } from "../../../src/observability/logger.ts";
import { createCapabilityMap } from "../../../src/pipeline/capability-map.ts";
import { readPolicyRecord } from "../../../src/policy/record-store.ts";
import { KEY_RINGS_COLLECTION } from "../../../src/policy/stored-key-rings.ts";
import { type AuthorityService, buildAuthorityService } from "../../../src/servers/authority/build.ts";
import { createDevCertificate } from "../../../src/servers/managed/dev-certificate.ts";
import { createManagedServer, type ManagedServer } from "../../../src/servers/managed/server.ts";
import { createAuthorityClient } from "../../../src/servers/sidecar/authority-client.ts";
import { staticTokenSource } from "../../../src/servers/sidecar/service-token.ts";
import { createSidecar, type Sidecar } from "../../../src/servers/sidecar/sidecar.ts";
import { collections, storeKeys } from "../../../src/store/model.ts";
import { type RestartableCrypto, startRestartableCrypto } from "../../helpers/crypto-service.ts";
import { egressAllowValue } from "../../helpers/egress.ts";
import { createExtAuthzClient, type ExtAuthzClient } from "../../helpers/ext-authz-client.ts";
import { type HttpReply, httpRequest } from "../../helpers/http-client.ts";
import { createLogCapture } from "../../helpers/log-capture.ts";
import { type RestartableIdp, startRestartableIdp } from "../../helpers/restartable-idp.ts";
import { sidecarTestOptions } from "../../helpers/sidecar-config.ts";
import { makeTempDir, type TempDir } from "../../helpers/temp-dir.ts";
import { itemsOpenApi, startTestUpstream, type TestUpstream } from "../../helpers/upstream-api.ts";

/**
 * `authority serve` as an operator deploys it with `--policy-protection managed`: no KEK and
 * no key ring anywhere in the authority — policies (v1 with the subject's credential set, v2
 * with the service identity), authority envelopes and secrets at rest are protected through
 * the managed crypto API (HTTPS, five credential headers from a mounted file) by the crypto
 * service; the identity provider is the real one (src/servers/idp). Authorize, invoke, verify,
 * MCP and the sidecar run end to end; the crypto service stopped → policy loads and verify fail
 * closed with 503, and recover when it returns; a key rotation of the service identity and the
 * subjects leaves every stored policy and every live envelope usable, and one resumable
 * re-protection run moves every policy to the new keys.
 */
describe("authority with its keys in the crypto service, through the managed API", () => {
  const SERVICE = "custody-env";
  const PARTNER = "acme";
  const AGENT = "agent-1";
  const BINDING = "acme-app";
  const TENANT = "acme-tenant";
  const USER_AUDIENCE = "acme-api";
  const SERVICE_ACCOUNT = { username: "authority-svc", password: `pw-${randomBytes(12).toString("hex")}` };
  const logs = createLogCapture("silent");
  let dir: TempDir;
  let idp: RestartableIdp;
  let partnerIdp: RestartableIdp;
  let crypto: RestartableCrypto;
  let managed: ManagedServer;
  let upstream: TestUpstream;
  let built: AuthorityService;
  let url: string;
  let sidecar: Sidecar;
  let extAuthz: ExtAuthzClient;
  let stateDir: string;
  let workload: { invoker: { id: string; secret: string }; broker: { id: string; secret: string } };
  let mappedSubject: string;
  const otherOwnerKeys = {
    apiKey: `apk_${randomBytes(8).toString("hex")}`,
    accessKey: `ak_${randomBytes(8).toString("hex")}`,
    secretKey: `sk_${randomBytes(8).toString("hex")}`,
  };

  const partnerKeys = () => ({
    api_key: `apk_${randomBytes(8).toString("hex")}`,
    access_key: `ak_${randomBytes(8).toString("hex")}`,
    secret_key: `sk_${randomBytes(8).toString("hex")}`,
  });
  const keysOf = (k: ReturnType<typeof partnerKeys>) => ({
    apiKey: k.api_key,
    accessKey: k.access_key,
    secretKey: k.secret_key,
  });
  const token = async (subject: string, roles: string[] = []) =>
    (await idp.server().issueToken({ subject, roles, lifetimeSec: 3600 })).accessToken;
  const call = async (method: string, path: string, body?: unknown, bearer?: string, extra = {}) =>
    httpRequest(`${url}${path}`, {
      method,
      headers: { ...(bearer === undefined ? {} : { authorization: `Bearer ${bearer}` }), ...extra },
      ...(body === undefined ? {} : { json: body }),
      timeoutMs: 20_000,
    });
  const admin = async (method: string, path: string, body: unknown, status: number): Promise<HttpReply> => {
    const reply = await call(method, path, body, await token("root-admin", ["admin"]));
    assert.equal(reply.status, status, `${method} ${path}: ${reply.text}`);
    return reply;
  };
  const workloadToken = async (client: { id: string; secret: string }, scope: string) => {
    const reply = await call("POST", `/v1/bindings/${BINDING}/token`, {
      grant_type: "client_credentials",
      client_id: client.id,
      client_secret: client.secret,
      scope,
    });
    assert.equal(reply.status, 200, reply.text);
    return reply.json.access_token as string;
  };
  const authorize = async () =>
    call(
      "POST",
      "/v1/authorize-invocation",
      { subject: { subject_id: AGENT }, capability_id: "items", method: "GET", path: "/items/7" },
      await token(AGENT),
    );
  /** One binding invoke; returns the reply and the envelope the upstream received. */
  const invoke = async (itemId: string) => {
    const assertion = (
      await partnerIdp
        .server()
        .issueToken({ subject: "user-123", audience: USER_AUDIENCE, tenant: TENANT, lifetimeSec: 600 })
    ).accessToken;
    const before = upstream.hits.length;
    const reply = await call(
      "POST",
      `/v1/bindings/${BINDING}/invoke`,
      { capability_id: "items", method: "GET", path: `/items/${itemId}` },
      await workloadToken(workload.invoker, "authority/bindings.invoke"),
      { "x-authority-user-assertion": assertion, "idempotency-key": `k-${randomBytes(6).toString("hex")}` },
    );
    const envelope = upstream.hits.slice(before).find((hit) => hit.path === `/items/${itemId}`)?.headers[
      "x-authority-envelope"
    ];
    return { reply, envelope: typeof envelope === "string" ? envelope : undefined };
  };
  const verify = async (itemId: string, protectedEnvelope: string) =>
    call(
      "POST",
      "/v1/authority/verify",
      {
        profile: "partner-profile-v2",
        bindingId: BINDING,
        operationId: "getItem",
        arguments: { path: { itemId }, query: {}, body: null },
        protectedEnvelope,
      },
      await workloadToken(workload.broker, "authority/authority.broker.execute"),
    );
  const check = async () =>
    extAuthz.check(
      { method: "GET", path: "/items/7", token: await token(AGENT) },
      { host: "items.internal", capability: "items" },
      10_000,
    );
  const mcpGetItem = async () => {
    const agent = await token(AGENT);
    const mcp = (method: string, params: unknown) =>
      call("POST", "/mcp", { jsonrpc: "2.0", id: 1, method, params }, agent, {
        accept: "application/json, text/event-stream",
      });
    const listed = await mcp("tools/list", {});
    assert.equal(listed.status, 200, listed.text);
    const name = (listed.json.result.tools as Array<{ name: string }>)
      .map((tool) => tool.name)
      .find((tool) => tool.startsWith("getItem"));
    assert.ok(name, listed.text);
    return mcp("tools/call", { name, arguments: { path: { itemId: "7" } } });
  };

  before(async () => {
    dir = await makeTempDir("custody-e2e-");
    stateDir = join(dir.path, "state");
    idp = await startRestartableIdp({
      dir: dir.path,
      name: "idp",
      audience: "authority",
      logs,
      setup: (server) => server.directory.addServiceAccount({ ...SERVICE_ACCOUNT, scopes: [] }),
    });
    partnerIdp = await startRestartableIdp({
      dir: dir.path,
      name: "partner-idp",
      audience: USER_AUDIENCE,
      tenantClaim: "tenant",
      logs,
    });
    crypto = await startRestartableCrypto({ dir: dir.path, logs, issuer: idp.issuer, jwksUri: idp.jwksUri });
    const service = partnerKeys();
    const agent = partnerKeys();
    await crypto
      .server()
      .provisionOwner({ id: `service:${SERVICE}`, kind: "service", credentials: keysOf(service) });
    await crypto
      .server()
      .provisionOwner({ id: `subject:${AGENT}`, kind: "subject", credentials: keysOf(agent) });
    await crypto
      .server()
      .provisionOwner({ id: "partner-globex", kind: "partner", credentials: otherOwnerKeys });
    const certificate = await createDevCertificate();
    managed = await createManagedServer({
      idpTokenUrl: idp.tokenEndpoint,
      cryptoUrl: crypto.proxy.url,
      upstreamTimeoutMs: 3000,
      https: { key: certificate.key, cert: certificate.cert },
      rateLimit: { perUserPerMinute: 1_000_000, burst: 100_000 },
      logger: logs.logger("managed"),
    });
    const managedUrl = await managed.listen({ host: "127.0.0.1", port: 0 });
    const caFile = join(dir.path, "managed-ca.pem");
    await writeFile(caFile, certificate.cert);
    const credentialsFile = join(dir.path, "crypto-credentials.json");
    await writeFile(
      credentialsFile,
      JSON.stringify({ ...SERVICE_ACCOUNT, ...service, subjects: { [AGENT]: agent } }),
      { mode: 0o600 },
    );
    upstream = await startTestUpstream();
    const config = resolveAuthorityConfig({
      flags: {
        "state-dir": stateDir,
        listen: "127.0.0.1:0",
        issuer: idp.issuer,
        "policy-protection": "managed",
        "managed-url": managedUrl,
        "managed-ca-file": caFile,
        "crypto-url": crypto.proxy.url,
        "crypto-credentials-file": credentialsFile,
        "service-identity": SERVICE,
        "record-cache-ms": "0",
        "egress-allow": egressAllowValue(upstream.url, partnerIdp.issuer),
      },
      env: {},
    });
    assert.equal(config.policyProtection.mode, "managed");
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
    await admin(
      "POST",
      `/partners/${PARTNER}/users`,
      { subject_id: AGENT, subject_type: "agent", display_name: AGENT },
      201,
    );
    await admin(
      "PUT",
      `/partners/${PARTNER}/caab/subjects/${AGENT}/policies/items`,
      { allowed_permission_ids: ["items:get:/items/{itemId}"], ttl_seconds: 3600 },
      200,
    );
    await admin(
      "POST",
      `/partners/${PARTNER}/bindings`,
      {
        binding_id: BINDING,
        issuer: partnerIdp.issuer,
        jwks_url: partnerIdp.jwksUri,
        audience: USER_AUDIENCE,
        tenant_claim: "tenant",
        tenant_value: TENANT,
        auth_profile_ref: "items-key",
      },
      201,
    );
    const client = async (name: string, scopes: string[]) => {
      const reply = await admin("POST", `/v1/bindings/${BINDING}/workload-clients`, { name, scopes }, 201);
      return { id: reply.json.client.client_id as string, secret: reply.json.client_secret as string };
    };
    workload = {
      invoker: await client("agent-runtime", ["authority/bindings.invoke"]),
      broker: await client("items-api", ["authority/authority.broker.execute"]),
    };
    const mapped = await admin(
      "POST",
      `/v1/bindings/${BINDING}/subjects`,
      { external_subject: "user-123", display_name: "External user" },
      201,
    );
    mappedSubject = mapped.json.mapping.subject_id;
    await admin(
      "POST",
      `/v1/bindings/${BINDING}/apis`,
      {
        subject_id: mappedSubject,
        capability_id: "items",
        allowed_permission_ids: ["items:get:/items/{itemId}"],
        ttl_seconds: 3600,
      },
      200,
    );

    sidecar = createSidecar({
      ...sidecarTestOptions(),
      authority: createAuthorityClient({
        baseUrl: url,
        token: staticTokenSource(await token("sidecar-1", ["sidecar", "sidecar_platform"])),
      }),
      verifier: createJwtVerifier({ issuer: idp.issuer, audience: "authority", jwks: idp.jwksUri }),
      policyKeys: { serviceIdentity: SERVICE },
      capabilityMap: createCapabilityMap({ "items.internal": "items" }),
      listen: {
        grpc: { host: "127.0.0.1", port: 0 },
        proxy: { host: "127.0.0.1", port: 0 },
        metrics: { host: "127.0.0.1", port: 0 },
      },
      decisionTimeoutMs: 10_000,
    });
    extAuthz = createExtAuthzClient((await sidecar.start()).grpc);
  });

  after(async () => {
    extAuthz?.close();
    await sidecar?.close({ graceMs: 0 });
    await built?.close();
    await managed?.close();
    await upstream?.close();
    await crypto?.close();
    await partnerIdp?.stop();
    await idp?.stop();
    await dir?.cleanup();
  });

  test("no KEK and no key ring: nothing under the state directory opens anything", async () => {
    await assert.rejects(access(join(stateDir, "kek")), { code: "ENOENT" });
    assert.equal(await built.context.store.count(KEY_RINGS_COLLECTION), 0);
    // The auth-profile secret at rest is the crypto service's sign-encrypt of the service identity.
    const profile = await built.context.store.get<{ sealed_secret: string }>(
      collections.authProfiles,
      storeKeys.authProfile(PARTNER, "items-key"),
    );
    assert.ok(profile !== undefined && profile.sealed_secret.length > 0);
    assert.equal(profile.sealed_secret.includes("upstream-secret"), false);
  });

  test("authorize, invoke, verify, MCP and the sidecar, end to end", async () => {
    const decided = await authorize();
    assert.equal(decided.status, 200, decided.text);
    assert.equal(decided.json.status, "allowed");
    const { reply, envelope } = await invoke("7");
    assert.equal(reply.status, 200, reply.text);
    assert.ok(envelope, "the upstream received an envelope");
    assert.equal(upstream.hits.at(-1)?.headers["x-api-key"], "upstream-secret-0123456789");
    const verified = await verify("7", envelope);
    assert.equal(verified.status, 200, verified.text);
    assert.deepEqual(verified.json, {
      profile: "partner-profile-v2",
      bindingId: BINDING,
      operationId: "getItem",
      decision: "allow",
      verified: true,
    });
    const wrongArgs = await verify("8", envelope);
    assert.equal(wrongArgs.status, 403);
    assert.equal(wrongArgs.json.error, "digest_mismatch");
    const mcp = await mcpGetItem();
    assert.equal(mcp.status, 200, mcp.text);
    assert.notEqual(mcp.json.result?.isError, true, mcp.text);
    const checked = await check();
    assert.equal(checked.allowed, true, JSON.stringify(checked.response));
  });

  test("an envelope signed by another owner of the crypto service, sealed to the service identity, is signer_mismatch", async () => {
    const claims = buildEnvelopeClaims({
      profile: PARTNER_PROFILE_V2,
      issuer: built.context.config.publicUrl.replace(/\/+$/, ""),
      partnerId: PARTNER,
      bindingId: BINDING,
      operationId: "getItem",
      permissionId: "items:get:/items/{itemId}",
      argsDigest: argumentsDigest({ path: { itemId: "7" }, query: {}, body: null }),
      now: new Date(),
    });
    const forged = await createCryptoClient({ baseUrl: crypto.url }).signEncrypt(
      { token: await token("globex-svc"), ...otherOwnerKeys },
      JSON.stringify(claims),
      { purpose: PARTNER_PROFILE_V2.purpose, recipient: `service:${SERVICE}` },
    );
    const reply = await verify("7", forged.encryptedData);
    assert.equal(reply.status, 403, reply.text);
    assert.equal(reply.json.error, "signer_mismatch");
    const garbage = await verify("7", Buffer.from(randomBytes(900)).toString("base64"));
    assert.equal(garbage.status, 403);
    assert.equal(garbage.json.error, "invalid_signature");
  });

  test("the sidecar's own credential opens nothing at the crypto service: a stored artifact stays sealed", async () => {
    const record = await readPolicyRecord(built.context.store, AGENT);
    assert.ok(record);
    const sidecarToken = await token("sidecar-1", ["sidecar", "sidecar_platform"]);
    const action = (headers: Record<string, string>) =>
      httpRequest(`${crypto.url}/v1/actions`, {
        method: "POST",
        headers: { authorization: `Bearer ${sidecarToken}`, ...headers },
        json: { actions: ["d", "v"], encrypted_data: record.artifact },
        timeoutMs: 10_000,
      });
    const bare = await action({});
    assert.equal(bare.status, 400, bare.text);
    assert.equal(bare.text.includes("decrypted_data"), false);
    const guessed = await action({ api_key: "apk_guess", access_key: "ak_guess", secret_key: "sk_guess" });
    assert.equal(guessed.status, 403, guessed.text);
    assert.equal(guessed.text.includes("decrypted_data"), false);
  });

  test("the crypto service stopped: policy loads and verify fail closed with 503, and recover when it returns", async () => {
    const { envelope } = await invoke("7");
    assert.ok(envelope);
    built.runtime.policies.clear();
    await crypto.stop();
    try {
      const decided = await authorize();
      assert.equal(decided.status, 503, decided.text);
      assert.equal(decided.json.status, "denied");
      const verified = await verify("7", envelope);
      assert.equal(verified.status, 503, verified.text);
      assert.equal(verified.json.error, "crypto_unavailable");
    } finally {
      await crypto.start();
    }
    assert.equal((await authorize()).json.status, "allowed");
    assert.equal((await verify("7", envelope)).status, 200);
    assert.equal((await invoke("7")).reply.status, 200);
  });

  test("rotation: policies and envelopes from before a rotation stay usable; one resumable run re-protects every policy", async () => {
    const { envelope: before } = await invoke("7");
    assert.ok(before);
    const owners = [`service:${SERVICE}`, `subject:${AGENT}`];
    const rotated = new Map<string, string>();
    for (const owner of owners) rotated.set(owner, (await crypto.server().rotateOwner(owner)).keyId);
    built.runtime.policies.clear();
    // Before re-protection: the old artifacts (v1 and v2) and the live envelope still work.
    assert.equal((await verify("7", before)).status, 200, "an envelope issued before the rotation");
    assert.equal((await authorize()).json.status, "allowed");
    const { reply, envelope: after } = await invoke("7");
    assert.equal(reply.status, 200, reply.text);
    assert.ok(after);
    assert.equal((await verify("7", after)).status, 200);
    sidecar.policies.evict(AGENT);
    assert.equal((await check()).allowed, true);

    const signerKeyId = async (subjectId: string) => {
      const record = await readPolicyRecord(built.context.store, subjectId);
      assert.ok(record);
      const opened = await built.context.protector.open(record.artifact, {
        cryptoVersion: record.crypto_version,
        subjectId,
        partnerId: PARTNER,
      });
      const { document } = decodeSignedBlob(Buffer.from(opened.signedBlob ?? "", "base64"));
      return (JSON.parse(Buffer.from(document).toString("utf8")) as { signer_key_id: string }).signer_key_id;
    };
    const progress: number[] = [];
    const first = await reprotectPolicies(built.context, {
      maxPolicies: 1,
      onProgress: (p) => progress.push(p.reprotected),
    });
    assert.equal(first.finished, false);
    const done = await reprotectPolicies(built.context, { onProgress: (p) => progress.push(p.reprotected) });
    assert.deepEqual(
      { finished: done.finished, reprotected: done.reprotected, total: done.total },
      {
        finished: true,
        reprotected: 2,
        total: 2,
      },
    );
    assert.deepEqual(progress, [1, 2, 2]);
    assert.equal(
      await built.context.store.get(REPROTECT_CHECKPOINT.collection, REPROTECT_CHECKPOINT.id),
      undefined,
    );
    assert.equal(await signerKeyId(AGENT), rotated.get(`subject:${AGENT}`));
    assert.equal(await signerKeyId(mappedSubject), rotated.get(`service:${SERVICE}`));
    // …and encrypted to the new encryption key.
    for (const [subjectId, owner] of [
      [AGENT, `subject:${AGENT}`],
      [mappedSubject, `service:${SERVICE}`],
    ] as const) {
      const record = await readPolicyRecord(built.context.store, subjectId);
      assert.equal(envelopeKeyId(record?.artifact ?? ""), rotated.get(owner));
    }
    built.runtime.policies.clear();
    sidecar.policies.evict(AGENT);
    assert.equal((await authorize()).json.status, "allowed");
    assert.equal((await invoke("7")).reply.status, 200);
    assert.equal((await check()).allowed, true);
    assert.equal((await verify("7", before)).status, 200, "still, after re-protection");
  });
});
