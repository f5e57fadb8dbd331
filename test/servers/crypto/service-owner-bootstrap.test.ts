import assert from "node:assert/strict";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { Kek } from "../../../src/crypto/index.ts";
import { buildCryptoService, type CryptoServiceConfig } from "../../../src/servers/crypto/build.ts";
import { createOwnerRegistry } from "../../../src/servers/crypto/owner-registry.ts";
import { openStore } from "../../../src/store/index.ts";
import type { Store } from "../../../src/store/store.ts";
import { canary } from "../../helpers/canary.ts";
import { createLogCapture } from "../../helpers/log-capture.ts";
import { makeTempDir, type TempDir } from "../../helpers/temp-dir.ts";

/**
 * `authority crypto --service-owner` (decision 2601): the operator's service owner is made from
 * its mounted secret at start, brought up to date when the secret changes (keys kept, old
 * credentials dead), and never takes over an owner of that id that is not an undelegated
 * service owner. A refused start names the field, never a value.
 */
describe("the crypto service's service owner, kept as its mounted secret says", () => {
  const logs = createLogCapture("silent");
  let dir: TempDir;
  let store: Store;
  const { kek } = Kek.generate();
  const keys = () => ({ api_key: canary("apk_"), access_key: canary("ak_"), secret_key: canary("sk_") });

  before(async () => {
    dir = await makeTempDir("service-owner-");
    store = await openStore(`sqlite:${join(dir.path, "crypto.db")}`);
  });
  after(async () => {
    await store?.close();
    await dir?.cleanup();
  });

  const config = (credentialsPath: string, id = "service:authority"): CryptoServiceConfig => ({
    host: "127.0.0.1",
    port: 0,
    storeUrl: "unused",
    kekFile: "unused",
    initKek: false,
    issuer: "http://127.0.0.1:9",
    jwksUrl: "http://127.0.0.1:9/jwks",
    audience: "authority",
    adminRole: "admin",
    logLevel: "silent",
    serviceOwner: { id, credentialsPath, allowedSubjects: ["authority-svc"] },
  });
  const start = async (credentialsPath: string, id?: string) => {
    const service = await buildCryptoService(config(credentialsPath, id), {
      store,
      kek,
      logger: logs.logger("crypto"),
    });
    await service.close();
  };
  const asDirectory = async (name: string, values: Record<string, string>) => {
    const path = join(dir.path, name);
    await mkdir(path, { recursive: true });
    for (const [field, value] of Object.entries(values)) await writeFile(join(path, field), `${value}\n`);
    return path;
  };
  const registry = () => createOwnerRegistry({ store, kek, now: () => new Date() });
  const credentialsOf = (k: ReturnType<typeof keys>) => ({
    apiKey: k.api_key,
    accessKey: k.access_key,
    secretKey: k.secret_key,
  });

  it("provisions, keeps, and on new credentials replaces them without new keys", async () => {
    const first = keys();
    await start(await asDirectory("first", first));
    const owner = await (await registry()).authenticate(credentialsOf(first));
    assert.equal(owner.id, "service:authority");
    assert.equal(owner.kind, "service");
    assert.deepEqual(owner.allowedSubjects, ["authority-svc"]);
    const keyId = owner.ring.current.keyId;

    await start(await asDirectory("first", first));
    assert.equal((await (await registry()).authenticate(credentialsOf(first))).ring.current.keyId, keyId);

    // The Secret rotated: the new credentials work, the old ones no longer do, the keys stay.
    const second = keys();
    const json = join(dir.path, "second.json");
    await writeFile(json, JSON.stringify(second));
    await start(json);
    const fresh = await registry();
    assert.equal((await fresh.authenticate(credentialsOf(second))).ring.current.keyId, keyId);
    await assert.rejects(fresh.authenticate(credentialsOf(first)), { reason: "invalid_credentials" });
    assert.doesNotMatch(logs.lines().join("\n"), new RegExp(`${first.secret_key}|${second.secret_key}`));
  });

  it("never takes over an owner of that id that is not an undelegated service owner", async () => {
    const partner = await registry();
    await partner.provision({ id: "service:squatted", kind: "partner" });
    await assert.rejects(start(await asDirectory("squat", keys()), "service:squatted"), (error: Error) =>
      /service owner service:squatted: An owner of this id exists and is not an undelegated service owner/.test(
        error.message,
      ),
    );
  });

  it("a missing or malformed field stops the start, naming the field and no value", async () => {
    const partial = keys();
    const path = await asDirectory("partial", { api_key: partial.api_key, access_key: partial.access_key });
    await assert.rejects(start(path, "service:partial"), /the field secret_key is missing/);
    const short = await asDirectory("short", { ...keys(), secret_key: "short" });
    await assert.rejects(
      start(short, "service:short"),
      (error: Error) => /16-256 visible ASCII/.test(error.message) && !error.message.includes("short\n"),
    );
  });
});
