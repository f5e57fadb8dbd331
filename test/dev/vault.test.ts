import assert from "node:assert/strict";
import { join } from "node:path";
import { after, test } from "node:test";
import { Kek } from "../../src/crypto/index.ts";
import { createDevVault, DEV_VAULT_COLLECTION, DevVaultError } from "../../src/dev/vault.ts";
import { openStore } from "../../src/store/index.ts";
import { makeTempDir } from "../helpers/temp-dir.ts";

test("the dev vault keeps secrets wrapped under the KEK and hands back the first value stored", async () => {
  const dir = await makeTempDir("authority-dev-vault-");
  after(() => dir.cleanup());
  const store = await openStore(`sqlite:${join(dir.path, "authority.db")}`);
  after(() => store.close());
  const { kek } = Kek.generate();
  const vault = createDevVault({ store, kek });

  const first = await vault.getOrCreate("secret:admin", () => "pw_first-value-1234");
  const again = await vault.getOrCreate("secret:admin", () => "pw_second-value-5678");
  assert.equal(first, "pw_first-value-1234");
  assert.equal(again, first);
  await vault.put("crypto-owner:x", { apiKey: "apk_1", accessKey: "ak_1", secretKey: "sk_1" });
  assert.deepEqual(await vault.get("crypto-owner:x"), {
    apiKey: "apk_1",
    accessKey: "ak_1",
    secretKey: "sk_1",
  });
  assert.equal(await vault.get("missing"), undefined);

  // At rest: no plaintext in the stored document.
  const stored = await store.get<Record<string, unknown>>(DEV_VAULT_COLLECTION, "secret:admin");
  assert.ok(stored !== undefined);
  assert.doesNotMatch(JSON.stringify(stored), /first-value/);

  // Another KEK cannot open it, and an entry moved to another name does not open either.
  const other = createDevVault({ store, kek: Kek.generate().kek });
  await assert.rejects(other.get("secret:admin"), DevVaultError);
  await store.put(DEV_VAULT_COLLECTION, "secret:moved", stored);
  await assert.rejects(vault.get("secret:moved"), DevVaultError);
});
