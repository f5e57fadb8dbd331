import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { createCapabilityResolver } from "../../src/policy/capability-resolver.ts";
import { PolicyLoadError } from "../../src/policy/loader.ts";
import { openStore } from "../../src/store/index.ts";
import { collections, storeKeys } from "../../src/store/model.ts";
import type { Store } from "../../src/store/store.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";
import { CAPABILITY, PARTNER, seedCapability, snapshot } from "../servers/authority/runtime/seed.ts";

describe("capability resolver", () => {
  let dir: TempDir;
  let store: Store;

  before(async () => {
    dir = await makeTempDir("resolver-");
    store = await openStore(`sqlite:${join(dir.path, "a.db")}`);
  });
  after(async () => {
    await store.close();
    await dir.cleanup();
  });

  test("resolves the current catalog version in the partner's scope only", async () => {
    await seedCapability(store);
    const resolver = createCapabilityResolver(store);
    const capability = await resolver.resolve(PARTNER, CAPABILITY);
    assert.equal(capability?.catalog_version, "1");
    assert.equal(capability?.operations.length, 5);
    assert.equal(await resolver.resolve("partner-2", CAPABILITY), undefined);
    assert.equal(await resolver.resolve(PARTNER, "other"), undefined);
    assert.equal(await resolver.resolve(PARTNER, "bad:id"), undefined);
    // Cached per version: the same object comes back (so its path matcher is built once).
    assert.equal(await resolver.resolve(PARTNER, CAPABILITY), capability);
  });

  test("a new current version takes effect on the next call", async () => {
    const resolver = createCapabilityResolver(store);
    const v1 = await resolver.resolve(PARTNER, CAPABILITY);
    await seedCapability(store, { version: "2", operations: [snapshot("GET", "/v2/things")] });
    const v2 = await resolver.resolve(PARTNER, CAPABILITY);
    assert.notEqual(v2, v1);
    assert.equal(v2?.catalog_version, "2");
    assert.deepEqual(
      v2?.operations.map((op) => op.path),
      ["/v2/things"],
    );
  });

  test("a missing or invalid catalog version does not resolve, and the invalid one is reported", async () => {
    const reported: unknown[] = [];
    const resolver = createCapabilityResolver(store, { onInvalidCatalog: (info) => reported.push(info) });
    await seedCapability(store, {
      capabilityId: "broken",
      operations: [snapshot("GET", "/a/{x}"), snapshot("GET", "/a/{y}")],
    });
    assert.equal(await resolver.resolve(PARTNER, "broken"), undefined);
    assert.equal(reported.length, 1);
    await store.delete(collections.catalogVersions, storeKeys.catalogVersion(PARTNER, "broken", "1"));
    await store.put(collections.capabilities, storeKeys.capability(PARTNER, "broken"), {
      ...(await store.get<Record<string, unknown>>(
        collections.capabilities,
        storeKeys.capability(PARTNER, "broken"),
      )),
      current_version: "7",
    });
    assert.equal(await resolver.resolve(PARTNER, "broken"), undefined);
  });

  test("a store that cannot be read throws upstream_unavailable", async () => {
    const closedDir = await makeTempDir("resolver-closed-");
    const closed = await openStore(`sqlite:${join(closedDir.path, "b.db")}`);
    await closed.close();
    await assert.rejects(createCapabilityResolver(closed).resolve(PARTNER, CAPABILITY), PolicyLoadError);
    await closedDir.cleanup();
  });
});
