import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { migrateSubjectIdentities } from "../../src/admin/subject-identity-migration.ts";
import { identityOf, subjectAdmits } from "../../src/core/subject-identity.ts";
import { openStore } from "../../src/store/index.ts";
import { collections, type SubjectRecord, storeKeys } from "../../src/store/model.ts";
import type { Store } from "../../src/store/store.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

/** A subject record as written before subjects carried an identity kind. */
function legacy(subjectId: string, subjectType: "agent" | "external"): Omit<SubjectRecord, "identity"> {
  return {
    subject_id: subjectId,
    partner_id: "acme",
    subject_type: subjectType,
    display_name: subjectId,
    boundary_id: null,
    crypto_version: subjectType === "external" ? "platform_service_v2" : "subject_credentials_v1",
    created_at: "2026-01-01T00:00:00.000Z",
  };
}

describe("subject identity migration", () => {
  let dir: TempDir;
  let store: Store;
  before(async () => {
    dir = await makeTempDir("authority-subject-migration-");
    store = await openStore(`sqlite:${join(dir.path, "authority.db")}`);
  });
  after(async () => {
    await store.close();
    await dir.cleanup();
  });

  it("gives legacy records the strictest kind, keeps current ones, and is idempotent", async () => {
    await store.put(collections.subjects, storeKeys.subject("old-agent"), legacy("old-agent", "agent"));
    await store.put(collections.subjects, storeKeys.subject("ext_old"), legacy("ext_old", "external"));
    const vouched: SubjectRecord = { ...legacy("vouched", "agent"), identity: "platform_vouched" };
    await store.put(collections.subjects, storeKeys.subject("vouched"), vouched);

    assert.deepEqual(await migrateSubjectIdentities(store), { migrated: 2, scanned: 3 });
    const read = async (id: string) =>
      (await store.get<SubjectRecord>(collections.subjects, storeKeys.subject(id)))?.identity;
    assert.equal(await read("old-agent"), "partner_token");
    assert.equal(await read("ext_old"), "binding");
    assert.equal(await read("vouched"), "platform_vouched");
    assert.deepEqual(await migrateSubjectIdentities(store), { migrated: 0, scanned: 3 });
  });

  it("reads a record that was not migrated yet exactly as the migration would write it", () => {
    assert.equal(identityOf(legacy("a", "agent")), "partner_token");
    assert.equal(identityOf(legacy("b", "external")), "binding");
    assert.equal(identityOf({ ...legacy("c", "agent"), identity: "bogus" }), "partner_token");
  });

  it("admits a principal only from the subject's partner (or vouched for without a claim)", () => {
    const subject = (identity: "partner_token" | "platform_vouched" | "binding") => ({
      partner_id: "acme",
      identity,
    });
    const bearer = (partnerId: string | undefined, vouchable = true) =>
      ({ via: "bearer", partnerId, vouchable }) as const;
    const binding = (partnerId: string) => ({ via: "binding", partnerId }) as const;
    assert.equal(subjectAdmits(subject("partner_token"), bearer("acme")), true);
    assert.equal(subjectAdmits(subject("partner_token"), bearer("globex")), false);
    assert.equal(subjectAdmits(subject("partner_token"), bearer(undefined)), false);
    assert.equal(subjectAdmits(subject("platform_vouched"), bearer(undefined)), true);
    assert.equal(subjectAdmits(subject("platform_vouched"), bearer("acme")), true);
    assert.equal(subjectAdmits(subject("platform_vouched"), bearer("globex")), false);
    // A bare token of an issuer whose subs the platform admin does not vouch for (a second
    // trusted issuer, by default) never stands for a vouched subject; with the claim it does.
    assert.equal(subjectAdmits(subject("platform_vouched"), bearer(undefined, false)), false);
    assert.equal(subjectAdmits(subject("platform_vouched"), bearer("acme", false)), true);
    assert.equal(subjectAdmits(subject("partner_token"), bearer("acme", false)), true);
    assert.equal(subjectAdmits(subject("binding"), bearer("acme")), false);
    assert.equal(subjectAdmits(subject("binding"), bearer(undefined)), false);
    assert.equal(subjectAdmits(subject("binding"), binding("acme")), true);
    assert.equal(subjectAdmits(subject("binding"), binding("globex")), false);
    assert.equal(subjectAdmits(subject("partner_token"), binding("acme")), false);
  });
});
