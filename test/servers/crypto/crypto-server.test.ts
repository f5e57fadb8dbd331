import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  CryptoClientError,
  type CryptoCredentials,
  createCryptoClient,
} from "../../../src/clients/crypto-service/client.ts";
import { envelopeKeyId, Kek } from "../../../src/crypto/index.ts";
import { toAuthorityError } from "../../../src/errors.ts";
import { createCryptoServer } from "../../../src/servers/crypto/server.ts";
import { openStore } from "../../../src/store/index.ts";
import { rejectsWithCryptoCode } from "../../helpers/crypto-client-error.ts";
import { type Environment, silentLogger, startEnvironment } from "../managed/harness.ts";

describe("upstream crypto service", () => {
  let env: Environment;
  let credentials: CryptoCredentials;
  const client = () => createCryptoClient({ baseUrl: env.cryptoUrl, timeoutMs: 10_000 });

  before(async () => {
    env = await startEnvironment();
    credentials = {
      token: await env.userToken(),
      apiKey: env.partner.apiKey,
      accessKey: env.partner.accessKey,
      secretKey: env.partner.secretKey,
    };
  });
  after(() => env.close());

  const admin = async (method: string, path: string, body?: unknown, token?: string) => {
    const response = await fetch(`${env.cryptoUrl}${path}`, {
      method,
      headers: {
        ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: response.status, json: (await response.json()) as Record<string, unknown> };
  };

  it("provisions owners only for admin tokens and returns the credentials once", async () => {
    assert.equal((await admin("POST", "/v1/admin/owners", { id: "p-anon" })).status, 401);
    const user = await admin("POST", "/v1/admin/owners", { id: "p-user" }, await env.userToken());
    assert.equal(user.status, 403);
    assert.equal(user.json.error, "insufficient_role");

    const created = await admin(
      "POST",
      "/v1/admin/owners",
      { id: "p-new", kind: "subject" },
      await env.adminToken(),
    );
    assert.equal(created.status, 201);
    assert.equal(created.json.id, "p-new");
    assert.equal(created.json.kind, "subject");
    for (const field of ["api_key", "access_key", "secret_key", "key_id"]) {
      assert.equal(typeof created.json[field], "string", field);
    }
    const again = await admin("POST", "/v1/admin/owners", { id: "p-new" }, await env.adminToken());
    assert.equal(again.status, 409);
    assert.equal(JSON.stringify(again.json).includes(String(created.json.secret_key)), false);

    const keys = await admin("GET", "/v1/admin/owners/p-new/public-keys", undefined, await env.adminToken());
    assert.equal(keys.status, 200);
    assert.equal(keys.json.owner, "p-new");
    assert.equal((keys.json.keys as unknown[]).length, 1);
    assert.equal(
      (await admin("GET", "/v1/admin/owners/nobody/public-keys", undefined, await env.adminToken())).status,
      404,
    );

    const bad = await admin("POST", "/v1/admin/owners", { id: "has space" }, await env.adminToken());
    assert.equal(bad.status, 400);
    const missing = await admin("POST", "/v1/admin/owners", {}, await env.adminToken());
    assert.equal(missing.status, 400);
    assert.deepEqual((missing.json.details as { fields: string[] }).fields, ["id"]);
  });

  it("provisions fixed credentials for development seeding, once per access key", async () => {
    const fixed = {
      apiKey: "apk_dev_seed_api_key_0001",
      accessKey: "ak_dev_seed_access_0001",
      secretKey: "sk_dev_seed_secret_key_0001",
    };
    const seeded = await env.crypto().provisionOwner({ id: "p-seeded", kind: "service", credentials: fixed });
    assert.equal(seeded.secretKey, fixed.secretKey);
    assert.equal(await env.crypto().hasOwner("p-seeded"), true);
    assert.equal(await env.crypto().hasOwner("p-unknown"), false);
    const sealed = await client().encrypt({ token: credentials.token, ...fixed }, "seeded");
    assert.equal(sealed.keyId, seeded.keyId);
    await assert.rejects(env.crypto().provisionOwner({ id: "p-seeded-2", credentials: fixed }), {
      name: "CryptoServiceError",
      reason: "owner_exists",
    });
    assert.equal(await env.crypto().hasOwner("p-seeded-2"), false);
    await assert.rejects(
      env.crypto().provisionOwner({ id: "p-short", credentials: { ...fixed, secretKey: "short" } }),
      {
        reason: "invalid_request",
      },
    );
  });

  it("stores credentials only as digests and key rings only wrapped", async () => {
    const owner = await env.crypto().provisionOwner({ id: "p-digest" });
    const rows: string[] = [];
    for (const collection of ["crypto_owners", "crypto_access_keys", "crypto_meta"]) {
      for (const item of (await env.store.list(collection, { limit: 1000 })).items)
        rows.push(JSON.stringify(item));
    }
    const dump = rows.join("\n");
    assert.ok(dump.includes("p-digest"));
    for (const secret of [owner.apiKey, owner.accessKey, owner.secretKey])
      assert.equal(dump.includes(secret), false);
    assert.ok(dump.includes("authority.wrapped-key-ring.v1"));
  });

  it("encrypts and decrypts for the caller (action codes e and d)", async () => {
    const encrypted = await client().encrypt(credentials, "plain text ✓");
    assert.equal(encrypted.keyId, env.partner.keyId);
    assert.equal(envelopeKeyId(encrypted.encryptedData), env.partner.keyId);
    const decrypted = await client().decrypt(credentials, encrypted.encryptedData);
    assert.equal(decrypted.decryptedData, "plain text ✓");
    assert.deepEqual(decrypted.payload, { decrypted_data: "plain text ✓" });
    // The same through an injected fetch instead of the node:http transport.
    const viaFetch = createCryptoClient({
      baseUrl: env.cryptoUrl,
      timeoutMs: 10_000,
      fetch: globalThis.fetch,
    });
    const again = await viaFetch.encrypt(credentials, "via fetch");
    assert.equal((await viaFetch.decrypt(credentials, again.encryptedData)).decryptedData, "via fetch");
    await rejectsWithCryptoCode(
      viaFetch.decrypt({ ...credentials, secretKey: "sk_wrong_wrong_wrong" }, again.encryptedData),
      "invalid_credentials",
    );
  });

  it("signs and encrypts, then decrypts and verifies with signer, time and metadata (s+e, d+v)", async () => {
    const before = Date.now();
    const sealed = await client().signEncrypt(credentials, "policy body", { purpose: "authority-policy/v1" });
    assert.equal(sealed.keyId, env.partner.keyId);
    assert.equal(sealed.signerKeyId, env.partner.keyId);
    const verified = await client().decryptVerify(credentials, sealed.encryptedData, {
      purpose: "authority-policy/v1",
    });
    assert.equal(verified.decryptedData, "policy body");
    assert.equal(verified.isValidSignature, true);
    assert.equal(verified.signedBy, "partner-acme");
    assert.match(verified.signedTimestamp, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}\+00:00$/);
    const signedAt = Date.parse(verified.signedTimestamp);
    assert.ok(signedAt >= before - 1000 && signedAt <= Date.now() + 1000);
    assert.equal(verified.purpose, "authority-policy/v1");
    assert.equal(verified.recipientKeyId, env.partner.keyId);
    assert.equal(typeof verified.signedBlob, "string");
    // Asked without the signed blob (a decision needs only the text): same verification, no blob.
    const lean = await client().decryptVerify(credentials, sealed.encryptedData, {
      purpose: "authority-policy/v1",
      signedBlob: false,
    });
    assert.equal(lean.decryptedData, "policy body");
    assert.equal(lean.signedBlob, undefined);

    await rejectsWithCryptoCode(
      client().decryptVerify(credentials, sealed.encryptedData, { purpose: "other" }),
      "wrong_purpose",
    );
    // A sign-encrypt ciphertext is not a plain ciphertext, and the reverse.
    await rejectsWithCryptoCode(client().decrypt(credentials, sealed.encryptedData), "invalid_ciphertext");
    const plain = await client().encrypt(credentials, "x");
    await rejectsWithCryptoCode(
      client().decryptVerify(credentials, plain.encryptedData),
      "invalid_ciphertext",
    );
  });

  it("signs for another owner's public key; only that owner opens it and sees the signer", async () => {
    const other = await env.crypto().provisionOwner({ id: "p-recipient" });
    const otherCredentials = {
      token: credentials.token,
      apiKey: other.apiKey,
      accessKey: other.accessKey,
      secretKey: other.secretKey,
    };
    const sealed = await client().signEncrypt(credentials, "for you", { recipient: "p-recipient" });
    assert.equal(sealed.keyId, other.keyId);
    const verified = await client().decryptVerify(otherCredentials, sealed.encryptedData);
    assert.equal(verified.decryptedData, "for you");
    assert.equal(verified.signedBy, "partner-acme");
    assert.equal(verified.signerKeyId, env.partner.keyId);
    await rejectsWithCryptoCode(
      client().decryptVerify(credentials, sealed.encryptedData),
      "invalid_ciphertext",
    );
    await rejectsWithCryptoCode(
      client().signEncrypt(credentials, "x", { recipient: "p-missing" }),
      "unknown_recipient",
    );
  });

  it("rotates an owner's ring: old ciphertexts still open, new ones use the new key id", async () => {
    const owner = await env.crypto().provisionOwner({ id: "p-rotate" });
    const own = {
      token: credentials.token,
      apiKey: owner.apiKey,
      accessKey: owner.accessKey,
      secretKey: owner.secretKey,
    };
    const old = await client().encrypt(own, "before rotation");
    const oldSigned = await client().signEncrypt(own, "signed before rotation");
    const rotated = await admin("POST", "/v1/admin/owners/p-rotate/rotate", {}, await env.adminToken());
    assert.equal(rotated.status, 200);
    assert.equal(rotated.json.previous_key_id, owner.keyId);
    assert.notEqual(rotated.json.key_id, owner.keyId);
    const fresh = await client().encrypt(own, "after rotation");
    assert.equal(fresh.keyId, rotated.json.key_id);
    assert.equal((await client().decrypt(own, old.encryptedData)).decryptedData, "before rotation");
    const verified = await client().decryptVerify(own, oldSigned.encryptedData);
    assert.equal(verified.signerKeyId, owner.keyId);
    assert.equal(
      (await admin("POST", "/v1/admin/owners/p-none/rotate", {}, await env.adminToken())).status,
      404,
    );
  });

  it("refuses bad tokens, bad partner keys and subjects the owner does not allow", async () => {
    await rejectsWithCryptoCode(
      client().encrypt({ ...credentials, token: "not-a-jwt" }, "x"),
      "invalid_token",
    );
    await rejectsWithCryptoCode(
      client().encrypt({ ...credentials, secretKey: `${credentials.secretKey}x` }, "x"),
      "invalid_credentials",
    );
    await rejectsWithCryptoCode(
      client().encrypt({ ...credentials, apiKey: credentials.secretKey }, "x"),
      "invalid_credentials",
    );
    await rejectsWithCryptoCode(
      client().encrypt({ ...credentials, accessKey: "ak_unknown_unknown_unknown" }, "x"),
      "invalid_credentials",
    );
    const bound = await env.crypto().provisionOwner({ id: "p-bound", allowedSubjects: ["svc-bound"] });
    const boundKeys = { apiKey: bound.apiKey, accessKey: bound.accessKey, secretKey: bound.secretKey };
    await rejectsWithCryptoCode(
      client().encrypt({ ...boundKeys, token: await env.userToken("svc-other") }, "x"),
      "invalid_credentials",
    );
    const ok = await client().encrypt({ ...boundKeys, token: await env.userToken("svc-bound") }, "x");
    assert.equal(ok.keyId, bound.keyId);
  });

  it("answers malformed action bodies with 400 naming the field, and echoes no credential", async () => {
    const call = async (body: unknown, headers: Record<string, string> = {}) => {
      const response = await fetch(`${env.cryptoUrl}/v1/actions`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          authorization: `Bearer ${credentials.token}`,
          api_key: credentials.apiKey,
          access_key: credentials.accessKey,
          secret_key: credentials.secretKey,
          ...headers,
        },
        body: JSON.stringify(body),
      });
      const text = await response.text();
      for (const secret of [
        credentials.token,
        credentials.apiKey,
        credentials.accessKey,
        credentials.secretKey,
      ]) {
        assert.equal(text.includes(secret), false);
      }
      return {
        status: response.status,
        json: JSON.parse(text) as { details?: { reason?: string; fields?: string[] } },
      };
    };
    const cases: Array<[unknown, string]> = [
      [{ actions: ["x"] }, "actions"],
      [{ actions: ["d", "v"], encrypted_data: "x", signed_blob: "no" }, "signed_blob"],
      [{ actions: ["e"], data: "x", signed_blob: false }, "signed_blob"],
      [{ actions: ["e"] }, "data"],
      [{ actions: ["e"], data: "" }, "data"],
      [{ actions: ["d"], data: "x" }, "data"],
      [{ actions: ["d", "v"] }, "encrypted_data"],
      [{ actions: ["s", "e"], data: "x", purpose: "bad purpose!" }, ""],
      [{ data: "x" }, "actions"],
    ];
    for (const [body, field] of cases) {
      const answer = await call(body);
      assert.equal(answer.status, 400, JSON.stringify(body));
      if (field !== "") assert.deepEqual(answer.json.details?.fields, [field], JSON.stringify(body));
    }
    const noKey = await call({ actions: ["e"], data: "x" }, { secret_key: "" });
    assert.equal(noKey.status, 400);
    assert.deepEqual(noKey.json.details?.fields, ["secret_key"]);
  });

  it("keeps owners across restarts with the same KEK and refuses to start under another", async () => {
    const otherStorePath = join(env.dir.path, "restart.db");
    const store = await openStore(`sqlite:${otherStorePath}`);
    const first = await createCryptoServer({
      store,
      kek: env.kek,
      verifier: env.verifier,
      logger: silentLogger(),
    });
    const owner = await first.provisionOwner({ id: "p-persist" });
    const url = await first.listen();
    const own = {
      token: credentials.token,
      apiKey: owner.apiKey,
      accessKey: owner.accessKey,
      secretKey: owner.secretKey,
    };
    const sealed = await createCryptoClient({ baseUrl: url, timeoutMs: 10_000 }).signEncrypt(own, "kept");
    await first.close();

    const second = await createCryptoServer({
      store,
      kek: env.kek,
      verifier: env.verifier,
      logger: silentLogger(),
    });
    const secondUrl = await second.listen();
    try {
      const verified = await createCryptoClient({ baseUrl: secondUrl, timeoutMs: 10_000 }).decryptVerify(
        own,
        sealed.encryptedData,
      );
      assert.equal(verified.decryptedData, "kept");
    } finally {
      await second.close();
    }
    await assert.rejects(
      createCryptoServer({ store, kek: Kek.generate().kek, verifier: env.verifier, logger: silentLogger() }),
      (error: Error) => !error.message.includes(owner.secretKey),
    );
    await store.close();
  });

  it("maps client failures to the public error table", () => {
    const unavailable = toAuthorityError(new CryptoClientError("upstream_unavailable"));
    assert.equal(unavailable.status, 503);
    assert.equal(toAuthorityError(new CryptoClientError("upstream_timeout")).status, 504);
    assert.equal(toAuthorityError(new CryptoClientError("invalid_credentials")).status, 403);
    const bad = toAuthorityError(new CryptoClientError("invalid_ciphertext"));
    assert.equal(bad.status, 400);
    assert.deepEqual(bad.details, { reason: "invalid_ciphertext" });
  });
});
