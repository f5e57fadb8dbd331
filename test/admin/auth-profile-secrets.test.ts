import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { putAuthProfile, resolveAuthProfileSecret } from "../../src/admin/auth-profiles.ts";
import type { AdminDeps } from "../../src/admin/deps.ts";
import { createPartner } from "../../src/admin/partners.ts";
import { Kek } from "../../src/crypto/index.ts";
import { createEgressPolicy } from "../../src/execute/egress.ts";
import { createLocalPolicyProtector } from "../../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../../src/policy/process-key-rings.ts";
import { createStoredKeyRings } from "../../src/policy/stored-key-rings.ts";
import { openStore } from "../../src/store/index.ts";
import { collections, storeKeys } from "../../src/store/model.ts";
import type { Store } from "../../src/store/store.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

describe("auth-profile secrets under KEK-wrapped key rings in the store", () => {
  let dir: TempDir;
  let store: Store;
  const kekBytes = randomBytes(32);
  const deps = (rings: AdminDeps["secretKeyRings"]): AdminDeps => ({
    store,
    now: () => new Date(),
    protector: createLocalPolicyProtector({ keyRings: createProcessKeyRings(), serviceIdentity: "t" }),
    secretKeyRings: rings,
    egress: createEgressPolicy(),
  });

  before(async () => {
    dir = await makeTempDir("authority-secrets-");
    store = await openStore(`sqlite:${join(dir.path, "authority.db")}`);
  });
  after(async () => {
    await store.close();
    await dir.cleanup();
  });

  it("opens a sealed secret in a fresh process (new ring source, same KEK) and not under another KEK", async () => {
    const first = deps(createStoredKeyRings({ store, kek: Kek.fromBytes(kekBytes) }));
    await createPartner(first, { partner_id: "acme", name: "Acme" });
    await putAuthProfile(first, "acme", "k", { type: "static", kind: "bearer", secret: "durable-secret" });
    const sealed = await store.get<{ sealed_secret: string }>(
      collections.authProfiles,
      storeKeys.authProfile("acme", "k"),
    );
    assert.ok(sealed && !sealed.sealed_secret.includes("durable-secret"));

    const restarted = deps(createStoredKeyRings({ store, kek: Kek.fromBytes(kekBytes) }));
    assert.equal(await resolveAuthProfileSecret(restarted, "acme", "k"), "durable-secret");

    const wrongKek = deps(createStoredKeyRings({ store, kek: Kek.fromBytes(randomBytes(32)) }));
    await assert.rejects(resolveAuthProfileSecret(wrongKek, "acme", "k"), {
      code: "secret_storage_unavailable",
    });
    await assert.rejects(resolveAuthProfileSecret(deps(undefined), "acme", "k"), {
      code: "secret_storage_unavailable",
    });
  });
});
