import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { BINDING, type BindingsHarness, PARTNER, startBindingsHarness } from "./harness.ts";

const LIST = "customers:get:/customers";
const GET_ONE = "customers:get:/customers/{customerId}";
const DELETE_ONE = "customers:delete:/customers/{customerId}";

describe("binding experience", () => {
  let h: BindingsHarness;
  let partnerAdmin: string;
  let otherAdmin: string;
  let auditor: string;
  let secondBinding: string;
  before(async () => {
    h = await startBindingsHarness();
    partnerAdmin = await h.adminToken(["partner_admin"], PARTNER);
    otherAdmin = await h.adminToken(["partner_admin"], "globex");
    auditor = await h.adminToken(["auditor"]);
    const created = await h.call("POST", `/partners/${PARTNER}/bindings`, {
      token: h.admin,
      body: {
        issuer: h.partnerIdp.issuer,
        jwks_url: h.partnerIdp.jwksUri,
        audience: "acme-api",
        tenant_value: "acme-tenant",
      },
    });
    assert.equal(created.status, 201);
    secondBinding = created.body.binding_id;
  });
  after(async () => {
    await h.close();
  });

  const path = (binding: string) => `/v1/bindings/${binding}/experience`;
  const put = (body: unknown, token = h.admin, binding = BINDING) =>
    h.call("PUT", path(binding), { token, body });
  const patch = (body: unknown, token = h.admin, binding = BINDING) =>
    h.call("PATCH", path(binding), { token, body });
  const invokeGet = (p: string) => h.invoke({ capability_id: "customers", method: "GET", path: p });

  it("creates, reads, replaces, updates and disables an experience, each change audited", async () => {
    const missing = await h.call("GET", path(secondBinding), { token: auditor });
    assert.equal(missing.status, 404);
    assert.equal((await patch({ enabled: false }, partnerAdmin, secondBinding)).status, 404);

    const body = {
      display_name: "Acme assistant",
      capabilities: [
        {
          capability_id: "customers",
          tools: [
            { permission_id: LIST, display_name: "Find customers", description: "Search your customers" },
          ],
        },
      ],
      consent: { text: "The assistant may read your customer list.", version: "2026-11" },
    };
    const created = await put(body, partnerAdmin, secondBinding);
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.deepEqual(
      {
        ...created.body,
        created_at: undefined,
        updated_at: undefined,
      },
      {
        binding_id: secondBinding,
        partner_id: PARTNER,
        enabled: true,
        display_name: "Acme assistant",
        capabilities: [
          {
            capability_id: "customers",
            tools: [
              { permission_id: LIST, display_name: "Find customers", description: "Search your customers" },
            ],
          },
        ],
        consent: { text: "The assistant may read your customer list.", version: "2026-11" },
        revision: 1,
        created_at: undefined,
        updated_at: undefined,
      },
    );
    const read = await h.call("GET", path(secondBinding), { token: auditor });
    assert.equal(read.status, 200);
    assert.deepEqual(read.body, created.body);

    const replaced = await put(
      { capabilities: [{ capability_id: "customers" }] },
      partnerAdmin,
      secondBinding,
    );
    assert.equal(replaced.status, 200);
    assert.equal(replaced.body.revision, 2);
    assert.equal(replaced.body.created_at, created.body.created_at);
    assert.deepEqual(replaced.body.capabilities, [{ capability_id: "customers", tools: null }]);
    assert.equal(replaced.body.consent, null);
    assert.equal(replaced.body.display_name, null);

    const consented = await patch(
      { consent: { text: "v2 wording", version: "2" } },
      partnerAdmin,
      secondBinding,
    );
    assert.equal(consented.status, 200);
    assert.deepEqual([consented.body.revision, consented.body.consent.version], [3, "2"]);
    assert.deepEqual(consented.body.capabilities, replaced.body.capabilities);

    const disabled = await patch({ enabled: false }, partnerAdmin, secondBinding);
    assert.deepEqual([disabled.status, disabled.body.enabled, disabled.body.revision], [200, false, 4]);

    const removed = await h.call("DELETE", path(secondBinding), { token: partnerAdmin });
    assert.deepEqual([removed.status, removed.body.revision], [200, 4]);
    assert.equal((await h.call("GET", path(secondBinding), { token: auditor })).status, 404);
    assert.equal((await h.call("DELETE", path(secondBinding), { token: partnerAdmin })).status, 404);
    const again = await put(
      { capabilities: [{ capability_id: "customers" }], enabled: false },
      partnerAdmin,
      secondBinding,
    );
    assert.deepEqual([again.status, again.body.revision], [201, 1]);

    const audit = await h.call("GET", `/admin/audit?kind=binding_change&partner=${PARTNER}`, {
      token: auditor,
    });
    assert.equal(audit.status, 200);
    const rows = audit.body.items.filter((row: { binding_id: string }) => row.binding_id === secondBinding);
    assert.deepEqual(
      rows.map((row: { action: string; revision: number; enabled: boolean }) => [
        row.action,
        row.revision,
        row.enabled,
      ]),
      [
        ["experience_put", 1, true],
        ["experience_put", 2, true],
        ["experience_update", 3, true],
        ["experience_update", 4, false],
        ["experience_delete", 4, false],
        ["experience_put", 1, false],
      ],
    );
    for (const row of rows) {
      assert.equal(row.actor, `partner_admin-${PARTNER}`);
      assert.equal(row.partner_id, PARTNER);
      assert.equal(typeof row.requestId, "string");
    }
  });

  it("lets only the binding's partner admins and admins write it; auditors read", async () => {
    const body = { capabilities: [{ capability_id: "customers" }] };
    assert.equal((await put(body, otherAdmin, secondBinding)).status, 403);
    assert.equal((await patch({ enabled: true }, otherAdmin, secondBinding)).status, 403);
    assert.equal((await h.call("GET", path(secondBinding), { token: otherAdmin })).status, 403);
    assert.equal((await put(body, auditor, secondBinding)).status, 403);
    assert.equal((await patch({ enabled: true }, auditor, secondBinding)).status, 403);
    assert.equal((await h.call("DELETE", path(secondBinding), { token: otherAdmin })).status, 403);
    assert.equal((await h.call("DELETE", path(secondBinding), { token: auditor })).status, 403);
    assert.equal((await h.call("GET", path(secondBinding), {})).status, 401);
    assert.equal((await put(body, h.admin, "no-such-binding")).status, 404);
  });

  it("refuses invalid experiences with 400 and keeps the stored one", async () => {
    const before = await h.call("GET", path(secondBinding), { token: h.admin });
    const cases: unknown[] = [
      {},
      { capabilities: "customers" },
      { capabilities: [{ capability_id: "customers" }], extra: true },
      { capabilities: [{ capability_id: "customers", tools: [{ permission_id: "not a permission" }] }] },
      { capabilities: [{ capability_id: "customers", tools: [{ permission_id: "billing:get:/invoices" }] }] },
      { capabilities: [{ capability_id: "customers" }, { capability_id: "customers" }] },
      {
        capabilities: [
          { capability_id: "customers", tools: [{ permission_id: LIST }, { permission_id: LIST }] },
        ],
      },
      { capabilities: [{ capability_id: "customers", tools: [{ permission_id: LIST, display_name: "" }] }] },
      { capabilities: [], consent: { text: "no version" } },
      { capabilities: [], consent: { text: "x", version: "has spaces" } },
      { capabilities: [], enabled: "yes" },
    ];
    for (const body of cases) {
      const reply = await put(body, h.admin, secondBinding);
      assert.equal(reply.status, 400, JSON.stringify(body));
      assert.equal(reply.body.error, "invalid_request", JSON.stringify(reply.body));
    }
    assert.equal((await patch({}, h.admin, secondBinding)).status, 400);
    assert.equal((await patch({ revision: 9 }, h.admin, secondBinding)).status, 400);
    const after = await h.call("GET", path(secondBinding), { token: h.admin });
    assert.deepEqual(after.body, before.body);
  });

  it("narrows invoke to the experience's tools, recorded as denied, without calling the upstream", async () => {
    // No experience: the policy alone decides.
    assert.equal((await invokeGet("/customers/cus_00000001")).status, 200);

    const written = await put({
      capabilities: [{ capability_id: "customers", tools: [{ permission_id: LIST, display_name: "Find" }] }],
    });
    assert.equal(written.status, 201);
    const received = h.upstream.received.length;
    const hidden = await invokeGet("/customers/cus_00000001");
    assert.equal(hidden.status, 403);
    assert.deepEqual(hidden.body, {
      status: "denied",
      reason: "operation_not_allowed",
      requestId: hidden.body.requestId,
      rule: "binding/experience",
    });
    // The same operation named by its permission id is hidden too.
    const byId = await h.invoke({ capability_id: "customers", permission_id: GET_ONE });
    assert.deepEqual([byId.status, byId.body.reason], [403, "operation_not_allowed"]);
    assert.equal(h.upstream.received.length, received, "nothing reached the upstream");
    assert.equal((await invokeGet("/customers")).status, 200);

    const evidence = await h.call("GET", `/v1/bindings/${BINDING}/invocations?limit=1000`, {
      token: h.admin,
    });
    const denied = evidence.body.items.filter(
      (e: { decision: string; reason: string; capability_id: string }) =>
        e.decision === "denied" && e.reason === "operation_not_allowed",
    );
    assert.ok(denied.length >= 2);
    const audit = await h.call(
      "GET",
      `/admin/audit?kind=decision&decision=denied&reason=operation_not_allowed&subject=${h.subjectId}`,
      { token: h.admin },
    );
    assert.ok(audit.body.items.length >= 2, JSON.stringify(audit.body));
    assert.ok(audit.body.items.every((row: { transport: string }) => row.transport === "invoke"));
  });

  it("narrows broker execute the same way", async () => {
    const token = await h.workloadToken(h.agent, "authority/authority.broker.execute");
    const execute = async (operation: string, args: unknown = {}) =>
      h.call("POST", "/v1/broker/execute", {
        token,
        body: {
          binding_id: BINDING,
          capability_id: "customers",
          operation_id: operation,
          arguments: args,
        },
        headers: { "x-authority-user-assertion": await h.userAssertion() },
      });
    const received = h.upstream.received.length;
    const hidden = await execute("getCustomer", { path: { customerId: "cus_00000001" } });
    assert.deepEqual([hidden.status, hidden.body.reason], [403, "operation_not_allowed"]);
    assert.equal(h.upstream.received.length, received);
    const listed = await execute("listCustomers");
    assert.equal(listed.status, 200, JSON.stringify(listed.body));
  });

  it("denies a capability the experience does not list", async () => {
    assert.equal((await put({ capabilities: [] })).status, 200);
    const reply = await invokeGet("/customers");
    assert.deepEqual([reply.status, reply.body.reason], [403, "operation_not_allowed"]);
  });

  it("a disabled experience denies everything of the binding; enabling restores it", async () => {
    assert.equal((await put({ capabilities: [{ capability_id: "customers" }] })).status, 200);
    assert.equal(
      (await invokeGet("/customers/cus_00000001")).status,
      200,
      "tools: null shows every allowed tool",
    );
    const stored = await h.invoke(
      { capability_id: "customers", method: "GET", path: "/customers" },
      { key: "experience-replay" },
    );
    assert.equal(stored.status, 200);
    assert.equal((await patch({ enabled: false })).status, 200);
    // A stored result is not replayed once the experience hides the call.
    const replay = await h.invoke(
      { capability_id: "customers", method: "GET", path: "/customers" },
      { key: "experience-replay" },
    );
    assert.deepEqual([replay.status, replay.body.reason], [403, "operation_not_allowed"]);
    for (const p of ["/customers", "/customers/cus_00000001"]) {
      const reply = await invokeGet(p);
      assert.deepEqual([reply.status, reply.body.reason], [403, "operation_not_allowed"], p);
    }
    assert.equal((await patch({ enabled: true })).status, 200);
    assert.equal((await invokeGet("/customers")).status, 200);
  });

  it("cannot widen: a tool the policy does not allow stays denied when the experience names it", async () => {
    const written = await put({
      capabilities: [
        { capability_id: "customers", tools: [{ permission_id: DELETE_ONE, display_name: "Delete" }] },
        { capability_id: "billing" },
      ],
    });
    assert.equal(written.status, 200);
    const received = h.upstream.received.length;
    const deleted = await h.invoke({
      capability_id: "customers",
      method: "DELETE",
      path: "/customers/cus_00000001",
    });
    assert.deepEqual([deleted.status, deleted.body.reason], [403, "operation_not_allowed"]);
    const billing = await h.invoke({ capability_id: "billing", method: "GET", path: "/invoices" });
    assert.deepEqual([billing.status, billing.body.reason], [403, "unknown_capability"]);
    assert.equal(h.upstream.received.length, received);
    // Without an experience the policy alone decides again.
    assert.equal((await h.call("DELETE", path(BINDING), { token: h.admin })).status, 200);
    assert.equal((await invokeGet("/customers/cus_00000001")).status, 200);
  });
});
