import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { bindingCollections } from "../../../../src/store/binding-model.ts";
import { BINDING, type BindingsHarness, type Reply, startBindingsHarness } from "./harness.ts";

describe("broker execute", () => {
  let h: BindingsHarness;
  let token: string;
  before(async () => {
    h = await startBindingsHarness();
    token = await h.workloadToken(h.agent, "authority/authority.broker.execute");
  });
  after(async () => {
    await h.close();
  });

  async function execute(
    body: unknown,
    headers: Record<string, string> = {},
    bearer = token,
  ): Promise<Reply> {
    return h.call("POST", "/v1/broker/execute", {
      token: bearer,
      body,
      headers: { "x-authority-user-assertion": await h.userAssertion(), ...headers },
    });
  }

  it("executes by operation id on the invoke engine, with the same result shape", async () => {
    const before = h.upstream.received.length;
    const reply = await execute({
      binding_id: BINDING,
      capability_id: "customers",
      operation_id: "listPaymentMethods",
      arguments: { path: { customerId: "cus_00000001" } },
    });
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
    assert.equal(reply.body.status, "allowed");
    assert.equal(reply.body.permissionId, "customers:get:/customers/{customerId}/payment-methods");
    const card = reply.body.result.body.items[0];
    assert.equal(card.cvc, undefined, "cvc removed");
    assert.ok(String(card.card_number).endsWith("4242"));
    assert.notEqual(card.card_number, "4242424242424242");
    const seen = h.upstream.received.slice(before);
    assert.equal(seen.length, 1);
    assert.equal(seen[0]?.verifyStatus, 200);
    const evidence = await h.call("GET", `/v1/bindings/${BINDING}/evidence/${reply.body.evidenceId}`, {
      token: h.admin,
    });
    assert.equal(evidence.body.transport, "broker");
  });

  it("accepts method and path without binding_id or Idempotency-Key, and honours a key when sent", async () => {
    const plain = await execute({
      capability_id: "customers",
      method: "GET",
      path: "/customers/cus_00000002",
    });
    assert.equal(plain.status, 200, JSON.stringify(plain.body));
    assert.equal(plain.body.result.body.id, "cus_00000002");
    const handled = h.upstream.handled();
    const body = { capability_id: "customers", method: "GET", path: "/customers" };
    const first = await execute(body, { "idempotency-key": "broker-1" });
    const second = await execute(body, { "idempotency-key": "broker-1" });
    assert.deepEqual(second.body, first.body);
    assert.equal(h.upstream.handled(), handled + 1);
  });

  it("runs none of the idempotency machinery for a call without a key", async () => {
    const touched: string[] = [];
    const watched = new Proxy(h.store, {
      get(target, name) {
        const member = Reflect.get(target, name, target);
        if (typeof member !== "function") return member;
        return (...args: unknown[]) => {
          const writes = name === "writeAll" ? (args[0] as { collection: string }[]) : [];
          const collections = [args[0], ...writes.map((write) => write.collection)];
          if (collections.includes(bindingCollections.idempotency)) touched.push(String(name));
          return member.apply(target, args);
        };
      },
    });
    const replica = await h.startReplica({ store: watched });
    const body = { capability_id: "customers", method: "GET", path: "/customers" };
    const plain = await h.call(
      "POST",
      "/v1/broker/execute",
      { token, body, headers: { "x-authority-user-assertion": await h.userAssertion() } },
      replica.url,
    );
    assert.equal(plain.status, 200, JSON.stringify(plain.body));
    assert.deepEqual(touched, [], "no claim, no `sending`, no kept result");
    const keyed = await h.call(
      "POST",
      "/v1/broker/execute",
      {
        token,
        body,
        headers: {
          "x-authority-user-assertion": await h.userAssertion(),
          "idempotency-key": "broker-watched",
        },
      },
      replica.url,
    );
    assert.equal(keyed.status, 200, JSON.stringify(keyed.body));
    assert.deepEqual(touched, ["create", "putIfMatch", "writeAll"]);
  });

  it("denies operations outside the policy", async () => {
    const before = h.upstream.received.length;
    const denied = await execute({
      capability_id: "customers",
      operation_id: "deleteCustomer",
      arguments: { path: { customerId: "cus_00000001" } },
    });
    assert.equal(denied.status, 403);
    assert.deepEqual(denied.body, {
      status: "denied",
      reason: "operation_not_allowed",
      requestId: denied.body.requestId,
      rule: "decide/allowlist",
      remedy: { action: "request_permission", permission_id: "customers:delete:/customers/{customerId}" },
    });
    const unknown = await execute({ capability_id: "customers", operation_id: "noSuchOperation" });
    assert.deepEqual([unknown.status, unknown.body.reason], [403, "unknown_operation"]);
    assert.equal(h.upstream.received.length, before);
  });

  it("refuses another binding, the wrong scope and a caller-chosen subject", async () => {
    const other = await execute({
      binding_id: "acme-elsewhere",
      capability_id: "customers",
      method: "GET",
      path: "/customers",
    });
    assert.equal(other.status, 403);
    const invokeOnly = await h.workloadToken(h.agent, "authority/bindings.invoke");
    const scoped = await execute(
      { capability_id: "customers", method: "GET", path: "/customers" },
      {},
      invokeOnly,
    );
    assert.equal(scoped.status, 403);
    const chosen = await execute({
      capability_id: "customers",
      method: "GET",
      path: "/customers",
      subject: { subject_id: "x" },
    });
    assert.equal(chosen.status, 400);
    const ambiguous = await execute({
      capability_id: "customers",
      operation_id: "getCustomer",
      method: "GET",
      path: "/customers",
    });
    assert.equal(ambiguous.status, 400);
  });
});
