import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createRemoteJWKSet, jwtVerify } from "jose";
import { BINDING, type BindingsHarness, PARTNER, startBindingsHarness } from "./harness.ts";

describe("headless partner API lifecycle", () => {
  let h: BindingsHarness;
  let partnerAdmin: string;
  let otherAdmin: string;
  let auditor: string;
  before(async () => {
    h = await startBindingsHarness();
    partnerAdmin = await h.adminToken(["partner_admin"], PARTNER);
    otherAdmin = await h.adminToken(["partner_admin"], "globex");
    auditor = await h.adminToken(["auditor"]);
  });
  after(async () => {
    await h.close();
  });

  it("creates, lists, reads and updates bindings by partner", async () => {
    const created = await h.call("POST", `/partners/${PARTNER}/bindings`, {
      token: partnerAdmin,
      body: {
        issuer: h.partnerIdp.issuer,
        jwks: {
          keys: [
            {
              kty: "EC",
              crv: "P-256",
              x: "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
              y: "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0",
              kid: "k1",
            },
          ],
        },
        audience: "acme-api",
        tenant_value: "acme-tenant",
        algorithms: ["ES256"],
      },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.match(created.body.binding_id, /^bnd_/);
    assert.equal(created.body.mapping_version, "1");
    assert.equal(created.body.active, true);
    assert.equal(created.body.tenant_claim, "tenant");
    const listed = await h.call("GET", `/partners/${PARTNER}/bindings`, { token: auditor });
    assert.equal(listed.status, 200);
    const ids = listed.body.items.map((b: { binding_id: string }) => b.binding_id);
    assert.ok(ids.includes(BINDING) && ids.includes(created.body.binding_id));
    const patched = await h.call("PATCH", `/v1/bindings/${created.body.binding_id}`, {
      token: partnerAdmin,
      body: { mapping_version: "2024-01", active: false },
    });
    assert.deepEqual([patched.body.mapping_version, patched.body.active], ["2024-01", false]);
    const read = await h.call("GET", `/v1/bindings/${created.body.binding_id}`, { token: auditor });
    assert.equal(read.body.mapping_version, "2024-01");
  });

  it("refuses bad bindings and other partners' admins", async () => {
    const base = {
      issuer: h.partnerIdp.issuer,
      jwks_url: h.partnerIdp.jwksUri,
      audience: "a",
      tenant_value: "t",
    };
    const cases: Array<[Record<string, unknown>, number]> = [
      [{ ...base, issuer: "http://idp.example.com" }, 400],
      [{ ...base, jwks: { keys: [{ kty: "oct", k: "c2VjcmV0" }] } }, 400],
      [{ issuer: base.issuer, audience: "a", tenant_value: "t" }, 400],
      [{ ...base, algorithms: ["HS256"] }, 400],
      [{ ...base, auth_profile_ref: "missing-profile" }, 400],
      [{ ...base, binding_id: BINDING }, 409],
    ];
    for (const [body, status] of cases) {
      const reply = await h.call("POST", `/partners/${PARTNER}/bindings`, { token: h.admin, body });
      assert.equal(reply.status, status, JSON.stringify(body));
    }
    const foreign = await h.call("GET", `/v1/bindings/${BINDING}`, { token: otherAdmin });
    assert.equal(foreign.status, 403);
    const write = await h.call("PATCH", `/v1/bindings/${BINDING}`, {
      token: auditor,
      body: { active: false },
    });
    assert.equal(write.status, 403);
    const anonymous = await h.call("GET", `/v1/bindings/${BINDING}`);
    assert.equal(anonymous.status, 401);
    const missing = await h.call("GET", "/v1/bindings/no-such-binding", { token: h.admin });
    assert.equal(missing.status, 404);
  });

  it("shows a workload client secret once and keeps only its hash", async () => {
    const created = await h.call("POST", `/v1/bindings/${BINDING}/workload-clients`, {
      token: partnerAdmin,
      body: { name: "rotation-next" },
    });
    assert.equal(created.status, 201);
    assert.equal(created.headers.get("cache-control"), "no-store");
    assert.match(created.body.client_secret, /^wcs_/);
    assert.deepEqual(created.body.client.scopes, ["authority/bindings.invoke"]);
    const listed = await h.call("GET", `/v1/bindings/${BINDING}/workload-clients`, { token: auditor });
    const text = JSON.stringify(listed.body);
    assert.ok(!text.includes(created.body.client_secret));
    assert.ok(!text.includes("secret_hash") && !text.includes("scrypt$"));
    assert.ok(listed.body.items.length >= 3, "several clients are active at once");
    const stored = await h.store.get<Record<string, unknown>>(
      "workload_clients",
      created.body.client.client_id,
    );
    assert.match(String(stored?.secret_hash), /^scrypt\$/);
  });

  it("issues workload tokens with Basic or body credentials, verifiable with the published JWKS", async () => {
    const basic = Buffer.from(`${h.agent.client_id}:${h.agent.client_secret}`).toString("base64");
    const form = await fetch(`${h.url}/v1/bindings/${BINDING}/token`, {
      method: "POST",
      headers: { authorization: `Basic ${basic}`, "content-type": "application/x-www-form-urlencoded" },
      body: "grant_type=client_credentials&scope=authority%2Fauthority.broker.execute",
    });
    assert.equal(form.status, 200);
    assert.equal(form.headers.get("cache-control"), "no-store");
    const issued = (await form.json()) as { access_token: string; scope: string; expires_in: number };
    assert.equal(issued.scope, "authority/authority.broker.execute");
    const { payload, protectedHeader } = await jwtVerify(
      issued.access_token,
      createRemoteJWKSet(new URL(`${h.url}/.well-known/jwks.json`)),
      { issuer: "http://authority.test", audience: "authority-workload" },
    );
    assert.equal(protectedHeader.alg, "ES256");
    assert.equal(payload.sub, h.agent.client_id);
    assert.equal(payload.binding_id, BINDING);
    assert.equal(payload.partner_id, PARTNER);
    assert.equal(payload.token_use, "access");
    assert.equal(typeof payload.jti, "string");
    assert.equal((payload.exp ?? 0) - (payload.iat ?? 0), issued.expires_in);

    const wrongSecret = await h.call("POST", `/v1/bindings/${BINDING}/token`, {
      body: { grant_type: "client_credentials", client_id: h.agent.client_id, client_secret: "wcs_wrong" },
    });
    assert.equal(wrongSecret.status, 401);
    const wrongGrant = await h.call("POST", `/v1/bindings/${BINDING}/token`, {
      body: { grant_type: "password", client_id: h.agent.client_id, client_secret: h.agent.client_secret },
    });
    assert.equal(wrongGrant.status, 400);
    const notGranted = await h.call("POST", `/v1/bindings/${BINDING}/token`, {
      body: {
        grant_type: "client_credentials",
        client_id: h.upstreamClient.client_id,
        client_secret: h.upstreamClient.client_secret,
        scope: "authority/bindings.invoke",
      },
    });
    assert.equal(notGranted.status, 400);
  });

  it("maps external subjects server-side and refuses duplicates", async () => {
    const mapped = await h.call("POST", `/v1/bindings/${BINDING}/subjects`, {
      token: partnerAdmin,
      body: { external_subject: "life-user", display_name: "Life User" },
    });
    assert.equal(mapped.status, 201);
    const subjectId = mapped.body.mapping.subject_id;
    assert.match(subjectId, /^ext_[a-z2-7]{32}$/);
    assert.match(mapped.body.mapping.issuer_hash, /^sha256:/);
    assert.match(mapped.body.mapping.external_subject_hash, /^sha256:/);
    assert.equal(mapped.body.subject.subject_type, "external");
    assert.equal(mapped.body.subject.crypto_version, "platform_service_v2");
    assert.ok(
      !JSON.stringify(mapped.body).includes("life-user"),
      "only hashes of the external subject are kept",
    );
    const again = await h.call("POST", `/v1/bindings/${BINDING}/subjects`, {
      token: partnerAdmin,
      body: { external_subject: "life-user" },
    });
    assert.equal(again.status, 409);
    const one = await h.call("GET", `/v1/bindings/${BINDING}/subjects/${subjectId}`, { token: auditor });
    assert.equal(one.body.subject_id, subjectId);
    const all = await h.call("GET", `/v1/bindings/${BINDING}/subjects`, { token: auditor });
    assert.ok(all.body.items.some((m: { subject_id: string }) => m.subject_id === subjectId));

    const assigned = await h.call("POST", `/v1/bindings/${BINDING}/apis`, {
      token: partnerAdmin,
      body: {
        subject_id: subjectId,
        capability_id: "customers",
        allowed_permission_ids: ["customers:get:/customers"],
        ttl_seconds: 600,
      },
    });
    assert.equal(assigned.status, 200, JSON.stringify(assigned.body));
    assert.equal(assigned.body.policy.schema_version, "authority-user-policy-v2");
    assert.equal(assigned.body.policy.crypto_version, "platform_service_v2");
    assert.equal(assigned.body.policy.encrypted_present, true);
    assert.equal(assigned.body.policy.artifact, undefined);
    assert.equal(assigned.body.assignment.auth_profile_ref, "customers-key");
    const unknownPermission = await h.call("POST", `/v1/bindings/${BINDING}/apis`, {
      token: partnerAdmin,
      body: {
        subject_id: subjectId,
        capability_id: "customers",
        allowed_permission_ids: ["customers:get:/nope"],
        ttl_seconds: 600,
      },
    });
    assert.equal(unknownPermission.status, 400);
    const apis = await h.call("GET", `/v1/bindings/${BINDING}/subjects/${subjectId}/apis`, {
      token: auditor,
    });
    assert.deepEqual(
      apis.body.items.map((a: { capability_id: string }) => a.capability_id),
      ["customers"],
    );

    const allowed = await h.invoke(
      { capability_id: "customers", method: "GET", path: "/customers" },
      { assertion: await h.userAssertion("life-user") },
    );
    assert.equal(allowed.status, 200);
    const removed = await h.call("DELETE", `/v1/bindings/${BINDING}/subjects/${subjectId}/apis/customers`, {
      token: partnerAdmin,
    });
    assert.equal(removed.status, 200);
    assert.equal(removed.body.policy.state, "revoked");
    const revoked = await h.invoke(
      { capability_id: "customers", method: "GET", path: "/customers" },
      { assertion: await h.userAssertion("life-user") },
    );
    assert.deepEqual([revoked.status, revoked.body.reason], [403, "policy_revoked"]);
  });

  it("sets the auth profile the binding's assignments use", async () => {
    const current = await h.call("GET", `/v1/bindings/${BINDING}/auth-profiles`, { token: auditor });
    assert.equal(current.body.auth_profile_ref, "customers-key");
    assert.equal(current.body.profile.profile_id, "customers-key");
    assert.ok(!JSON.stringify(current.body).includes("upstream-key"), "no secret");
    const missing = await h.call("PUT", `/v1/bindings/${BINDING}/auth-profiles`, {
      token: partnerAdmin,
      body: { auth_profile_ref: "nope" },
    });
    assert.equal(missing.status, 400);
    const cleared = await h.call("PUT", `/v1/bindings/${BINDING}/auth-profiles`, {
      token: partnerAdmin,
      body: { auth_profile_ref: null },
    });
    assert.equal(cleared.body.auth_profile_ref, null);
    const restored = await h.call("PUT", `/v1/bindings/${BINDING}/auth-profiles`, {
      token: partnerAdmin,
      body: { auth_profile_ref: "customers-key" },
    });
    assert.equal(restored.body.auth_profile_ref, "customers-key");
  });

  it("lists invocations in time order and reads one evidence record", async () => {
    await h.invoke({ capability_id: "customers", method: "GET", path: "/customers" });
    const page = await h.call("GET", `/v1/bindings/${BINDING}/invocations?limit=1`, { token: auditor });
    assert.equal(page.status, 200);
    assert.equal(page.body.items.length, 1);
    assert.equal(typeof page.body.next, "string");
    const all = await h.call("GET", `/v1/bindings/${BINDING}/invocations?limit=1000`, { token: auditor });
    const ids = all.body.items.map((e: { evidence_id: string }) => e.evidence_id);
    assert.deepEqual(ids, [...ids].sort());
    const missing = await h.call("GET", `/v1/bindings/${BINDING}/evidence/ev_0000000000ffffffffffffffff`, {
      token: auditor,
    });
    assert.equal(missing.status, 404);
    const foreign = await h.call("GET", `/v1/bindings/${BINDING}/invocations`, { token: otherAdmin });
    assert.equal(foreign.status, 403);
  });
});
