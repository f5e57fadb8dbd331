import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { openPolicy } from "../../../../src/policy/artifact.ts";
import { readPolicyRecord } from "../../../../src/policy/record-store.ts";
import { collections } from "../../../../src/store/model.ts";
import { buildLargeOpenApi, expectedLargeOperations } from "../../../fixtures/openapi/large-api.ts";
import { cast, type Harness, smallApi, startHarness } from "./harness.ts";

const root = new URL("../../../../", import.meta.url);
const readText = (path: string): string => readFileSync(new URL(path, root), "utf8");

describe("admin API: capabilities", () => {
  let h: Harness;
  let t: Awaited<ReturnType<typeof cast>>;

  before(async () => {
    h = await startHarness();
    t = await cast(h);
    for (const partner_id of ["acme", "globex"]) {
      assert.equal(
        (await h.call("POST", "/partners", { token: t.admin, body: { partner_id, name: partner_id } }))
          .status,
        201,
      );
    }
  });
  after(() => h.close());

  describe("POST /admin/apis/preview-openapi", () => {
    it("lists the operations and permission ids it would import, writing nothing", async () => {
      const before = await h.store.count(collections.catalogVersions);
      const r = await h.call("POST", "/admin/apis/preview-openapi", {
        token: t.acmeAdmin,
        body: { document: smallApi(), capability_id: "orders" },
      });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.body.operation_count, 4);
      assert.deepEqual(r.body.operations.map((op: { permission_id: string }) => op.permission_id).sort(), [
        "orders:delete:/orders/{orderId}",
        "orders:get:/orders",
        "orders:get:/orders/{orderId}",
        "orders:post:/orders",
      ]);
      assert.equal(r.body.title, "Orders");
      assert.ok(Array.isArray(r.body.warnings));
      assert.equal(await h.store.count(collections.catalogVersions), before);
    });

    it("accepts YAML text with a format", async () => {
      const r = await h.call("POST", "/admin/apis/preview-openapi", {
        token: t.admin,
        body: {
          document: readText("examples/openapi/customers.yaml"),
          format: "yaml",
          capability_id: "customers",
        },
      });
      assert.equal(r.status, 200, r.text);
      assert.ok(
        r.body.operations.some(
          (op: { permission_id: string }) => op.permission_id === "customers:get:/customers",
        ),
      );
    });

    it("answers 400 listing every problem of a bad document", async () => {
      const r = await h.call("POST", "/admin/apis/preview-openapi", {
        token: t.admin,
        body: { document: readText("test/fixtures/openapi/broken/duplicate-operation.yaml"), format: "yaml" },
      });
      assert.equal(r.status, 400);
      assert.equal(r.body.error, "invalid_request");
      assert.ok(r.body.details.problems.length >= 1);
      assert.equal(typeof r.body.details.problems[0].message, "string");
    });

    it("is for admins and partner admins only", async () => {
      assert.equal(
        (await h.call("POST", "/admin/apis/preview-openapi", { body: { document: smallApi() } })).status,
        401,
      );
      for (const token of [t.auditor, t.agent]) {
        const r = await h.call("POST", "/admin/apis/preview-openapi", {
          token,
          body: { document: smallApi() },
        });
        assert.equal(r.status, 403);
      }
      const missing = await h.call("POST", "/admin/apis/preview-openapi", { token: t.admin, body: {} });
      assert.equal(missing.status, 400);
    });
  });

  describe("POST /partners/{id}/api-specs/import-openapi", () => {
    it("imports the 130-operation fixture as catalog version 1", async () => {
      const document = buildLargeOpenApi();
      const expected = expectedLargeOperations();
      assert.ok(expected.length >= 120);
      const r = await h.call("POST", "/partners/acme/api-specs/import-openapi", {
        token: t.acmeAdmin,
        body: {
          capability_id: "commerce",
          name: "Commerce",
          document,
          upstream_base_url: "https://commerce.example.com/v1",
          auth_profile_ref: "commerce-key",
        },
      });
      assert.equal(r.status, 201, r.text.slice(0, 500));
      assert.equal(r.body.catalog_version, "1");
      assert.equal(r.body.is_new_version, true);
      assert.equal(r.body.operation_count, expected.length);
      assert.equal(r.body.diff.added.length, expected.length);
      assert.ok(r.body.warnings.some((w: string) => w.includes("commerce-key")));

      const detail = await h.call("GET", "/partners/acme/capabilities/commerce", { token: t.auditor });
      assert.equal(detail.status, 200);
      assert.equal(detail.body.current_version, "1");
      assert.deepEqual(detail.body.versions, ["1"]);
      assert.equal(detail.body.operations.length, expected.length);
      const ids = new Set(detail.body.operations.map((op: { permission_id: string }) => op.permission_id));
      for (const op of expected)
        assert.ok(ids.has(`commerce:${op.method.toLowerCase()}:${op.path}`), op.path);
      for (const op of detail.body.operations) {
        assert.ok(op.upstream_url_template.startsWith("https://commerce.example.com/v1/"));
      }
    });

    it("re-import makes a new version and never touches assigned snapshots", async () => {
      const first = await h.call("POST", "/partners/acme/api-specs/import-openapi", {
        token: t.acmeAdmin,
        body: {
          capability_id: "orders",
          name: "Orders",
          document: smallApi(),
          auth_profile_ref: "orders-key",
        },
      });
      assert.equal(first.status, 201);
      await h.call("POST", "/partners/acme/users", {
        token: t.acmeAdmin,
        body: { subject_id: "reimport-agent", subject_type: "agent", display_name: "R" },
      });
      const assigned = await h.call("PUT", "/partners/acme/caab/subjects/reimport-agent/policies/orders", {
        token: t.acmeAdmin,
        // Authorization only: this test is about snapshots, not credentials.
        body: {
          allowed_permission_ids: ["orders:get:/orders/{orderId}"],
          ttl_seconds: 3600,
          auth_profile_ref: "none",
        },
      });
      assert.equal(assigned.status, 200, assigned.text);
      const before = await readPolicyRecord(h.store, "reimport-agent");
      assert.ok(before);

      // Same operation, new upstream: a changed snapshot and an added operation.
      const changed = smallApi(true);
      changed.servers = [{ url: "https://orders-v2.example.com/v1" }];
      const second = await h.call("POST", "/partners/acme/api-specs/import-openapi", {
        token: t.acmeAdmin,
        body: {
          capability_id: "orders",
          name: "Orders v2",
          document: changed,
          auth_profile_ref: "orders-key",
        },
      });
      assert.equal(second.status, 201, second.text);
      assert.equal(second.body.catalog_version, "2");
      assert.equal(second.body.previous_version, "1");
      assert.deepEqual(second.body.diff.added, ["orders:post:/orders/{orderId}/refunds"]);
      assert.ok(second.body.diff.changed.includes("orders:get:/orders/{orderId}"));

      // The policy record is exactly as it was, and its artifact still holds version 1's snapshot.
      const after = await readPolicyRecord(h.store, "reimport-agent");
      assert.deepEqual(after, before);
      const document = await openPolicy(after?.artifact ?? "", h.protector, {
        cryptoVersion: "subject_credentials_v1",
        subjectId: "reimport-agent",
        partnerId: "acme",
      });
      assert.equal(
        document.apis[0]?.operations[0]?.upstream_url_template,
        "https://orders.example.com/v1/orders/{orderId}",
      );
      const assignment = await h.call("GET", "/partners/acme/caab/subjects/reimport-agent/policies/orders", {
        token: t.acmeAdmin,
      });
      assert.equal(assignment.body.catalog_version, "1");

      // Both versions stay readable; the current one is 2.
      const current = await h.call("GET", "/partners/acme/capabilities/orders", { token: t.acmeAdmin });
      assert.equal(current.body.current_version, "2");
      assert.equal(current.body.name, "Orders v2");
      assert.deepEqual(current.body.versions, ["1", "2"]);
      const old = await h.call("GET", "/partners/acme/capabilities/orders?version=1", { token: t.acmeAdmin });
      assert.equal(old.status, 200);
      assert.equal(old.body.catalog_version, "1");
      assert.equal(old.body.operations.length, 4);
      const none = await h.call("GET", "/partners/acme/capabilities/orders?version=9", {
        token: t.acmeAdmin,
      });
      assert.equal(none.status, 404);

      // A new assignment uses the current catalog.
      const next = await h.call("PUT", "/partners/acme/caab/subjects/reimport-agent/policies/orders", {
        token: t.acmeAdmin,
        body: {
          allowed_permission_ids: ["orders:post:/orders/{orderId}/refunds"],
          ttl_seconds: 3600,
          auth_profile_ref: "none",
        },
      });
      assert.equal(next.status, 200, next.text);
      assert.equal(next.body.assignment.catalog_version, "2");
    });

    it("an identical re-import stores nothing new (200)", async () => {
      const body = { capability_id: "same", name: "Same", document: smallApi(), auth_profile_ref: "k" };
      assert.equal(
        (await h.call("POST", "/partners/acme/api-specs/import-openapi", { token: t.acmeAdmin, body }))
          .status,
        201,
      );
      const again = await h.call("POST", "/partners/acme/api-specs/import-openapi", {
        token: t.acmeAdmin,
        body,
      });
      assert.equal(again.status, 200);
      assert.equal(again.body.is_new_version, false);
      assert.equal(again.body.catalog_version, "1");
      assert.equal(again.body.created, false);
    });

    it("answers 400 listing the problems of a bad spec and stores nothing", async () => {
      const before = await h.store.count(collections.catalogVersions);
      const r = await h.call("POST", "/partners/acme/api-specs/import-openapi", {
        token: t.acmeAdmin,
        body: {
          capability_id: "broken",
          name: "Broken",
          document: readText("test/fixtures/openapi/broken/undeclared-path-param.yaml"),
          format: "yaml",
          auth_profile_ref: "k",
        },
      });
      assert.equal(r.status, 400);
      assert.equal(r.body.details.reason, "invalid_openapi");
      assert.ok(r.body.details.problems.length >= 1);
      assert.equal(await h.store.count(collections.catalogVersions), before);
      assert.equal(
        (await h.call("GET", "/partners/acme/capabilities/broken", { token: t.admin })).status,
        404,
      );
    });

    it("answers 400 for a bad upstream base URL and for schema problems", async () => {
      const r = await h.call("POST", "/partners/acme/api-specs/import-openapi", {
        token: t.acmeAdmin,
        body: {
          capability_id: "orders",
          name: "Orders",
          document: smallApi(),
          upstream_base_url: "ftp://user:pw@example.com",
          auth_profile_ref: "k",
        },
      });
      assert.equal(r.status, 400);
      assert.ok(r.body.details.problems.length >= 1);
      const schema = await h.call("POST", "/partners/acme/api-specs/import-openapi", {
        token: t.acmeAdmin,
        body: { capability_id: "has:colon", name: "x", document: smallApi(), auth_profile_ref: "k" },
      });
      assert.equal(schema.status, 400);
    });

    it("checks roles and partners", async () => {
      const body = { capability_id: "x", name: "x", document: smallApi(), auth_profile_ref: "k" };
      assert.equal((await h.call("POST", "/partners/acme/api-specs/import-openapi", { body })).status, 401);
      for (const token of [t.globexAdmin, t.auditor, t.agent]) {
        const r = await h.call("POST", "/partners/acme/api-specs/import-openapi", { token, body });
        assert.equal(r.status, 403);
      }
      const unknown = await h.call("POST", "/partners/ghost/api-specs/import-openapi", {
        token: t.admin,
        body,
      });
      assert.equal(unknown.status, 404);
    });
  });

  describe("GET /partners/{id}/capabilities", () => {
    it("lists a partner's capabilities with their current version", async () => {
      const r = await h.call("GET", "/partners/acme/capabilities", { token: t.acmeAdmin });
      assert.equal(r.status, 200);
      const orders = r.body.items.find((c: { capability_id: string }) => c.capability_id === "orders");
      assert.equal(orders.current_version, "2");
      assert.equal(orders.operation_count, 5);
      assert.equal(
        (await h.call("GET", "/partners/globex/capabilities", { token: t.globexAdmin })).body.items.length,
        0,
      );
      assert.equal(
        (await h.call("GET", "/partners/acme/capabilities", { token: t.globexAdmin })).status,
        403,
      );
      assert.equal((await h.call("GET", "/partners/acme/capabilities/nope", { token: t.admin })).status, 404);
    });
  });
});
