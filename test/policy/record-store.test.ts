import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { createPolicyLoader, storePolicyRecordSource } from "../../src/policy/loader.ts";
import { createLocalPolicyProtector } from "../../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../../src/policy/process-key-rings.ts";
import type { PolicyProtector } from "../../src/policy/protector.ts";
import type { StoredPolicyRecord } from "../../src/policy/record.ts";
import {
  artifactAddress,
  deletePolicyRecord,
  readPolicyRecord,
  readStoredPolicyRecord,
} from "../../src/policy/record-store.ts";
import { openStore } from "../../src/store/index.ts";
import { collections, storeKeys } from "../../src/store/model.ts";
import type { Store } from "../../src/store/store.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";
import { seedPolicy, seedSubject } from "../servers/authority/runtime/seed.ts";

/** The store, counting reads per collection. */
function countingStore(store: Store): { store: Store; reads: Map<string, number> } {
  const reads = new Map<string, number>();
  const counted: Store = Object.create(store);
  counted.get = <T>(collection: string, id: string) => {
    reads.set(collection, (reads.get(collection) ?? 0) + 1);
    return store.get<T>(collection, id);
  };
  return { store: counted, reads };
}

describe("policy record store (record + artifact by address)", () => {
  let dir: TempDir;
  let store: Store;
  let protector: PolicyProtector;

  before(async () => {
    dir = await makeTempDir("record-store-");
    store = await openStore(`sqlite:${join(dir.path, "a.db")}`);
    protector = createLocalPolicyProtector({ keyRings: createProcessKeyRings(), serviceIdentity: "test" });
  });
  after(async () => {
    await store.close();
    await dir.cleanup();
  });

  test("the record holds the facts and the artifact's address; the artifact sits at that address", async () => {
    const subject = await seedSubject(store, { subjectId: "rs-layout" });
    const written = await seedPolicy(store, protector, { subject, allow: [["GET", "/users/{id}"]] });
    const stored = await readStoredPolicyRecord(store, "rs-layout");
    assert.ok(stored !== undefined);
    assert.equal(stored.artifact, undefined);
    assert.equal(stored.artifact_sha256, artifactAddress(written.artifact));
    assert.equal(
      await store.get(collections.policyArtifacts, artifactAddress(written.artifact)),
      written.artifact,
    );
    assert.deepEqual(await readPolicyRecord(store, "rs-layout"), written);
  });

  test("a new version replaces the artifact; deleting the record deletes its artifact", async () => {
    const subject = await seedSubject(store, { subjectId: "rs-replace" });
    const first = await seedPolicy(store, protector, { subject, allow: [["GET", "/users/{id}"]] });
    const second = await seedPolicy(store, protector, { subject, allow: [["POST", "/invoices"]] });
    assert.equal(await store.get(collections.policyArtifacts, artifactAddress(first.artifact)), undefined);
    assert.equal(
      await store.get(collections.policyArtifacts, artifactAddress(second.artifact)),
      second.artifact,
    );
    assert.equal(await deletePolicyRecord(store, "rs-replace"), true);
    assert.equal(await readStoredPolicyRecord(store, "rs-replace"), undefined);
    assert.equal(await store.get(collections.policyArtifacts, artifactAddress(second.artifact)), undefined);
    assert.equal(await deletePolicyRecord(store, "rs-replace"), false);
  });

  test("a cache hit reads only the small record, never the artifact", async () => {
    const subject = await seedSubject(store, { subjectId: "rs-hit" });
    await seedPolicy(store, protector, { subject, allow: [["GET", "/users/{id}"]] });
    const counting = countingStore(store);
    const loader = createPolicyLoader({ source: storePolicyRecordSource(counting.store), protector });
    for (let i = 0; i < 5; i++) assert.equal((await loader.load("rs-hit")).policy.ok, true);
    assert.equal(counting.reads.get(collections.policies), 5);
    assert.equal(counting.reads.get(collections.policyArtifacts), 1);
    assert.deepEqual(loader.stats(), { hits: 4, misses: 1, opens: 1, verificationFailures: 0 });
  });

  test("an altered artifact at its address, or a missing one, is refused and never opened", async () => {
    const subject = await seedSubject(store, { subjectId: "rs-tamper" });
    const written = await seedPolicy(store, protector, { subject, allow: [["GET", "/users/{id}"]] });
    const address = artifactAddress(written.artifact);
    const bytes = Buffer.from(written.artifact, "base64");
    bytes[10] = (bytes[10] ?? 0) ^ 0x01;
    await store.put(collections.policyArtifacts, address, bytes.toString("base64"));
    const loader = createPolicyLoader({ source: storePolicyRecordSource(store), protector });
    assert.deepEqual((await loader.load("rs-tamper")).policy, {
      ok: false,
      reason: "policy_verification_failed",
    });
    await store.delete(collections.policyArtifacts, address);
    assert.deepEqual((await loader.load("rs-tamper")).policy, {
      ok: false,
      reason: "policy_verification_failed",
    });
    assert.equal(loader.stats().opens, 0);
  });

  test("a record pointing at another subject's artifact is refused", async () => {
    const victim = await seedSubject(store, { subjectId: "rs-victim" });
    const other = await seedSubject(store, { subjectId: "rs-other" });
    await seedPolicy(store, protector, { subject: victim, allow: [["GET", "/users/{id}"]] });
    const otherPolicy = await seedPolicy(store, protector, {
      subject: other,
      allow: [["POST", "/invoices"]],
    });
    const victimRecord = await readStoredPolicyRecord(store, "rs-victim");
    assert.ok(victimRecord !== undefined);
    const swapped = {
      ...victimRecord,
      artifact_sha256: artifactAddress(otherPolicy.artifact),
    } as StoredPolicyRecord;
    await store.put(collections.policies, storeKeys.policy("rs-victim"), swapped);
    const loader = createPolicyLoader({ source: storePolicyRecordSource(store), protector });
    assert.deepEqual((await loader.load("rs-victim")).policy, {
      ok: false,
      reason: "policy_verification_failed",
    });
  });
});
