import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { bindingCollections } from "../../../../src/store/binding-model.ts";
import { BINDING, type BindingsHarness, PARTNER, startBindingsHarness } from "./harness.ts";

const READ = { capability_id: "customers", method: "GET", path: "/customers/cus_00000001" };

describe("deleting a partner reaches its bindings", () => {
  let h: BindingsHarness;
  before(async () => {
    h = await startBindingsHarness();
  });
  after(() => h.close());

  it("after a cascade delete, nothing of the partner authenticates: issued tokens, clients, replays", async () => {
    const issued = await h.workloadToken(h.agent);
    const experience = await h.call("PUT", `/v1/bindings/${BINDING}/experience`, {
      token: h.admin,
      body: { capabilities: [{ capability_id: "customers" }] },
    });
    assert.equal(experience.status, 201);
    const first = await h.invoke(READ, { token: issued, key: "replayable-key-1" });
    assert.equal(first.status, 200, JSON.stringify(first.body));
    const evidenceBefore = await h.store.list(bindingCollections.invocations, { prefix: `${BINDING}/` });
    assert.ok(evidenceBefore.items.length > 0);

    const refused = await h.call("DELETE", `/partners/${PARTNER}`, { token: h.admin });
    assert.equal(refused.status, 409);
    assert.equal(refused.body.details.contents.bindings, 1);

    const done = await h.call("DELETE", `/partners/${PARTNER}?cascade=true`, { token: h.admin });
    assert.equal(done.status, 200, JSON.stringify(done.body));
    assert.ok(done.body.deleted_workload_clients >= 2, "the agent's and the upstream's clients");

    // A token issued before the deletion is refused, and so is a replay of a stored result.
    const withOldToken = await h.invoke(READ, { token: issued });
    assert.equal(withOldToken.status, 401, JSON.stringify(withOldToken.body));
    const replay = await h.invoke(READ, { token: issued, key: "replayable-key-1" });
    assert.equal(replay.status, 401);
    // The client cannot obtain a new token.
    const token = await h.call("POST", `/v1/bindings/${BINDING}/token`, {
      body: {
        grant_type: "client_credentials",
        client_id: h.agent.client_id,
        client_secret: h.agent.client_secret,
      },
    });
    assert.equal(token.status, 401, JSON.stringify(token.body));
    assert.equal((await h.call("GET", `/v1/bindings/${BINDING}`, { token: h.admin })).status, 404);
    for (const collection of [
      bindingCollections.bindings,
      bindingCollections.workloadClients,
      bindingCollections.bindingWorkloadClients,
      bindingCollections.mappings,
      bindingCollections.idempotency,
      bindingCollections.experiences,
    ]) {
      const left = await h.store.list(collection, {});
      assert.equal(left.items.length, 0, collection);
    }
    // Evidence is audit: it stays.
    const evidenceAfter = await h.store.list(bindingCollections.invocations, { prefix: `${BINDING}/` });
    assert.equal(evidenceAfter.items.length, evidenceBefore.items.length);
  });
});
