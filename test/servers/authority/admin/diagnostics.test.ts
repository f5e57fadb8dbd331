import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { collections, storeKeys } from "../../../../src/store/model.ts";
import { cast, type Harness, smallApi, startHarness } from "./harness.ts";

const SECRET = "diagnostics-must-not-show-this";

describe("admin API: diagnostics", () => {
  let h: Harness;
  let t: Awaited<ReturnType<typeof cast>>;

  before(async () => {
    h = await startHarness();
    t = await cast(h);
    await h.call("POST", "/partners", { token: t.admin, body: { partner_id: "acme", name: "Acme" } });
    for (const capability_id of ["orders", "unused"]) {
      await h.call("POST", "/partners/acme/api-specs/import-openapi", {
        token: t.admin,
        body: { capability_id, name: capability_id, document: smallApi(), auth_profile_ref: "orders-key" },
      });
    }
    await h.call("PUT", "/partners/acme/caab/auth-profiles/orders-key", {
      token: t.admin,
      body: { type: "static", kind: "bearer", secret: SECRET },
    });
    await h.call("POST", "/partners/acme/users", {
      token: t.admin,
      body: { subject_id: "soon", subject_type: "agent", display_name: "Soon" },
    });
    // Assigned while the profile exists, then removed behind the API's back (a restored or
    // edited store): assignment refuses a missing profile, diagnostics find one that went missing.
    await h.call("PUT", "/partners/acme/caab/auth-profiles/missing-profile", {
      token: t.admin,
      body: { type: "static", kind: "bearer", secret: "deleted-later-1" },
    });
    const r = await h.call("PUT", "/partners/acme/caab/subjects/soon/policies/orders", {
      token: t.admin,
      body: {
        allowed_permission_ids: ["orders:get:/orders"],
        ttl_seconds: 3600,
        auth_profile_ref: "missing-profile",
      },
    });
    assert.equal(r.status, 200, r.text);
    assert.equal(
      await h.store.delete(collections.authProfiles, storeKeys.authProfile("acme", "missing-profile")),
      true,
    );
  });
  after(() => h.close());

  it("reports persistence, counts, configuration facts and warnings to admins and auditors", async () => {
    for (const token of [t.admin, t.auditor]) {
      const r = await h.call("GET", "/admin/diagnostics", { token });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.body.persistence.backend, "sqlite");
      assert.equal(r.body.persistence.health.ok, true);
      assert.equal(r.body.counts.partners, 1);
      assert.equal(r.body.counts.capabilities, 2);
      assert.equal(r.body.counts.policies, 1);
      assert.equal(r.body.counts.auth_profiles, 1);
      assert.ok(r.body.counts["log:audit"] >= 1);
      assert.deepEqual(r.body.backends, {
        policy_protection: "configured",
        secret_storage: "configured",
        policy_change_notifications: "configured",
      });
      assert.equal(r.body.configuration.audience, "authority");
      assert.equal(r.body.configuration.public_url, "http://127.0.0.1:8080");
      assert.deepEqual(r.body.configuration.parameter_scoping, {
        enabled: true,
        partner_allowlist: ["acme"],
      });

      const codes = r.body.warnings.map((w: { code: string; capability_id?: string; subject_id?: string }) =>
        [w.code, w.capability_id ?? w.subject_id].join(" "),
      );
      assert.ok(codes.includes("policy_expiring soon"), codes.join(", "));
      assert.ok(codes.includes("capability_without_policy unused"), codes.join(", "));
      assert.ok(!codes.includes("capability_without_policy orders"));
      assert.ok(codes.includes("auth_profile_missing orders"), codes.join(", "));
      assert.ok(!r.text.includes(SECRET));
    }
  });

  it("reports an expired policy once the clock passes its expiry", async () => {
    h.clock.offsetMs = 2 * 3600_000;
    try {
      const r = await h.call("GET", "/admin/diagnostics", { token: t.admin });
      assert.ok(
        r.body.warnings.some(
          (w: { code: string; subject_id?: string }) =>
            w.code === "policy_expired" && w.subject_id === "soon",
        ),
      );
    } finally {
      h.clock.offsetMs = 0;
    }
  });

  it("is refused to partner admins and agents, and to callers without a token", async () => {
    assert.equal((await h.call("GET", "/admin/diagnostics")).status, 401);
    for (const token of [t.acmeAdmin, t.agent]) {
      assert.equal((await h.call("GET", "/admin/diagnostics", { token })).status, 403);
    }
  });
});
