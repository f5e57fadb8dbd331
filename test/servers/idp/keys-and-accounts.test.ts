import assert from "node:assert/strict";
import { chmod, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { decodeJwt } from "jose";
import { hashSecret } from "../../../src/identity/secret-hash.ts";
import { parseAccountsFile } from "../../../src/servers/idp/accounts-file.ts";
import { IdpConfigError } from "../../../src/servers/idp/errors.ts";
import { createIdpServer } from "../../../src/servers/idp/server.ts";

const cheap = { log2N: 10, r: 8, p: 1 };

describe("signing-key persistence", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "authority-idp-keys-"));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it("writes keys with mode 0600 in a 0700 directory and reloads the same current key", async () => {
    const keysDir = join(dir, "keys");
    const first = await createIdpServer({ keysDir });
    const kid = first.keys.current().kid;
    assert.equal((await stat(keysDir)).mode & 0o777, 0o700);
    const file = join(keysDir, "signing-keys.json");
    assert.equal((await stat(file)).mode & 0o777, 0o600);
    // Current and pre-published next key.
    assert.equal(first.keys.jwks().keys.length, 2);

    const second = await createIdpServer({ keysDir });
    assert.equal(second.keys.current().kid, kid);
    const rotated = await second.rotateSigningKey();
    const third = await createIdpServer({ keysDir });
    assert.equal(third.keys.current().kid, rotated);
    assert.ok(
      third.keys.jwks().keys.some((k) => k.kid === kid),
      "old key still published during grace",
    );
    assert.equal((await stat(file)).mode & 0o777, 0o600);
  });

  it("refuses a key file readable by others, or tampered", async () => {
    const keysDir = join(dir, "loose");
    await createIdpServer({ keysDir });
    const file = join(keysDir, "signing-keys.json");
    await chmod(file, 0o644);
    await assert.rejects(createIdpServer({ keysDir }), IdpConfigError);
    await chmod(file, 0o600);
    const stored = JSON.parse(await readFile(file, "utf8")) as { keys: Array<{ kid: string }> };
    const first = stored.keys[0];
    assert.ok(first);
    first.kid = "../../tampered";
    await writeFile(file, JSON.stringify(stored), { mode: 0o600 });
    await assert.rejects(createIdpServer({ keysDir }), /does not match its key id/);
  });

  it("drops retired keys from the file after the grace period", async () => {
    let clock = Date.now();
    const keysDir = join(dir, "grace");
    const idp = await createIdpServer({ keysDir, rotationGraceSec: 60, now: () => new Date(clock) });
    const old = idp.keys.current().kid;
    await idp.rotateSigningKey();
    clock += 61_000;
    await idp.rotateSigningKey();
    const text = await readFile(join(keysDir, "signing-keys.json"), "utf8");
    assert.ok(!text.includes(old));
    assert.ok(!idp.keys.jwks().keys.some((k) => k.kid === old));
  });
});

describe("accounts file", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "authority-idp-accounts-"));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it("loads service accounts and clients, with plain or hashed secrets", async () => {
    const file = join(dir, "accounts.json");
    await writeFile(
      file,
      JSON.stringify({
        serviceAccounts: [
          { username: "svc", passwordHash: await hashSecret("svc-password", cheap), scopes: ["crypto"] },
        ],
        clients: [{ clientId: "wl", clientSecret: "wl-secret-1", scopes: ["x"], tenant: "t7" }],
      }),
    );
    const idp = await createIdpServer({ accountsFile: file, scryptCost: cheap });
    await idp.listen();
    try {
      const response = await fetch(idp.tokenEndpoint, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: "grant_type=client_credentials&client_id=wl&client_secret=wl-secret-1",
      });
      const body = (await response.json()) as { access_token: string };
      assert.equal(decodeJwt(body.access_token).tenant, "t7");
      assert.ok(await idp.directory.authenticateServiceAccount("svc", "svc-password"));
    } finally {
      await idp.close();
    }
  });

  it("takes entries without scopes (tokens without a scope) and counts what it loaded", async () => {
    const file = join(dir, "no-scopes.json");
    await writeFile(
      file,
      JSON.stringify({ clients: [{ clientId: "plain", clientSecret: "plain-secret-1" }] }),
    );
    const idp = await createIdpServer({ accountsFile: file, scryptCost: cheap });
    try {
      assert.deepEqual(idp.directory.size(), { serviceAccounts: 0, clients: 1 });
      assert.deepEqual(idp.directory.scopes(), []);
      const principal = await idp.directory.authenticateClient("plain", "plain-secret-1");
      assert.deepEqual(principal?.scopes, []);
    } finally {
      await idp.close();
    }
  });

  it("rejects malformed files with a precise message", async () => {
    assert.throws(() => parseAccountsFile("{"), /not valid JSON/);
    assert.throws(() => parseAccountsFile("[]"), /JSON object/);
    assert.throws(() => parseAccountsFile('{"users": []}'), /unknown fields: users/);
    assert.throws(() => parseAccountsFile('{"clients": {}}'), /clients must be an array/);
    await assert.rejects(
      createIdpServer({ accountsFile: join(dir, "missing.json") }),
      /cannot read accounts file/,
    );
    const bad = join(dir, "bad.json");
    await writeFile(
      bad,
      JSON.stringify({ clients: [{ clientId: "c", clientSecret: "long-enough", scopes: ["a b"] }] }),
    );
    await assert.rejects(
      createIdpServer({ accountsFile: bad, scryptCost: cheap }),
      /not a valid scope token/,
    );
  });
});

describe("IdP options", () => {
  it("validates options at construction", async () => {
    await assert.rejects(createIdpServer({ issuer: "ftp://x" }), IdpConfigError);
    await assert.rejects(createIdpServer({ issuer: "http://x/?q=1" }), IdpConfigError);
    await assert.rejects(createIdpServer({ tokenLifetimeSec: 0 }), IdpConfigError);
    await assert.rejects(createIdpServer({ rotationGraceSec: 1.5 }), IdpConfigError);
    await assert.rejects(createIdpServer({ tenantClaim: "" }), IdpConfigError);
  });

  it("normalises the issuer and uses a custom tenant claim name", async () => {
    const idp = await createIdpServer({
      issuer: "https://idp.example/",
      tenantClaim: "https://example/tenant",
    });
    assert.equal(idp.issuer, "https://idp.example");
    const token = await idp.issueToken({ subject: "s", tenant: "t" });
    const claims = decodeJwt(token.accessToken);
    assert.equal(claims["https://example/tenant"], "t");
    assert.equal(claims.tenant, undefined);
    await assert.rejects(
      idp.issueToken({ subject: "s", claims: { "https://example/tenant": "x" } }),
      /reserved/,
    );
    await assert.rejects(idp.issueToken({ subject: "" }), /subject/);
  });

  it("needs an issuer before issuing when none is configured", async () => {
    const idp = await createIdpServer();
    await assert.rejects(idp.issueToken({ subject: "s" }), /issuer is unknown/);
    const url = await idp.listen();
    assert.equal(idp.issuer, url);
    await idp.close();
  });
});
