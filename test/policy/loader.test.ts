import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { createAuditRecorder } from "../../src/audit/recorder.ts";
import { constraintsRolloutGate } from "../../src/core/parameter-constraints.ts";
import { toAuthorityError } from "../../src/errors.ts";
import {
  createPolicyLoader,
  PolicyLoadError,
  type PolicyRecordSource,
  reusedRecordSource,
  storePolicyRecordSource,
  withRevocationMarker,
} from "../../src/policy/loader.ts";
import { createLocalPolicyProtector } from "../../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../../src/policy/process-key-rings.ts";
import type { PolicyProtector } from "../../src/policy/protector.ts";
import type { PolicyRecord } from "../../src/policy/record.ts";
import { writePolicyRecord } from "../../src/policy/record-store.ts";
import { createDecisionRuntime } from "../../src/policy/runtime.ts";
import { openStore } from "../../src/store/index.ts";
import { collections, storeKeys } from "../../src/store/model.ts";
import type { Store } from "../../src/store/store.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";
import { seedPolicy, seedSubject } from "../servers/authority/runtime/seed.ts";

describe("policy loader", () => {
  let dir: TempDir;
  let store: Store;
  let protector: PolicyProtector;

  before(async () => {
    dir = await makeTempDir("loader-");
    store = await openStore(`sqlite:${join(dir.path, "a.db")}`);
    protector = createLocalPolicyProtector({ keyRings: createProcessKeyRings(), serviceIdentity: "test" });
  });
  after(async () => {
    await store.close();
    await dir.cleanup();
  });

  const loaderFor = (p: PolicyProtector = protector) =>
    createPolicyLoader({
      source: storePolicyRecordSource(store),
      protector: p,
      cache: { max: 10, ttlMs: 60_000 },
    });

  test("missing record → missing_policy, without opening anything", async () => {
    const loader = loaderFor();
    const loaded = await loader.load("nobody");
    assert.deepEqual(loaded.policy, { ok: false, reason: "missing_policy" });
    assert.equal(loaded.record, undefined);
    assert.equal(loader.stats().opens, 0);
  });

  test("a second load is a cache hit; a new head is a miss and is seen at once", async () => {
    const subject = await seedSubject(store, { subjectId: "s-cache" });
    await seedPolicy(store, protector, { subject, allow: [["GET", "/users/{id}"]] });
    const loader = loaderFor();
    const first = await loader.load("s-cache", { partnerId: subject.partner_id });
    assert.equal(first.policy.ok, true);
    const second = await loader.load("s-cache");
    assert.equal(second.policy.ok, true);
    assert.deepEqual(loader.stats(), { hits: 1, misses: 1, opens: 1, verificationFailures: 0 });

    const revoked = await seedPolicy(store, protector, {
      subject,
      allow: [["GET", "/users/{id}"]],
      revokedAt: new Date().toISOString(),
    });
    const third = await loader.load("s-cache");
    assert.equal(third.record?.head, revoked.head);
    assert.ok(third.policy.ok);
    assert.notEqual(third.policy.document.revoked_at, null);
    assert.equal(loader.stats().opens, 2);
  });

  test("concurrent loads of one record open it once", async () => {
    const subject = await seedSubject(store, { subjectId: "s-flight" });
    await seedPolicy(store, protector, { subject, allow: [["GET", "/users/{id}"]] });
    const loader = loaderFor();
    const results = await Promise.all(Array.from({ length: 10 }, () => loader.load("s-flight")));
    assert.ok(results.every((r) => r.policy.ok));
    assert.equal(loader.stats().opens, 1);
  });

  test("a changed artifact under an unchanged head and hash is reopened and refused", async () => {
    const subject = await seedSubject(store, { subjectId: "s-tamper" });
    const record = await seedPolicy(store, protector, { subject, allow: [["GET", "/users/{id}"]] });
    const loader = loaderFor();
    assert.equal((await loader.load("s-tamper")).policy.ok, true);
    const bytes = Buffer.from(record.artifact, "base64");
    bytes[bytes.length - 1] = (bytes[bytes.length - 1] ?? 0) ^ 0xff;
    await store.put(collections.policies, storeKeys.policy("s-tamper"), {
      ...record,
      artifact: bytes.toString("base64"),
    });
    assert.deepEqual((await loader.load("s-tamper")).policy, {
      ok: false,
      reason: "policy_verification_failed",
    });
    assert.equal(loader.stats().verificationFailures, 1);
  });

  test("a record whose facts do not describe the signed document is refused", async () => {
    const subject = await seedSubject(store, { subjectId: "s-facts" });
    const record = await seedPolicy(store, protector, { subject, allow: [["GET", "/users/{id}"]] });
    await store.put(collections.policies, storeKeys.policy("s-facts"), {
      ...record,
      document_hash: `sha256:${"0".repeat(64)}`,
    });
    assert.deepEqual((await loaderFor().load("s-facts")).policy, {
      ok: false,
      reason: "policy_verification_failed",
    });
  });

  test("a record of another partner or another subject, or a malformed record, is refused", async () => {
    const subject = await seedSubject(store, { subjectId: "s-scope" });
    const record = await seedPolicy(store, protector, { subject, allow: [["GET", "/users/{id}"]] });
    const loader = loaderFor();
    const wrongPartner = await loader.load("s-scope", { partnerId: "partner-9" });
    assert.deepEqual(wrongPartner.policy, { ok: false, reason: "policy_verification_failed" });
    await store.put(collections.policies, storeKeys.policy("s-other"), record);
    assert.deepEqual((await loader.load("s-other")).policy, {
      ok: false,
      reason: "policy_verification_failed",
    });
    await store.put(collections.policies, storeKeys.policy("s-junk"), { artifact: 5 });
    assert.deepEqual((await loader.load("s-junk")).policy, {
      ok: false,
      reason: "policy_verification_failed",
    });
  });

  test("unavailable keys and an unavailable store throw upstream_unavailable (never a deny reason)", async () => {
    const subject = await seedSubject(store, { subjectId: "s-down" });
    await seedPolicy(store, protector, { subject, allow: [["GET", "/users/{id}"]] });
    const noKeys = createLocalPolicyProtector({
      keyRings: {
        keyRing: async () => {
          throw new Error("key service down");
        },
      },
      serviceIdentity: "test",
    });
    await assert.rejects(loaderFor(noKeys).load("s-down"), (error: unknown) => {
      assert.ok(error instanceof PolicyLoadError);
      assert.equal(error.code, "policy_protection_unavailable");
      assert.equal(toAuthorityError(error).status, 503);
      return true;
    });
    const failing = createPolicyLoader({
      source: {
        get: async () => {
          throw new Error("store down");
        },
      },
      protector,
    });
    await assert.rejects(failing.load("s-down"), (error: unknown) => {
      assert.ok(error instanceof PolicyLoadError);
      assert.equal(error.code, "policy_source_unavailable");
      assert.equal(error.authorityCode, "upstream_unavailable");
      return true;
    });
  });

  test("ids no store can hold are simply absent", async () => {
    const loader = loaderFor();
    for (const id of ["x".repeat(600), "a\u0000b", "\ud800"]) {
      assert.deepEqual((await loader.load(id)).policy, { ok: false, reason: "missing_policy" });
    }
  });

  test("options are validated at construction", () => {
    assert.throws(() =>
      createPolicyLoader({ source: storePolicyRecordSource(store), protector, cache: { max: 0 } }),
    );
    assert.throws(() => createPolicyLoader({ source: {} as never, protector }));
  });

  test("the record is returned with the outcome (for public facts)", async () => {
    const subject = await seedSubject(store, { subjectId: "s-record" });
    const stored: PolicyRecord = await seedPolicy(store, protector, { subject, allow: [] });
    const loaded = await loaderFor().load("s-record");
    assert.equal(loaded.record?.document_hash, stored.document_hash);
  });

  test("a revocation marker on the record revokes a verified active document; nothing un-revokes", async () => {
    const subject = await seedSubject(store, { subjectId: "s-marker" });
    const active = await seedPolicy(store, protector, { subject, allow: [["GET", "/users/{id}"]] });
    const loader = loaderFor();
    const before = await loader.load("s-marker");
    assert.ok(before.policy.ok && before.policy.document.revoked_at === null);
    // What writeRevocationMarker stores while the crypto service is down.
    const at = "2026-01-02T03:04:05.000Z";
    await writePolicyRecord(store, { ...active, head: active.head + 1, revoked_at: at });
    const marked = await loader.load("s-marker");
    assert.ok(marked.policy.ok);
    assert.equal(marked.policy.document.revoked_at, at);
    assert.equal(marked.record?.revoked_at, at);

    // A signed revocation with its marker removed from the record stays revoked.
    const revoked = await seedPolicy(store, protector, { subject, allow: [], revokedAt: at });
    await writePolicyRecord(store, { ...revoked, head: revoked.head + 1, revoked_at: null });
    const stripped = await loader.load("s-marker");
    assert.ok(stripped.policy.ok);
    assert.equal(stripped.policy.document.revoked_at, at);
  });

  test("withRevocationMarker only ever takes away", () => {
    const failed = { ok: false, reason: "policy_verification_failed" } as const;
    assert.equal(withRevocationMarker(failed, undefined), failed);
    assert.deepEqual(withRevocationMarker(failed, { revoked_at: "x" } as never), failed);
  });
  test("a reused record source answers from its copy for its ttl, absence too; 0 reads every time", async () => {
    let reads = 0;
    const counted: PolicyRecordSource = {
      get: (id) => {
        reads++;
        return storePolicyRecordSource(store, collections.shadowPolicies).get(id);
      },
    };
    const reused = reusedRecordSource(counted, 60_000);
    assert.equal(await reused.get("s-reused"), undefined);
    assert.equal(await reused.get("s-reused"), undefined);
    assert.equal(reads, 1, "absence is reused");
    const always = reusedRecordSource(counted, 0);
    assert.equal(always, counted, "ttl 0 is the source itself");
    assert.equal(await reused.get("other"), undefined);
    assert.equal(reads, 2, "each subject has its own answer");
  });

  test("attack: with records reused, the enforced policy is still read on every call (a revocation is seen at once)", async () => {
    const subject = await seedSubject(store, { subjectId: "s-runtime" });
    await seedPolicy(store, protector, { subject, allow: [["GET", "/users/{id}"]] });
    const runtime = createDecisionRuntime(
      { store, protector },
      {
        recordCacheMs: 60_000,
        recorder: createAuditRecorder(store),
        constraintsRollout: constraintsRolloutGate({ enabled: false, partnerAllowlist: [] }),
      },
    );
    const first = await runtime.policies.load("s-runtime");
    assert.ok(first.policy.ok);
    assert.equal(first.policy.document.revoked_at, null);
    await seedPolicy(store, protector, {
      subject,
      allow: [["GET", "/users/{id}"]],
      revokedAt: new Date().toISOString(),
    });
    const next = await runtime.policies.load("s-runtime");
    assert.ok(next.policy.ok);
    assert.notEqual(next.policy.document.revoked_at, null);
  });
});
