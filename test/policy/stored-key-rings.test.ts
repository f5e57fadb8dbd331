import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Kek } from "../../src/crypto/index.ts";
import { createLocalPolicyProtector } from "../../src/policy/local-protector.ts";
import { PolicyProtectionError } from "../../src/policy/protector.ts";
import { createStoredKeyRings, KEY_RINGS_COLLECTION } from "../../src/policy/stored-key-rings.ts";
import { openStore } from "../../src/store/index.ts";
import type { Store } from "../../src/store/store.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

const context = { cryptoVersion: "subject_credentials_v1", subjectId: "agent-1", partnerId: "p" } as const;

describe("key rings stored under the KEK", () => {
  let dir: TempDir;
  let store: Store;
  const kek = Kek.generate().kek;

  before(async () => {
    dir = await makeTempDir("key-rings-");
    store = await openStore(`sqlite:${join(dir.path, "a.db")}`);
  });
  after(async () => {
    await store.close();
    await dir.cleanup();
  });

  test("concurrent creators (separate instances) agree on one ring", async () => {
    const sources = Array.from({ length: 5 }, () => createStoredKeyRings({ store, kek }));
    const rings = await Promise.all(sources.map((source) => source.keyRing("subject:race")));
    const ids = new Set(rings.map((ring) => ring.current.keyId));
    assert.equal(ids.size, 1);
    assert.equal(await store.count(KEY_RINGS_COLLECTION), 1);
  });

  test("what one process protects, another with the same store and KEK opens", async () => {
    const a = createLocalPolicyProtector({
      keyRings: createStoredKeyRings({ store, kek }),
      serviceIdentity: "svc",
    });
    const b = createLocalPolicyProtector({
      keyRings: createStoredKeyRings({ store, kek }),
      serviceIdentity: "svc",
    });
    const artifact = await a.protect('{"x":1}', context);
    assert.equal((await b.open(artifact, context)).document, '{"x":1}');
    const stored = JSON.stringify(await store.get(KEY_RINGS_COLLECTION, "subject:agent-1"));
    assert.equal(stored.includes("kemPrivateKey"), true);
    assert.equal(stored.includes("PRIVATE KEY"), false);
  });

  test("a different KEK cannot use the rings: keys unavailable, not a bad artifact", async () => {
    const a = createLocalPolicyProtector({
      keyRings: createStoredKeyRings({ store, kek }),
      serviceIdentity: "svc",
    });
    const artifact = await a.protect('{"x":2}', context);
    const wrong = createLocalPolicyProtector({
      keyRings: createStoredKeyRings({ store, kek: Kek.generate().kek }),
      serviceIdentity: "svc",
    });
    await assert.rejects(wrong.open(artifact, context), (error: unknown) => {
      assert.ok(error instanceof PolicyProtectionError);
      assert.equal(error.code, "policy_protection_unavailable");
      return true;
    });
  });
});
