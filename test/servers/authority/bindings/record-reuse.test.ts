/**
 * The binding's records (workload client, binding, mapping, experience, auth profile) are
 * reused for `record-cache-ms` on each replica: an invoke reads none of them again within the
 * bound, and a revocation, a disabled binding or a removed mapping refuses the next invoke on
 * every replica once the bound has passed — on the replica that made the change, at once.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { BINDING_RECORD_COLLECTIONS } from "../../../../src/bindings/binding-records.ts";
import { bindingCollections, bindingKeys } from "../../../../src/store/binding-model.ts";
import { collections } from "../../../../src/store/model.ts";
import type { Store } from "../../../../src/store/store.ts";
import { BINDING, type BindingsHarness, startBindingsHarness } from "./harness.ts";

/** The store, counting the document reads per collection. */
function countingReads(store: Store): { store: Store; reads: Map<string, number> } {
  const reads = new Map<string, number>();
  const counted = new Proxy(store, {
    get(target, property) {
      if (property === "get") {
        return (collection: string, id: string) => {
          reads.set(collection, (reads.get(collection) ?? 0) + 1);
          return target.get(collection, id);
        };
      }
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { store: counted, reads };
}

/** The reads of the binding's records, by collection. */
const bindingReads = (reads: Map<string, number>): Record<string, number> =>
  Object.fromEntries([...reads].filter(([collection]) => BINDING_RECORD_COLLECTIONS.has(collection)).sort());

const LIST = { capability_id: "customers", method: "GET", path: "/customers" };
/** The replicas' bound in the refusal test: short, so the test waits little past it. */
const BOUND_MS = 150;

describe("binding records reused for record-cache-ms", () => {
  let h: BindingsHarness;
  before(async () => {
    h = await startBindingsHarness();
  });
  after(() => h.close());

  it("an invoke within the bound reads none of the binding's records; with 0 it reads them all", async () => {
    const reading = countingReads(h.store);
    const cached = await h.startReplica({ store: reading.store, config: { recordCacheMs: 60_000 } });
    assert.equal((await h.invoke(LIST, { base: cached.url })).status, 200);
    reading.reads.clear();
    assert.equal((await h.invoke(LIST, { base: cached.url })).status, 200);
    // Only the secret's freshness check reads the auth profile (the executor's secret cache).
    assert.deepEqual(bindingReads(reading.reads), { [collections.authProfiles]: 1 });

    const direct = countingReads(h.store);
    const uncached = await h.startReplica({ store: direct.store, config: { recordCacheMs: 0 } });
    assert.equal((await h.invoke(LIST, { base: uncached.url })).status, 200);
    direct.reads.clear();
    assert.equal((await h.invoke(LIST, { base: uncached.url })).status, 200);
    assert.deepEqual(bindingReads(direct.reads), {
      [collections.authProfiles]: 2,
      [bindingCollections.experiences]: 1,
      [bindingCollections.mappings]: 1,
      [bindingCollections.bindings]: 1,
      [bindingCollections.workloadClients]: 1,
    });
  });

  it("a revoked client, a disabled binding and a removed mapping are refused on every replica after the bound", async () => {
    const replicas = [
      await h.startReplica({ config: { recordCacheMs: BOUND_MS } }),
      await h.startReplica({ config: { recordCacheMs: BOUND_MS } }),
    ];
    const warm = async (options: { token?: string; assertion?: string } = {}) => {
      for (const replica of replicas) {
        assert.equal((await h.invoke(LIST, { ...options, base: replica.url })).status, 200);
      }
    };
    const refusedEverywhere = async (
      options: { token?: string; assertion?: string },
      expected: readonly [number, string],
    ) => {
      await sleep(BOUND_MS + 50);
      for (const replica of replicas) {
        const reply = await h.invoke(LIST, { ...options, base: replica.url });
        assert.deepEqual([reply.status, reply.body.error ?? reply.body.reason], expected, replica.url);
      }
    };

    // A revoked workload client.
    const created = await h.call("POST", `/v1/bindings/${BINDING}/workload-clients`, {
      token: h.admin,
      body: { name: "reuse-revoked", scopes: ["authority/bindings.invoke"] },
    });
    const token = await h.workloadToken({
      client_id: created.body.client.client_id,
      client_secret: created.body.client_secret,
    });
    await warm({ token });
    const revoked = await h.call(
      "DELETE",
      `/v1/bindings/${BINDING}/workload-clients/${created.body.client.client_id}`,
      { token: h.admin },
    );
    assert.equal(revoked.body.status, "revoked");
    await refusedEverywhere({ token }, [401, "invalid_token"]);

    // A removed mapping (the record gone from the store).
    const subjectId = await h.mapUser("user-reuse");
    const assertion = await h.userAssertion("user-reuse");
    await warm({ assertion });
    assert.ok(await h.store.delete(bindingCollections.mappings, bindingKeys.mapping(BINDING, subjectId)));
    await refusedEverywhere({ assertion }, [401, "missing_subject"]);

    // A disabled binding.
    await warm();
    const disabled = await h.call("PATCH", `/v1/bindings/${BINDING}`, {
      token: h.admin,
      body: { active: false },
    });
    assert.equal(disabled.status, 200);
    await refusedEverywhere({}, [401, "missing_subject"]);
    const enabled = await h.call("PATCH", `/v1/bindings/${BINDING}`, {
      token: h.admin,
      body: { active: true },
    });
    assert.equal(enabled.status, 200);
  });

  it("a change made through a replica counts on that replica at once, whatever the bound", async () => {
    const replica = await h.startReplica({ config: { recordCacheMs: 60_000 } });
    assert.equal((await h.invoke(LIST, { base: replica.url })).status, 200);
    const disabled = await h.call(
      "PATCH",
      `/v1/bindings/${BINDING}`,
      { token: h.admin, body: { active: false } },
      replica.url,
    );
    assert.equal(disabled.status, 200);
    const refused = await h.invoke(LIST, { base: replica.url });
    assert.deepEqual([refused.status, refused.body.error ?? refused.body.reason], [401, "missing_subject"]);
    const enabled = await h.call(
      "PATCH",
      `/v1/bindings/${BINDING}`,
      { token: h.admin, body: { active: true } },
      replica.url,
    );
    assert.equal(enabled.status, 200);
    assert.equal((await h.invoke(LIST, { base: replica.url })).status, 200);
  });
});
