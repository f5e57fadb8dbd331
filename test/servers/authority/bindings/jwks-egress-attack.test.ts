/**
 * Attack, end to end through the authority: a partner admin names an internal address as
 * its binding's `jwks_url` so that the authority fetches it (blind SSRF). Saving it is
 * refused with the egress rule; a binding stored before the gate existed is refused when its
 * key set would be fetched (403 egress_denied). A listener on loopback sees no connection.
 */
import assert from "node:assert/strict";
import { type AddressInfo, createServer, type Server } from "node:net";
import { after, before, describe, it } from "node:test";
import { bindingCollections, bindingKeys } from "../../../../src/store/binding-model.ts";
import { BINDING, type BindingsHarness, PARTNER, startBindingsHarness } from "./harness.ts";

describe("a binding's jwks_url cannot reach internal addresses", () => {
  let h: BindingsHarness;
  let partnerAdmin: string;
  let listener: Server;
  let connections = 0;
  let internalUrl: string;
  before(async () => {
    h = await startBindingsHarness();
    partnerAdmin = await h.adminToken(["partner_admin"], PARTNER);
    listener = createServer((socket) => {
      connections++;
      socket.destroy();
    });
    await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
    internalUrl = `http://127.0.0.1:${(listener.address() as AddressInfo).port}/jwks.json`;
  });
  after(async () => {
    await h.close();
    await new Promise<void>((resolve) => listener.close(() => resolve()));
  });

  it("refuses to save a loopback, link-local or metadata JWKS URL", async () => {
    const base = { issuer: h.partnerIdp.issuer, audience: "a", tenant_value: "t" };
    for (const [jwksUrl, rule] of [
      [internalUrl, "loopback"],
      ["http://localhost:1/jwks.json", "loopback"],
      ["https://169.254.169.254/latest/meta-data/", "metadata"],
      ["https://[fe80::1]/jwks.json", "link_local"],
    ] as const) {
      const created = await h.call("POST", `/partners/${PARTNER}/bindings`, {
        token: partnerAdmin,
        body: { ...base, jwks_url: jwksUrl },
      });
      assert.equal(created.status, 400, `${jwksUrl}: ${JSON.stringify(created.body)}`);
      assert.equal(created.body.details.reason, "egress_denied");
      assert.equal(created.body.details.rule, rule);
      assert.equal(created.body.details.field, "jwks_url");
    }
    const patched = await h.call("PATCH", `/v1/bindings/${BINDING}`, {
      token: partnerAdmin,
      body: { jwks_url: internalUrl },
    });
    assert.equal(patched.status, 400, JSON.stringify(patched.body));
    assert.equal(patched.body.details.reason, "egress_denied");
    assert.equal(connections, 0);
  });

  it("a stored binding whose JWKS URL is internal fetches nothing: invoke is egress_denied", async () => {
    const key = bindingKeys.binding(BINDING);
    const stored = await h.store.get<Record<string, unknown>>(bindingCollections.bindings, key);
    assert.ok(stored !== undefined);
    // As if saved before the gate existed (or by a resolver that answered differently then).
    await h.store.put(bindingCollections.bindings, key, { ...stored, jwks_url: internalUrl });
    try {
      const reply = await h.invoke({ capability_id: "customers", method: "GET", path: "/customers" });
      assert.equal(reply.status, 403, JSON.stringify(reply.body));
      assert.equal(connections, 0);
    } finally {
      await h.store.put(bindingCollections.bindings, key, stored);
    }
    const again = await h.invoke({ capability_id: "customers", method: "GET", path: "/customers" });
    assert.equal(again.status, 200, JSON.stringify(again.body));
  });
});
