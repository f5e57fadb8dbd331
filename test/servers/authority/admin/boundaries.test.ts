import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { cast, type Harness, smallApi, startHarness } from "./harness.ts";

describe("admin API: permission boundaries", () => {
  let h: Harness;
  let t: Awaited<ReturnType<typeof cast>>;
  const base = "/partners/acme/permission-boundaries";
  const boundary = {
    boundary_id: "support",
    name: "Support agents",
    allowed_capabilities: ["orders"],
    allowed_permission_patterns: ["orders:get:*", "orders:*:/orders/{orderId}"],
    max_policy_ttl_seconds: 3600,
  };

  before(async () => {
    h = await startHarness();
    t = await cast(h);
    await h.call("POST", "/partners", { token: t.admin, body: { partner_id: "acme", name: "Acme" } });
    await h.call("POST", "/partners", { token: t.admin, body: { partner_id: "globex", name: "Globex" } });
    await h.call("POST", "/partners/acme/api-specs/import-openapi", {
      token: t.admin,
      body: { capability_id: "orders", name: "Orders", document: smallApi(), auth_profile_ref: "none" },
    });
  });
  after(() => h.close());

  it("creates, reads and lists boundaries", async () => {
    const created = await h.call("POST", base, { token: t.acmeAdmin, body: boundary });
    assert.equal(created.status, 201, created.text);
    assert.deepEqual(created.body.allowed_permission_patterns, boundary.allowed_permission_patterns);
    assert.equal(created.body.partner_id, "acme");
    const one = await h.call("GET", `${base}/support`, { token: t.auditor });
    assert.equal(one.status, 200);
    assert.equal(one.body.max_policy_ttl_seconds, 3600);
    const list = await h.call("GET", base, { token: t.acmeAdmin });
    assert.deepEqual(
      list.body.items.map((b: { boundary_id: string }) => b.boundary_id),
      ["support"],
    );
  });

  it("answers 409 for a duplicate, 400 for bad bodies, 404 for unknown ones", async () => {
    assert.equal((await h.call("POST", base, { token: t.acmeAdmin, body: boundary })).status, 409);
    const bad = await h.call("POST", base, {
      token: t.acmeAdmin,
      body: {
        ...boundary,
        boundary_id: "x",
        allowed_capabilities: ["has space"],
        allowed_permission_patterns: [""],
      },
    });
    assert.equal(bad.status, 400);
    assert.ok(bad.body.details.problems.length >= 1);
    const missing = await h.call("POST", base, { token: t.acmeAdmin, body: { boundary_id: "y", name: "y" } });
    assert.equal(missing.status, 400);
    assert.equal((await h.call("GET", `${base}/nope`, { token: t.acmeAdmin })).status, 404);
    const { boundary_id: _, ...fields } = boundary;
    assert.equal((await h.call("PUT", `${base}/nope`, { token: t.acmeAdmin, body: fields })).status, 404);
    assert.equal((await h.call("DELETE", `${base}/nope`, { token: t.acmeAdmin })).status, 404);
  });

  it("checks roles and partners", async () => {
    assert.equal((await h.call("POST", base, { body: boundary })).status, 401);
    for (const token of [t.globexAdmin, t.auditor, t.agent]) {
      assert.equal(
        (await h.call("POST", base, { token, body: { ...boundary, boundary_id: "z" } })).status,
        403,
      );
    }
    assert.equal((await h.call("GET", base, { token: t.globexAdmin })).status, 403);
    assert.equal(
      (await h.call("GET", "/partners/ghost/permission-boundaries", { token: t.admin })).status,
      404,
    );
  });

  it("enforces the boundary on assignment and reports existing assignments a tighter one would refuse", async () => {
    await h.call("POST", "/partners/acme/users", {
      token: t.acmeAdmin,
      body: { subject_id: "support-1", subject_type: "agent", display_name: "S", boundary_id: "support" },
    });
    const refused = await h.call("PUT", "/partners/acme/caab/subjects/support-1/policies/orders", {
      token: t.acmeAdmin,
      body: { allowed_permission_ids: ["orders:post:/orders"], ttl_seconds: 60 },
    });
    assert.equal(refused.status, 400);
    assert.deepEqual(refused.body.details.outside, ["orders:post:/orders"]);
    const allowed = await h.call("PUT", "/partners/acme/caab/subjects/support-1/policies/orders", {
      token: t.acmeAdmin,
      body: {
        allowed_permission_ids: ["orders:get:/orders", "orders:delete:/orders/{orderId}"],
        ttl_seconds: 60,
      },
    });
    assert.equal(allowed.status, 200, allowed.text);

    const tighter = await h.call("PUT", `${base}/support`, {
      token: t.acmeAdmin,
      body: {
        name: "Support agents (read only)",
        allowed_capabilities: ["orders"],
        allowed_permission_patterns: ["orders:get:*"],
        max_policy_ttl_seconds: null,
      },
    });
    assert.equal(tighter.status, 200, tighter.text);
    assert.equal(tighter.body.boundary.name, "Support agents (read only)");
    assert.equal(tighter.body.boundary.max_policy_ttl_seconds, null);
    assert.deepEqual(tighter.body.assignments_outside, [
      { subject_id: "support-1", capability_id: "orders", outside: ["orders:delete:/orders/{orderId}"] },
    ]);
  });

  it("refuses to delete a boundary subjects still use, then deletes it", async () => {
    const inUse = await h.call("DELETE", `${base}/support`, { token: t.acmeAdmin });
    assert.equal(inUse.status, 409);
    assert.deepEqual(inUse.body.details.subject_ids, ["support-1"]);
    assert.equal(
      (await h.call("DELETE", "/partners/acme/users/support-1", { token: t.acmeAdmin })).status,
      204,
    );
    assert.equal((await h.call("DELETE", `${base}/support`, { token: t.auditor })).status, 403);
    assert.equal((await h.call("DELETE", `${base}/support`, { token: t.acmeAdmin })).status, 204);
    assert.equal((await h.call("GET", `${base}/support`, { token: t.acmeAdmin })).status, 404);
  });
});
