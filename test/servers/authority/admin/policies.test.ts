import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { after, before, describe, it } from "node:test";
import { hashCanonical } from "../../../../src/core/canonical-json.ts";
import type { PolicyDocument } from "../../../../src/core/policy-document.ts";
import { openPolicy, protectPolicy } from "../../../../src/policy/artifact.ts";
import { compilePolicyDocument } from "../../../../src/policy/compile.ts";
import type { PolicyRecord } from "../../../../src/policy/record.ts";
import { readPolicyRecord } from "../../../../src/policy/record-store.ts";
import { collections, logs, type PolicyChangeAuditRecord, storeKeys } from "../../../../src/store/model.ts";
import type { SqliteStore } from "../../../../src/store/sqlite/sqlite-store.ts";
import { cast, type Harness, smallApi, startHarness } from "./harness.ts";

const GET_ORDERS = "orders:get:/orders";
const GET_ORDER = "orders:get:/orders/{orderId}";
const POST_ORDERS = "orders:post:/orders";

describe("admin API: policies", () => {
  let h: Harness;
  let t: Awaited<ReturnType<typeof cast>>;

  const stored = (subjectId: string) => readPolicyRecord(h.store, subjectId);
  const open = async (subjectId: string, partnerId = "acme"): Promise<PolicyDocument> => {
    const record = await stored(subjectId);
    assert.ok(record, "policy record stored");
    return openPolicy(record.artifact, h.protector, {
      cryptoVersion: record.crypto_version,
      subjectId,
      partnerId,
    });
  };
  const put = (subject: string, capability: string, body: unknown, token = t.acmeAdmin) =>
    h.call("PUT", `/partners/acme/caab/subjects/${subject}/policies/${capability}`, { token, body });
  const user = (subject_id: string, extra: Record<string, unknown> = {}) =>
    h.call("POST", "/partners/acme/users", {
      token: t.admin,
      body: { subject_id, subject_type: "agent", display_name: `Agent ${subject_id}`, ...extra },
    });

  before(async () => {
    h = await startHarness();
    t = await cast(h);
    for (const partner_id of ["acme", "globex"]) {
      await h.call("POST", "/partners", { token: t.admin, body: { partner_id, name: partner_id } });
    }
    for (const [capability_id, document] of [
      ["orders", smallApi()],
      ["billing", { ...smallApi(), info: { title: "Billing", version: "1" } }],
    ] as const) {
      const r = await h.call("POST", "/partners/acme/api-specs/import-openapi", {
        token: t.acmeAdmin,
        body: { capability_id, name: capability_id, document, auth_profile_ref: `${capability_id}-key` },
      });
      assert.equal(r.status, 201, r.text);
    }
    await h.call("PUT", "/partners/acme/caab/auth-profiles/orders-key", {
      token: t.acmeAdmin,
      body: {
        type: "static",
        kind: "api_key",
        in: "header",
        name: "x-api-key",
        secret: "orders-top-secret-1",
      },
    });
    const billingKey = await h.call("PUT", "/partners/acme/caab/auth-profiles/billing-key", {
      token: t.acmeAdmin,
      body: { type: "static", kind: "bearer", secret: "billing-top-secret-1" },
    });
    assert.ok(billingKey.status === 200 || billingKey.status === 201, billingKey.text);
    await h.call("POST", "/partners/acme/permission-boundaries", {
      token: t.acmeAdmin,
      body: {
        boundary_id: "read-only",
        name: "Read only orders",
        allowed_capabilities: ["orders"],
        allowed_permission_patterns: ["orders:get:*"],
        max_policy_ttl_seconds: 600,
      },
    });
    for (const id of ["agent-1", "agent-2", "agent-3", "agent-4", "agent-5"])
      assert.equal((await user(id)).status, 201);
    assert.equal((await user("bounded", { boundary_id: "read-only" })).status, 201);
    assert.equal(
      (await user("headless", { subject_type: "external", crypto_version: "platform_service_v2" })).status,
      201,
    );
  });
  after(() => h.close());

  describe("PUT …/subjects/{subject}/policies/{capability}", () => {
    it("stores only an encrypted artifact whose document is exactly what was assigned", async () => {
      const rules = { [GET_ORDER]: [{ path: "/card", mode: "mask", keep_last: 4 }] };
      const r = await put("agent-1", "orders", {
        allowed_permission_ids: [GET_ORDER, GET_ORDERS],
        response_redactions: rules,
        ttl_seconds: 3600,
      });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.body.policy.head, 1);
      assert.equal(r.body.policy.state, "active");
      assert.equal(r.body.policy.encrypted_present, true);
      assert.equal(r.body.policy.artifact, undefined);
      assert.deepEqual(r.body.policy.capabilities, [
        {
          capability_id: "orders",
          catalog_version: "1",
          allowed_permission_ids: [GET_ORDERS, GET_ORDER],
          auth_profile_ref: "orders-key",
        },
      ]);
      assert.deepEqual(r.body.warnings, []);

      const record = await stored("agent-1");
      assert.ok(record);
      assert.ok(record.artifact.length > 0);
      assert.ok(!r.text.includes(record.artifact.slice(0, 40)), "the artifact never appears in a response");
      // Nothing but the sealed artifact carries the operations: the plaintext is not stored.
      assert.ok(!JSON.stringify(record).includes("orders.example.com"));

      const document = await open("agent-1");
      assert.equal(document.schema_version, "authority-user-policy-v1");
      assert.equal(document.revoked_at, null);
      assert.equal(document.expires_at, r.body.assignment.expires_at);
      assert.deepEqual(document.subject, {
        subject_id: "agent-1",
        subject_type: "agent",
        display_name: "Agent agent-1",
      });
      const catalog = await h.call("GET", "/partners/acme/capabilities/orders", { token: t.acmeAdmin });
      const snapshots = catalog.body.operations
        .filter((op: { permission_id: string }) => [GET_ORDERS, GET_ORDER].includes(op.permission_id))
        .map(({ permission_id: _, ...snapshot }: { permission_id: string }) => snapshot);
      assert.deepEqual(JSON.parse(JSON.stringify(document.apis)), [
        {
          capability_id: "orders",
          allowed_permission_ids: [GET_ORDERS, GET_ORDER],
          auth_profile_ref: "orders-key",
          operations: snapshots,
          response_redactions: rules,
        },
      ]);
      assert.equal(record.document_hash, hashCanonical(document));
      assert.equal(record.policy_hash, hashCanonical(document.apis));
      assert.deepEqual(h.notifications.at(-1), { subjectId: "agent-1", head: 1 });
    });

    it("compiles one document with one apis entry per capability; expiry is the earliest", async () => {
      const first = await put("agent-2", "orders", {
        allowed_permission_ids: [GET_ORDERS],
        ttl_seconds: 7200,
      });
      assert.equal(first.status, 200, first.text);
      const expiresAt = new Date(Date.now() + 1800_000).toISOString().replace("Z", "+00:00");
      // A profile that does not exist is refused at assignment time, naming it.
      const missing = await put("agent-2", "billing", {
        allowed_permission_ids: ["billing:post:/orders"],
        expires_at: expiresAt,
        auth_profile_ref: "custom-profile",
      });
      assert.equal(missing.status, 400, missing.text);
      assert.equal(missing.body.error, "invalid_request");
      assert.match(missing.body.message, /"custom-profile" is not defined/);
      assert.deepEqual(missing.body.details, { auth_profile_ref: "custom-profile" });
      assert.equal((await stored("agent-2"))?.head, 1, "nothing was written");
      // `none`: authorization only, no stored profile needed.
      const second = await put("agent-2", "billing", {
        allowed_permission_ids: ["billing:post:/orders"],
        expires_at: expiresAt,
        auth_profile_ref: "none",
      });
      assert.equal(second.status, 200, second.text);
      assert.equal(second.body.policy.head, 2);
      assert.deepEqual(second.body.warnings, []);
      const document = await open("agent-2");
      assert.deepEqual(
        document.apis.map((a) => [a.capability_id, a.auth_profile_ref]),
        [
          ["billing", "none"],
          ["orders", "orders-key"],
        ],
      );
      assert.equal(document.expires_at, new Date(Date.parse(expiresAt)).toISOString());
      // Replacing an assignment keeps one entry per capability.
      const replaced = await put("agent-2", "orders", {
        allowed_permission_ids: [POST_ORDERS],
        ttl_seconds: 7200,
      });
      assert.equal(replaced.body.policy.head, 3);
      const again = await open("agent-2");
      assert.equal(again.apis.length, 2);
      assert.deepEqual(again.apis[1]?.allowed_permission_ids, [POST_ORDERS]);
    });

    it("serializes concurrent changes to one subject: every change lands, heads increase by one", async () => {
      const [a, b] = await Promise.all([
        put("agent-5", "orders", { allowed_permission_ids: [GET_ORDERS], ttl_seconds: 600 }),
        put("agent-5", "billing", { allowed_permission_ids: ["billing:get:/orders"], ttl_seconds: 600 }),
      ]);
      assert.equal(a.status, 200);
      assert.equal(b.status, 200);
      assert.deepEqual([a.body.policy.head, b.body.policy.head].sort(), [1, 2]);
      assert.deepEqual(
        (await open("agent-5")).apis.map((entry) => entry.capability_id),
        ["billing", "orders"],
      );
      const unassigned = await h.call("DELETE", "/partners/acme/caab/subjects/agent-5/policies/orders", {
        token: t.acmeAdmin,
      });
      assert.equal(unassigned.status, 200);
      const revoked = await h.call("DELETE", "/partners/acme/caab/subjects/agent-5/policies/billing", {
        token: t.acmeAdmin,
      });
      assert.equal(revoked.body.policy.state, "revoked");
    });

    it("answers 400 listing permission ids missing from the current catalog", async () => {
      const r = await put("agent-3", "orders", {
        allowed_permission_ids: [GET_ORDERS, "orders:patch:/orders", "billing:get:/orders"],
        ttl_seconds: 60,
      });
      assert.equal(r.status, 400);
      assert.deepEqual(r.body.details.unknown_permission_ids, [
        "orders:patch:/orders",
        "billing:get:/orders",
      ]);
      assert.equal(r.body.details.catalog_version, "1");
      assert.equal(await stored("agent-3"), undefined);
    });

    it("answers 400 for bad expiry, redactions and bodies", async () => {
      const cases: unknown[] = [
        { allowed_permission_ids: [GET_ORDERS] },
        { allowed_permission_ids: [GET_ORDERS], ttl_seconds: 60, expires_at: "2099-01-01T00:00:00Z" },
        { allowed_permission_ids: [GET_ORDERS], expires_at: "2001-01-01T00:00:00Z" },
        { allowed_permission_ids: [GET_ORDERS], expires_at: "tomorrow" },
        { allowed_permission_ids: [GET_ORDERS], ttl_seconds: 0 },
        { allowed_permission_ids: [], ttl_seconds: 60 },
        { allowed_permission_ids: ["not a permission"], ttl_seconds: 60 },
        { allowed_permission_ids: [GET_ORDERS], ttl_seconds: 60, extra: true },
        {
          allowed_permission_ids: [GET_ORDERS],
          ttl_seconds: 60,
          response_redactions: { [GET_ORDER]: [{ path: "/x", mode: "remove" }] },
        },
        {
          allowed_permission_ids: [GET_ORDERS],
          ttl_seconds: 60,
          response_redactions: { [GET_ORDERS]: [{ path: "/x", mode: "remove", keep_last: 2 }] },
        },
      ];
      for (const body of cases) {
        const r = await put("agent-3", "orders", body);
        assert.equal(r.status, 400, JSON.stringify(body));
        assert.equal(r.body.error, "invalid_request");
      }
      const notAllowed = await put("agent-3", "orders", cases[8]);
      assert.deepEqual(notAllowed.body.details.not_in_allowed_permission_ids, [GET_ORDER]);
    });

    it("refuses an assignment outside the subject's permission boundary, listing what is outside", async () => {
      const r = await put("bounded", "orders", {
        allowed_permission_ids: [GET_ORDERS, POST_ORDERS],
        ttl_seconds: 3600,
      });
      assert.equal(r.status, 400);
      assert.equal(r.body.details.reason, "boundary_violation");
      assert.equal(r.body.details.boundary_id, "read-only");
      assert.deepEqual(r.body.details.outside, [POST_ORDERS]);
      assert.equal(r.body.details.max_policy_ttl_seconds, 600);
      assert.equal(r.body.details.requested_ttl_seconds, 3600);

      const capability = await put("bounded", "billing", {
        allowed_permission_ids: ["billing:get:/orders"],
        ttl_seconds: 60,
      });
      assert.equal(capability.status, 400);
      assert.deepEqual(capability.body.details.outside, ["billing", "billing:get:/orders"]);

      const inside = await put("bounded", "orders", {
        allowed_permission_ids: [GET_ORDERS, GET_ORDER],
        ttl_seconds: 600,
      });
      assert.equal(inside.status, 200, inside.text);
    });

    it("refuses headless subjects, unknown subjects and capabilities", async () => {
      const headless = await put("headless", "orders", {
        allowed_permission_ids: [GET_ORDERS],
        ttl_seconds: 60,
      });
      assert.equal(headless.status, 400);
      assert.match(headless.body.message, /headless/);
      assert.equal(
        (await put("nobody", "orders", { allowed_permission_ids: [GET_ORDERS], ttl_seconds: 60 })).status,
        404,
      );
      assert.equal(
        (
          await put("agent-3", "unknown-cap", {
            allowed_permission_ids: ["unknown-cap:get:/x"],
            ttl_seconds: 60,
          })
        ).status,
        404,
      );
    });

    it("checks the caller: 401 without a token, 403 for auditors, agents and other partners", async () => {
      const body = { allowed_permission_ids: [GET_ORDERS], ttl_seconds: 60 };
      assert.equal(
        (await h.call("PUT", "/partners/acme/caab/subjects/agent-3/policies/orders", { body })).status,
        401,
      );
      for (const token of [t.auditor, t.agent, t.globexAdmin]) {
        const r = await put("agent-3", "orders", body, token);
        assert.equal(r.status, 403);
      }
      assert.equal(await stored("agent-3"), undefined);
    });
  });

  describe("reading policies", () => {
    it("GET …/policy and the partner list show public records only", async () => {
      const one = await h.call("GET", "/partners/acme/caab/subjects/agent-1/policy", { token: t.auditor });
      assert.equal(one.status, 200);
      assert.equal(one.body.subject_id, "agent-1");
      assert.equal(one.body.encrypted_present, true);
      assert.equal(one.body.artifact, undefined);
      const record = await stored("agent-1");
      assert.ok(record && !one.text.includes(record.artifact.slice(0, 40)));

      const list = await h.call("GET", "/partners/acme/caab/policies", { token: t.acmeAdmin });
      assert.equal(list.status, 200);
      assert.ok(list.body.items.length >= 3);
      for (const item of list.body.items) {
        assert.equal(item.artifact, undefined);
        assert.equal(item.partner_id, "acme");
      }
      assert.ok(!list.text.includes('"artifact"'));
      // The view carries each capability's reviewed snapshots and links the whole assignment.
      const agent1 = list.body.items.find((item: { subject_id: string }) => item.subject_id === "agent-1");
      const orders = agent1.capabilities.find((c: { capability_id: string }) => c.capability_id === "orders");
      assert.equal(orders.snapshots_total, orders.allowed_permission_ids.length);
      assert.equal(orders.snapshots.length, orders.snapshots_total);
      assert.equal(orders.snapshots_truncated, false);
      for (const snapshot of orders.snapshots) assert.equal(typeof snapshot.path, "string");
      const linked = await h.call("GET", orders.assignment_href, { token: t.acmeAdmin });
      assert.equal(linked.status, 200);
      assert.equal(linked.body.operations.length, orders.snapshots_total);
      assert.equal(
        (await h.call("GET", "/partners/acme/caab/policies", { token: t.globexAdmin })).status,
        403,
      );
      assert.equal(
        (await h.call("GET", "/partners/globex/caab/policies", { token: t.globexAdmin })).body.items.length,
        0,
      );
    });

    it("stores an assignment and its audit record together: when the record cannot be written, neither is", async () => {
      assert.equal((await user("agent-tx")).status, 201);
      const raw = new DatabaseSync((h.store as SqliteStore).path);
      raw.exec(`CREATE TRIGGER refuse_tx_audit BEFORE INSERT ON logs
        WHEN NEW.log = 'audit' AND NEW.subject_id = 'agent-tx'
        BEGIN SELECT RAISE(ABORT, 'audit refused'); END`);
      try {
        const refused = await put("agent-tx", "orders", {
          allowed_permission_ids: [GET_ORDERS],
          ttl_seconds: 600,
        });
        assert.ok(refused.status >= 500, refused.text);
        assert.equal(
          await h.store.get(collections.assignments, storeKeys.assignment("acme", "agent-tx", "orders")),
          undefined,
          "no assignment without its audit record",
        );
      } finally {
        raw.exec("DROP TRIGGER refuse_tx_audit");
        raw.close();
      }
      const stored = await put("agent-tx", "orders", {
        allowed_permission_ids: [GET_ORDERS],
        ttl_seconds: 600,
      });
      assert.equal(stored.status, 200, stored.text);
      const audit = await h.store.queryLog<PolicyChangeAuditRecord>(logs.audit, {
        where: { subject_id: "agent-tx", kind: "policy_change" },
      });
      assert.deepEqual(
        audit.entries.map((e) => e.value.action),
        ["assign"],
      );
    });

    it("GET …/policies/{capability} shows the assignment with its snapshots", async () => {
      const r = await h.call("GET", "/partners/acme/caab/subjects/agent-1/policies/orders", {
        token: t.auditor,
      });
      assert.equal(r.status, 200);
      assert.equal(r.body.operations.length, 2);
      assert.equal(r.body.assigned_by, "acme-admin");
      assert.equal(
        (await h.call("GET", "/partners/acme/caab/subjects/agent-1/policies/billing", { token: t.admin }))
          .status,
        404,
      );
    });

    it("summarises a large snapshot set and links the full assignment", async () => {
      const paths: Record<string, unknown> = {};
      for (let i = 0; i < 30; i++) {
        paths[`/items${i}`] = {
          get: { operationId: `list${i}`, responses: { "200": { description: "ok" } } },
        };
      }
      const imported = await h.call("POST", "/partners/acme/api-specs/import-openapi", {
        token: t.acmeAdmin,
        body: {
          capability_id: "wide",
          name: "Wide",
          document: { ...smallApi(), info: { title: "Wide", version: "1" }, paths },
          auth_profile_ref: "orders-key",
        },
      });
      assert.equal(imported.status, 201, imported.text);
      const ids = Array.from({ length: 30 }, (_, i) => `wide:get:/items${i}`);
      assert.equal(
        (await put("agent-5", "wide", { allowed_permission_ids: ids, ttl_seconds: 600 })).status,
        200,
      );
      const list = await h.call("GET", "/partners/acme/caab/policies", { token: t.auditor });
      const agent5 = list.body.items.find((item: { subject_id: string }) => item.subject_id === "agent-5");
      const wide = agent5.capabilities.find((c: { capability_id: string }) => c.capability_id === "wide");
      assert.equal(wide.snapshots_total, 30);
      assert.equal(wide.snapshots.length, 25);
      assert.equal(wide.snapshots_truncated, true);
      assert.equal(wide.assignment_href, "/partners/acme/caab/subjects/agent-5/policies/wide");
      const full = await h.call("GET", wide.assignment_href, { token: t.auditor });
      assert.equal(full.body.operations.length, 30);
    });

    it("answers 404 for a subject without a policy", async () => {
      const r = await h.call("GET", "/partners/acme/caab/subjects/agent-3/policy", { token: t.admin });
      assert.equal(r.status, 404);
    });
  });

  describe("DELETE …/policies/{capability}", () => {
    it("recompiles without the capability; removing the last one leaves a revoked empty policy", async () => {
      await put("agent-4", "orders", { allowed_permission_ids: [GET_ORDERS], ttl_seconds: 600 });
      await put("agent-4", "billing", { allowed_permission_ids: ["billing:get:/orders"], ttl_seconds: 600 });
      const first = await h.call("DELETE", "/partners/acme/caab/subjects/agent-4/policies/billing", {
        token: t.acmeAdmin,
      });
      assert.equal(first.status, 200, first.text);
      assert.equal(first.body.policy.head, 3);
      assert.equal(first.body.policy.state, "active");
      assert.deepEqual(
        (await open("agent-4")).apis.map((a) => a.capability_id),
        ["orders"],
      );

      const missing = await h.call("DELETE", "/partners/acme/caab/subjects/agent-4/policies/billing", {
        token: t.acmeAdmin,
      });
      assert.equal(missing.status, 404);

      const last = await h.call("DELETE", "/partners/acme/caab/subjects/agent-4/policies/orders", {
        token: t.acmeAdmin,
      });
      assert.equal(last.status, 200);
      assert.equal(last.body.policy.state, "revoked");
      assert.deepEqual(last.body.policy.capabilities, []);
      const document = await open("agent-4");
      assert.deepEqual(document.apis, []);
      assert.equal(document.revoked_at, last.body.policy.revoked_at);
      assert.equal(
        (await h.call("DELETE", "/partners/acme/caab/subjects/agent-4/policies/orders", { token: t.auditor }))
          .status,
        403,
      );
    });
  });

  describe("POST …/policy/revoke", () => {
    it("re-signs the policy with revoked_at inside the signed document", async () => {
      const before = await stored("agent-1");
      assert.ok(before);
      const r = await h.call("POST", "/partners/acme/caab/subjects/agent-1/policy/revoke", {
        token: t.acmeAdmin,
      });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.body.changed, true);
      assert.equal(r.body.policy.state, "revoked");
      assert.equal(r.body.policy.head, before.head + 1);
      const after = await stored("agent-1");
      assert.ok(after);
      assert.notEqual(after.artifact, before.artifact);
      assert.notEqual(after.document_hash, before.document_hash);
      assert.equal(after.policy_hash, before.policy_hash);
      const document = await open("agent-1");
      assert.equal(document.revoked_at, after.revoked_at);
      assert.equal(document.apis.length, 1);
      assert.deepEqual(h.notifications.at(-1), { subjectId: "agent-1", head: after.head });

      const again = await h.call("POST", "/partners/acme/caab/subjects/agent-1/policy/revoke", {
        token: t.acmeAdmin,
      });
      assert.equal(again.status, 200);
      assert.equal(again.body.changed, false);
      assert.equal(again.body.policy.head, after.head);
    });

    it("a revocation reaches the sidecars' change log before its audit record is written (a slow audit write does not hold it up)", async () => {
      const put0 = await put("agent-1", "orders", { allowed_permission_ids: [GET_ORDERS], ttl_seconds: 60 });
      assert.equal(put0.status, 200, put0.text);
      // Audit appends wait until released, whichever store call carries them.
      let release: () => void = () => undefined;
      const released = new Promise<void>((resolve) => {
        release = resolve;
      });
      const store = h.store as unknown as Record<string, (...args: never[]) => Promise<unknown>>;
      const names = ["writeAll", "append", "appendMany", "appendAcross"] as const;
      // Own properties shadow the class's methods for this test only (deleted after).
      const originals = Object.fromEntries(names.map((name) => [name, store[name]]));
      const touchesAudit = (value: unknown): boolean =>
        JSON.stringify(value ?? null).includes(`"${logs.audit}"`);
      for (const name of names) {
        const original = originals[name];
        if (original === undefined) continue;
        store[name] = async (...args: never[]) => {
          if (touchesAudit(args[0]) || args[0] === (logs.audit as never)) await released;
          return original.apply(h.store, args);
        };
      }
      try {
        const logged = await h.store.logLength(logs.policyChanges);
        const revoke = h.call("POST", "/partners/acme/caab/subjects/agent-1/policy/revoke", {
          token: t.acmeAdmin,
        });
        for (let i = 0; i < 400 && (await h.store.logLength(logs.policyChanges)) === logged; i++) {
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
        assert.equal(
          await h.store.logLength(logs.policyChanges),
          logged + 1,
          "logged for the sidecars while the audit record is still being written",
        );
        release();
        const r = await revoke;
        assert.equal(r.status, 200, r.text);
        assert.equal(r.body.changed, true);
      } finally {
        release();
        for (const name of names) delete store[name];
      }
    });

    it("a new assignment after revocation issues an active policy", async () => {
      const r = await put("agent-1", "orders", { allowed_permission_ids: [GET_ORDERS], ttl_seconds: 60 });
      assert.equal(r.status, 200);
      assert.equal(r.body.policy.state, "active");
      assert.equal((await open("agent-1")).revoked_at, null);
    });

    it("revokes a headless (v2) policy by re-signing its document", async () => {
      const now = new Date();
      const document = compilePolicyDocument({
        subject: { subject_id: "headless", subject_type: "external", display_name: "Agent headless" },
        cryptoVersion: "platform_service_v2",
        assignments: [],
        expiresAt: new Date(now.getTime() + 600_000).toISOString(),
        revokedAt: null,
        now,
        headless: {
          partnerId: "acme",
          bindingId: "binding-1",
          issuerHash: hashCanonical("issuer"),
          externalSubjectHash: hashCanonical("external"),
          mappingVersion: "1",
        },
      });
      const protectedPolicy = await protectPolicy(document, h.protector, "acme");
      const record: PolicyRecord = {
        subject_id: "headless",
        partner_id: "acme",
        schema_version: document.schema_version,
        crypto_version: "platform_service_v2",
        policy_version: document.policy_version,
        policy_hash: hashCanonical(document.apis),
        document_hash: protectedPolicy.documentHash,
        head: 7,
        expires_at: document.expires_at,
        revoked_at: null,
        capabilities: [],
        artifact: protectedPolicy.artifact,
        updated_at: now.toISOString(),
      };
      await h.store.put(collections.policies, storeKeys.policy("headless"), record);
      const r = await h.call("POST", "/partners/acme/caab/subjects/headless/policy/revoke", {
        token: t.admin,
      });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.body.policy.head, 8);
      const opened = await open("headless");
      assert.equal(opened.schema_version, "authority-user-policy-v2");
      assert.ok(opened.revoked_at);
      if (opened.schema_version === "authority-user-policy-v2") assert.equal(opened.binding_id, "binding-1");
    });

    it("answers 404 without a policy and 403 for auditors", async () => {
      assert.equal(
        (await h.call("POST", "/partners/acme/caab/subjects/agent-3/policy/revoke", { token: t.admin }))
          .status,
        404,
      );
      assert.equal(
        (await h.call("POST", "/partners/acme/caab/subjects/agent-2/policy/revoke", { token: t.auditor }))
          .status,
        403,
      );
    });
  });

  it("audits every change with the shared record shape", async () => {
    const entries = await h.store.readLog<PolicyChangeAuditRecord>(logs.audit, { limit: 1000 });
    const changes = entries.map((e) => e.value).filter((v) => v.kind === "policy_change");
    assert.ok(changes.length >= 10);
    for (const change of changes) {
      assert.deepEqual(Object.keys(change).sort(), [
        "action",
        "actor",
        "capability_id",
        // Chained in the replica's admin stream (decision 2771).
        "chain",
        "kind",
        "partner_id",
        "requestId",
        "subject_id",
        "time",
      ]);
      assert.match((change as { chain?: { stream: string } }).chain?.stream ?? "", /\/admin$/);
    }
    const assign = changes.find((c) => c.subject_id === "agent-1" && c.action === "assign");
    assert.equal(assign?.actor, "acme-admin");
    assert.equal(assign?.capability_id, "orders");
    assert.match(assign?.requestId ?? "", /^req_/);
    const revoke = changes.find((c) => c.subject_id === "agent-1" && c.action === "revoke");
    assert.equal(revoke?.capability_id, null);
    assert.ok(changes.some((c) => c.subject_id === "agent-4" && c.action === "unassign"));
  });
});
