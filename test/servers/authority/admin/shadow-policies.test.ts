import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { openPolicy } from "../../../../src/policy/artifact.ts";
import { readPolicyRecord } from "../../../../src/policy/record-store.ts";
import { collections } from "../../../../src/store/model.ts";
import { cast, type Harness, smallApi, startHarness } from "./harness.ts";

const GET_ORDERS = "orders:get:/orders";
const POST_ORDERS = "orders:post:/orders";

describe("admin API: shadow policies and the log-only mode", () => {
  let h: Harness;
  let t: Awaited<ReturnType<typeof cast>>;
  const shadowOf = (subject: string, partner = "acme") =>
    `/partners/${partner}/caab/subjects/${subject}/policies/orders/shadow`;

  before(async () => {
    h = await startHarness();
    t = await cast(h);
    for (const partner_id of ["acme", "globex"])
      await h.call("POST", "/partners", { token: t.admin, body: { partner_id, name: partner_id } });
    const imported = await h.call("POST", "/partners/acme/api-specs/import-openapi", {
      token: t.acmeAdmin,
      body: { capability_id: "orders", name: "orders", document: smallApi(), auth_profile_ref: "none" },
    });
    assert.equal(imported.status, 201, imported.text);
    await h.call("POST", "/partners/acme/permission-boundaries", {
      token: t.acmeAdmin,
      body: {
        boundary_id: "read-only",
        name: "Read only",
        allowed_capabilities: ["orders"],
        allowed_permission_patterns: ["orders:get:*"],
      },
    });
    for (const [subject_id, extra] of [
      ["agent-1", {}],
      ["bounded", { boundary_id: "read-only" }],
    ] as const) {
      const created = await h.call("POST", "/partners/acme/users", {
        token: t.admin,
        body: { subject_id, subject_type: "agent", display_name: subject_id, ...extra },
      });
      assert.equal(created.status, 201, created.text);
    }
  });
  after(() => h.close());

  it("a shadow is signed and encrypted like the policy, for the same subject and partner", async () => {
    const r = await h.call("PUT", shadowOf("agent-1"), {
      token: t.acmeAdmin,
      body: { allowed_permission_ids: [POST_ORDERS], ttl_seconds: 600 },
    });
    assert.equal(r.status, 200, r.text);
    const record = await readPolicyRecord(h.store, "agent-1", collections.shadowPolicies);
    assert.ok(record);
    assert.equal(record.crypto_version, "subject_credentials_v1");
    const document = await openPolicy(record.artifact, h.protector, {
      cryptoVersion: record.crypto_version,
      subjectId: "agent-1",
      partnerId: "acme",
    });
    assert.deepEqual(document.apis[0]?.allowed_permission_ids, [POST_ORDERS]);
    // The enforced policy is untouched: the subject has none.
    assert.equal(await readPolicyRecord(h.store, "agent-1"), undefined);
  });

  it("a shadow gets the assignment's checks: outside the boundary is refused", async () => {
    const r = await h.call("PUT", shadowOf("bounded"), {
      token: t.acmeAdmin,
      body: { allowed_permission_ids: [POST_ORDERS], ttl_seconds: 600 },
    });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.body.details.reason, "boundary_violation");
  });

  it("another partner's admin can neither set, read, remove nor promote a shadow", async () => {
    for (const [method, path] of [
      ["PUT", shadowOf("agent-1")],
      ["GET", shadowOf("agent-1")],
      ["DELETE", shadowOf("agent-1")],
      ["POST", `${shadowOf("agent-1")}/promote`],
    ] as const) {
      const r = await h.call(method, path, {
        token: t.globexAdmin,
        ...(method === "PUT" ? { body: { allowed_permission_ids: [GET_ORDERS], ttl_seconds: 60 } } : {}),
      });
      assert.equal(r.status, 403, `${method} ${path}: ${r.text}`);
    }
  });

  it("the log-only mode is the platform admin's: partner admins are refused for any partner", async () => {
    for (const token of [t.acmeAdmin, t.globexAdmin, t.auditor]) {
      for (const partner of ["acme", "globex"]) {
        const r = await h.call("PUT", `/admin/log-only/${partner}/orders`, {
          token,
          body: { reason: "try" },
        });
        assert.equal(r.status, 403, r.text);
      }
    }
    const unknown = await h.call("PUT", "/admin/log-only/acme/nope", {
      token: t.admin,
      body: { reason: "x" },
    });
    assert.equal(unknown.status, 404, unknown.text);
    const set = await h.call("PUT", "/admin/log-only/acme/orders", {
      token: t.admin,
      body: { reason: "onboarding" },
    });
    assert.equal(set.status, 200, set.text);
    assert.equal(set.body.set_by, "root-admin");
    const listed = await h.call("GET", "/admin/log-only", { token: t.auditor });
    assert.equal(listed.body.items.length, 1);
    assert.equal((await h.call("GET", "/admin/log-only", { token: t.acmeAdmin })).status, 403);
    const cleared = await h.call("DELETE", "/admin/log-only/acme/orders", { token: t.admin });
    assert.deepEqual(cleared.body, { disabled: true });
  });

  it("the policy views show the subject's shadow policy beside the enforced one", async () => {
    const enforced = await h.call("PUT", "/partners/acme/caab/subjects/agent-1/policies/orders", {
      token: t.acmeAdmin,
      body: { allowed_permission_ids: [GET_ORDERS], ttl_seconds: 600 },
    });
    assert.equal(enforced.status, 200, enforced.text);
    const allowed = (policy: { capabilities: Array<{ allowed_permission_ids: string[] }> }) =>
      policy.capabilities.flatMap((c) => c.allowed_permission_ids);
    const one = await h.call("GET", "/partners/acme/caab/subjects/agent-1/policy", { token: t.acmeAdmin });
    assert.equal(one.status, 200, one.text);
    assert.deepEqual(allowed(one.body), [GET_ORDERS]);
    assert.deepEqual(allowed(one.body.shadow_policy), [POST_ORDERS]);
    assert.equal(one.body.shadow_policy.state, "active");
    assert.equal(one.body.shadow_policy.artifact, undefined, "never the artifact");
    const list = await h.call("GET", "/partners/acme/caab/policies", { token: t.acmeAdmin });
    assert.equal(list.status, 200, list.text);
    const listed = list.body.items.find((item: { subject_id: string }) => item.subject_id === "agent-1");
    assert.deepEqual(allowed(listed.shadow_policy), [POST_ORDERS]);
    // Without a shadow there is no shadow_policy field.
    const plain = await h.call("PUT", "/partners/acme/caab/subjects/bounded/policies/orders", {
      token: t.acmeAdmin,
      body: { allowed_permission_ids: [GET_ORDERS], ttl_seconds: 600 },
    });
    assert.equal(plain.status, 200, plain.text);
    const bounded = await h.call("GET", "/partners/acme/caab/subjects/bounded/policy", {
      token: t.acmeAdmin,
    });
    assert.equal("shadow_policy" in bounded.body, false);
  });

  it("attack: a sidecar of another partner cannot fetch a subject's shadow", async () => {
    const set = await h.call("PUT", shadowOf("agent-1"), {
      token: t.acmeAdmin,
      body: { allowed_permission_ids: [GET_ORDERS], ttl_seconds: 600 },
    });
    assert.equal(set.status, 200, set.text);
    const path = "/v1/sidecar/shadow-policies/agent-1";
    const own = await h.call("GET", path, { token: await h.token(["sidecar"], "acme", "sidecar-acme") });
    assert.equal(own.status, 200, own.text);
    assert.equal(own.body.subject.partner_id, "acme");
    const other = await h.call("GET", path, {
      token: await h.token(["sidecar"], "globex", "sidecar-globex"),
    });
    assert.ok(other.status === 403 || other.status === 404, other.text);
    assert.equal(other.text.includes("signed_policy"), false);
    // A subject without a shadow: not found, for its own partner's sidecar too.
    const none = await h.call("GET", "/v1/sidecar/shadow-policies/bounded", {
      token: await h.token(["sidecar"], "acme", "sidecar-acme"),
    });
    assert.equal(none.status, 404, none.text);
  });

  it("deleting the subject removes its shadow", async () => {
    const r = await h.call("DELETE", "/partners/acme/users/agent-1", { token: t.acmeAdmin });
    assert.ok(r.status === 200 || r.status === 204, r.text);
    assert.equal(await readPolicyRecord(h.store, "agent-1", collections.shadowPolicies), undefined);
    assert.equal(await h.store.get(collections.shadowAssignments, "acme/agent-1/orders"), undefined);
  });
});
