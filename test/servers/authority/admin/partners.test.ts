import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { openPolicy } from "../../../../src/policy/artifact.ts";
import { readPolicyRecord } from "../../../../src/policy/record-store.ts";
import { collections, logs, storeKeys } from "../../../../src/store/model.ts";
import { cast, type Harness, smallApi, startHarness } from "./harness.ts";

describe("admin API: partners and users", () => {
  let h: Harness;
  let t: Awaited<ReturnType<typeof cast>>;

  before(async () => {
    h = await startHarness();
    t = await cast(h);
    for (const [partner_id, name] of [
      ["acme", "Acme"],
      ["globex", "Globex"],
    ]) {
      const r = await h.call("POST", "/partners", { token: t.admin, body: { partner_id, name } });
      assert.equal(r.status, 201, r.text);
    }
  });
  after(() => h.close());

  it("serves Prometheus metrics at /metrics, where the chart's ServiceMonitor scrapes", async () => {
    await h.call("GET", "/partners", { token: t.admin });
    const r = await h.call("GET", "/metrics");
    assert.equal(r.status, 200);
    assert.match(
      r.text,
      /^authority_http_requests_total\{route="\/partners",method="GET",status="200"\} \d+$/m,
    );
  });

  describe("POST /partners", () => {
    it("creates a partner for an admin and generates an id when none is given", async () => {
      const r = await h.call("POST", "/partners", { token: t.admin, body: { name: "Initech" } });
      assert.equal(r.status, 201);
      assert.match(r.body.partner_id, /^prt_[A-Za-z0-9_-]+$/);
      assert.equal(r.body.name, "Initech");
      assert.equal(r.body.status, "active");
    });

    it("answers 401 without a token and names the Bearer scheme", async () => {
      const r = await h.call("POST", "/partners", { body: { name: "x" } });
      assert.equal(r.status, 401);
      assert.equal(r.body.error, "invalid_token");
      assert.ok(r.body.requestId);
    });

    it("answers 401 before validating the body", async () => {
      const r = await h.call("POST", "/partners", { body: { wrong: true } });
      assert.equal(r.status, 401);
    });

    it("answers 401 for a forged token", async () => {
      const r = await h.call("POST", "/partners", {
        token: `${t.admin.slice(0, -4)}AAAA`,
        body: { name: "x" },
      });
      assert.equal(r.status, 401);
    });

    it("refuses partner admins, auditors and agents with 403", async () => {
      for (const token of [t.acmeAdmin, t.auditor, t.agent]) {
        const r = await h.call("POST", "/partners", { token, body: { name: "x" } });
        assert.equal(r.status, 403);
        assert.equal(r.body.error, "insufficient_role");
      }
    });

    it("names every role that is allowed when it refuses one, and the property it does not know", async () => {
      const list = await h.call("GET", "/partners", { token: t.agent });
      assert.equal(list.status, 403);
      assert.equal(list.body.message, "This route needs one of the roles: admin, auditor, partner_admin.");
      const extra = await h.call("POST", "/partners", { token: t.admin, body: { name: "x", colour: "red" } });
      assert.equal(extra.status, 400);
      assert.match(JSON.stringify(extra.body.details), /must NOT have the additional property \\"colour\\"/);
    });

    it("answers 409 for an existing id and 400 listing schema problems", async () => {
      const dup = await h.call("POST", "/partners", {
        token: t.admin,
        body: { partner_id: "acme", name: "Again" },
      });
      assert.equal(dup.status, 409);
      assert.equal(dup.body.error, "conflict");
      const bad = await h.call("POST", "/partners", {
        token: t.admin,
        body: { partner_id: "has/slash", name: "" },
      });
      assert.equal(bad.status, 400);
      assert.equal(bad.body.error, "invalid_request");
      assert.ok(Array.isArray(bad.body.details.problems) && bad.body.details.problems.length > 0);
    });
  });

  describe("GET /partners", () => {
    it("lists every partner for admins and auditors", async () => {
      for (const token of [t.admin, t.auditor]) {
        const r = await h.call("GET", "/partners", { token });
        assert.equal(r.status, 200);
        const ids = r.body.items.map((p: { partner_id: string }) => p.partner_id);
        assert.ok(ids.includes("acme") && ids.includes("globex"));
      }
    });

    it("shows a partner admin only its own partner", async () => {
      const r = await h.call("GET", "/partners", { token: t.acmeAdmin });
      assert.equal(r.status, 200);
      assert.deepEqual(
        r.body.items.map((p: { partner_id: string }) => p.partner_id),
        ["acme"],
      );
    });

    it("pages with limit and after", async () => {
      const first = await h.call("GET", "/partners?limit=1", { token: t.admin });
      assert.equal(first.body.items.length, 1);
      assert.ok(first.body.next);
      const second = await h.call("GET", `/partners?limit=1&after=${first.body.next}`, { token: t.admin });
      assert.notEqual(second.body.items[0].partner_id, first.body.items[0].partner_id);
      const bad = await h.call("GET", "/partners?limit=0", { token: t.admin });
      assert.equal(bad.status, 400);
    });

    it("refuses other principals", async () => {
      assert.equal((await h.call("GET", "/partners", { token: t.agent })).status, 403);
    });
  });

  describe("GET /partners/{id}", () => {
    it("reads a partner as admin, auditor or its own partner admin", async () => {
      for (const token of [t.admin, t.auditor, t.acmeAdmin]) {
        const r = await h.call("GET", "/partners/acme", { token });
        assert.equal(r.status, 200);
        assert.equal(r.body.name, "Acme");
      }
    });

    it("refuses another partner's admin with 403 and answers 404 for unknown partners", async () => {
      assert.equal((await h.call("GET", "/partners/acme", { token: t.globexAdmin })).status, 403);
      const missing = await h.call("GET", "/partners/nobody", { token: t.admin });
      assert.equal(missing.status, 404);
      assert.equal(missing.body.error, "not_found");
    });
  });

  describe("users", () => {
    it("creates, lists and reads subjects of a partner", async () => {
      const created = await h.call("POST", "/partners/acme/users", {
        token: t.acmeAdmin,
        body: { subject_id: "agent:alpha@acme", subject_type: "agent", display_name: "Alpha" },
      });
      assert.equal(created.status, 201, created.text);
      assert.deepEqual(
        {
          subject_id: created.body.subject_id,
          partner_id: created.body.partner_id,
          boundary_id: created.body.boundary_id,
          crypto_version: created.body.crypto_version,
        },
        {
          subject_id: "agent:alpha@acme",
          partner_id: "acme",
          boundary_id: null,
          crypto_version: "subject_credentials_v1",
        },
      );
      const generated = await h.call("POST", "/partners/acme/users", {
        token: t.admin,
        body: { subject_type: "user", display_name: "Generated" },
      });
      assert.equal(generated.status, 201);
      assert.match(generated.body.subject_id, /^sub_/);

      const list = await h.call("GET", "/partners/acme/users", { token: t.auditor });
      assert.equal(list.status, 200);
      const ids = list.body.items.map((s: { subject_id: string }) => s.subject_id);
      assert.ok(ids.includes("agent:alpha@acme") && ids.includes(generated.body.subject_id));

      const one = await h.call("GET", `/partners/acme/users/${encodeURIComponent("agent:alpha@acme")}`, {
        token: t.acmeAdmin,
      });
      assert.equal(one.status, 200);
      assert.equal(one.body.display_name, "Alpha");
    });

    it("keeps subject ids unique per partner: another partner's id takes nothing from this one", async () => {
      await h.call("POST", "/partners/acme/users", {
        token: t.admin,
        body: { subject_id: "shared-id", subject_type: "agent", display_name: "One" },
      });
      // globex's own subject of that id lives in globex's namespace (decision 2503).
      const r = await h.call("POST", "/partners/globex/users", {
        token: t.globexAdmin,
        body: { subject_id: "shared-id", subject_type: "agent", display_name: "Two" },
      });
      assert.equal(r.status, 201, r.text);
      assert.equal(r.body.subject_id, "globex~shared-id");
      // The same partner twice is still a conflict.
      const again = await h.call("POST", "/partners/globex/users", {
        token: t.globexAdmin,
        body: { subject_id: "shared-id", subject_type: "agent", display_name: "Three" },
      });
      assert.equal(again.status, 409);
    });

    it("does not show one partner's subject through another partner", async () => {
      const own = await h.call("GET", "/partners/globex/users/shared-id", { token: t.admin });
      assert.deepEqual([own.status, own.body.display_name], [200, "Two"]);
      const theirs = await h.call("GET", "/partners/acme/users/shared-id", { token: t.admin });
      assert.deepEqual([theirs.status, theirs.body.display_name], [200, "One"]);
      assert.equal(
        (await h.call("GET", "/partners/acme/users/globex~shared-id", { token: t.admin })).status,
        404,
      );
    });

    it("validates the body and the boundary", async () => {
      const bad = await h.call("POST", "/partners/acme/users", {
        token: t.acmeAdmin,
        body: { subject_id: "bad id!", subject_type: "robot", display_name: "x" },
      });
      assert.equal(bad.status, 400);
      assert.ok(bad.body.details.problems.length >= 1);
      const boundary = await h.call("POST", "/partners/acme/users", {
        token: t.acmeAdmin,
        body: { subject_type: "agent", display_name: "x", boundary_id: "no-such-boundary" },
      });
      assert.equal(boundary.status, 400);
      assert.equal(boundary.body.details.unknown_boundary_id, "no-such-boundary");
    });

    it("refuses another partner's admin and an unknown partner", async () => {
      const body = { subject_type: "agent", display_name: "x" };
      assert.equal(
        (await h.call("POST", "/partners/acme/users", { token: t.globexAdmin, body })).status,
        403,
      );
      assert.equal((await h.call("POST", "/partners/acme/users", { token: t.auditor, body })).status, 403);
      assert.equal((await h.call("POST", "/partners/ghost/users", { token: t.admin, body })).status, 404);
      assert.equal((await h.call("GET", "/partners/acme/users/nobody", { token: t.admin })).status, 404);
    });

    it("deletes a subject: its policy is revoked, its records removed", async () => {
      await h.call("POST", "/partners/acme/api-specs/import-openapi", {
        token: t.acmeAdmin,
        body: {
          capability_id: "orders",
          name: "Orders",
          document: smallApi(),
          auth_profile_ref: "none",
        },
      });
      await h.call("POST", "/partners/acme/users", {
        token: t.acmeAdmin,
        body: { subject_id: "to-delete", subject_type: "agent", display_name: "Bye" },
      });
      const put = await h.call("PUT", "/partners/acme/caab/subjects/to-delete/policies/orders", {
        token: t.acmeAdmin,
        body: { allowed_permission_ids: ["orders:get:/orders"], ttl_seconds: 600 },
      });
      assert.equal(put.status, 200, put.text);
      const del = await h.call("DELETE", "/partners/acme/users/to-delete", { token: t.acmeAdmin });
      assert.equal(del.status, 204);
      assert.equal((await h.call("GET", "/partners/acme/users/to-delete", { token: t.admin })).status, 404);
      const record = await readPolicyRecord(h.store, "to-delete");
      assert.ok(record?.revoked_at);
      assert.equal(
        await h.store.get(collections.assignments, storeKeys.assignment("acme", "to-delete", "orders")),
        undefined,
      );
    });
  });

  describe("DELETE /partners/{id}", () => {
    it("deletes an empty partner; only admins may", async () => {
      await h.call("POST", "/partners", { token: t.admin, body: { partner_id: "empty", name: "Empty" } });
      assert.equal((await h.call("DELETE", "/partners/empty", { token: t.acmeAdmin })).status, 403);
      const r = await h.call("DELETE", "/partners/empty", { token: t.admin });
      assert.equal(r.status, 200);
      assert.equal(r.body.partner_id, "empty");
      assert.equal((await h.call("GET", "/partners/empty", { token: t.admin })).status, 404);
      assert.equal((await h.call("DELETE", "/partners/empty", { token: t.admin })).status, 404);
    });

    it("refuses with 409 while the partner has resources, and cascades on request", async () => {
      const partner = "doomed";
      await h.call("POST", "/partners", { token: t.admin, body: { partner_id: partner, name: "Doomed" } });
      const imported = await h.call("POST", `/partners/${partner}/api-specs/import-openapi`, {
        token: t.admin,
        body: { capability_id: "orders", name: "Orders", document: smallApi(), auth_profile_ref: "key" },
      });
      assert.equal(imported.status, 201);
      await h.call("PUT", `/partners/${partner}/caab/auth-profiles/key`, {
        token: t.admin,
        body: { type: "static", kind: "bearer", secret: "doomed-secret-value" },
      });
      await h.call("POST", `/partners/${partner}/permission-boundaries`, {
        token: t.admin,
        body: {
          boundary_id: "b",
          name: "B",
          allowed_capabilities: ["orders"],
          allowed_permission_patterns: ["*"],
        },
      });
      await h.call("POST", `/partners/${partner}/users`, {
        token: t.admin,
        body: { subject_id: "doomed-agent", subject_type: "agent", display_name: "D", boundary_id: "b" },
      });
      const put = await h.call("PUT", `/partners/${partner}/caab/subjects/doomed-agent/policies/orders`, {
        token: t.admin,
        body: { allowed_permission_ids: ["orders:get:/orders", "orders:post:/orders"], ttl_seconds: 600 },
      });
      assert.equal(put.status, 200, put.text);
      const auditBefore = await h.store.logLength(logs.audit);

      const refused = await h.call("DELETE", `/partners/${partner}`, { token: t.admin });
      assert.equal(refused.status, 409);
      assert.deepEqual(refused.body.details.contents, {
        subjects: 1,
        capabilities: 1,
        catalog_versions: 1,
        boundaries: 1,
        auth_profiles: 1,
        assignments: 1,
        bindings: 0,
      });

      const done = await h.call("DELETE", `/partners/${partner}?cascade=true`, { token: t.admin });
      assert.equal(done.status, 200, done.text);
      assert.equal(done.body.revoked_policies, 1);
      assert.equal((await h.call("GET", `/partners/${partner}`, { token: t.admin })).status, 404);
      for (const collection of [
        collections.partnerSubjects,
        collections.capabilities,
        collections.catalogVersions,
        collections.boundaries,
        collections.authProfiles,
        collections.assignments,
      ]) {
        const page = await h.store.list(collection, { prefix: `${partner}/` });
        assert.equal(page.items.length, 0, collection);
      }
      assert.equal(await h.store.get(collections.subjects, "doomed-agent"), undefined);

      // The revocation is signed: the stored artifact opens to a revoked document.
      const record = await readPolicyRecord(h.store, "doomed-agent");
      assert.ok(record);
      assert.ok(record.revoked_at);
      const document = await openPolicy(record.artifact, h.protector, {
        cryptoVersion: "subject_credentials_v1",
        subjectId: "doomed-agent",
        partnerId: partner,
      });
      assert.equal(document.revoked_at, record.revoked_at);
      // Audit records stay, and the revocation was added.
      const entries = await h.store.readLog<{ kind: string; action: string; subject_id: string }>(
        logs.audit,
        {
          afterSeq: auditBefore,
        },
      );
      assert.ok(entries.some((e) => e.value.action === "revoke" && e.value.subject_id === "doomed-agent"));
      assert.ok((await h.store.logLength(logs.audit)) > auditBefore);
    });
  });
});
