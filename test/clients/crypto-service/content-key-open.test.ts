/**
 * Decrypt-verify through the crypto service's unwrap (content-key-open.ts, owner-crypto.ts)
 * against the real crypto service: the same answers and failures as its own decrypt-verify,
 * only the header on the wire, nobody else's envelope unwrapped, no forged signer accepted,
 * rotations seen at once, an outage not taken for a bad ciphertext.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import {
  CryptoClientError,
  type CryptoCredentials,
  createCryptoClient,
  isDataFault,
} from "../../../src/clients/crypto-service/client.ts";
import {
  createDirectOwnerCrypto,
  type OwnerCrypto,
} from "../../../src/clients/crypto-service/owner-crypto.ts";
import { deserializeEnvelope, KeyRing, PublicKeyRing, signEncrypt } from "../../../src/crypto/index.ts";
import type { ProvisionedOwner } from "../../../src/servers/crypto/server.ts";
import { rejectsWithCryptoCode } from "../../helpers/crypto-client-error.ts";
import { type Environment, startEnvironment } from "../../servers/managed/harness.ts";

const PURPOSE = "authority.policy";

describe("decrypt-verify with an unwrapped content key", () => {
  let env: Environment;
  let agent: ProvisionedOwner;
  /** Every request body sent to the crypto service, in order. */
  const sent: string[] = [];
  const recordingFetch: typeof fetch = (input, init) => {
    if (typeof init?.body === "string") sent.push(init.body);
    return fetch(input, init);
  };
  const client = () => createCryptoClient({ baseUrl: env.cryptoUrl, fetch: recordingFetch, timeoutMs: 5000 });
  const tokens = () => ({ get: () => env.userToken(), invalidate: () => undefined });
  const ownerCrypto = (owner: ProvisionedOwner): OwnerCrypto =>
    createDirectOwnerCrypto({
      client: client(),
      owner: owner.id,
      keys: { apiKey: owner.apiKey, accessKey: owner.accessKey, secretKey: owner.secretKey },
      tokens: tokens(),
    });
  const credentials = async (owner: ProvisionedOwner): Promise<CryptoCredentials> => ({
    token: await env.userToken(),
    apiKey: owner.apiKey,
    accessKey: owner.accessKey,
    secretKey: owner.secretKey,
  });

  before(async () => {
    env = await startEnvironment();
    agent = await env.crypto().provisionOwner({ id: "subject:agent-1", kind: "subject" });
  });
  after(() => env.close());

  it("answers as the crypto service's decrypt-verify does, sending only the envelope's header", async () => {
    const owner = ownerCrypto(agent);
    const document = JSON.stringify({ operations: Array.from({ length: 200 }, (_, i) => `op-${i}`) });
    const artifact = await owner.signEncrypt(document, { purpose: PURPOSE });
    sent.length = 0;
    const local = await owner.decryptVerify(artifact, { purpose: PURPOSE });
    const server = await client().decryptVerify(await credentials(agent), artifact, { purpose: PURPOSE });
    assert.deepEqual(local, server);
    assert.equal(local.decryptedData, document);

    const unwrapBody = JSON.parse(sent[0] ?? "{}") as Record<string, unknown>;
    assert.deepEqual(unwrapBody.actions, ["u"]);
    assert.equal(unwrapBody.envelope_header, deserializeEnvelope(artifact).header.toString("base64"));
    assert.ok((sent[0] ?? "").length < 2000, "the unwrap request carries the header only");
    assert.ok(!sent.some((body, i) => i < sent.length - 1 && body.includes(artifact.slice(-200))));
    const withoutBlob = await owner.decryptVerify(artifact, { purpose: PURPOSE, signedBlob: false });
    assert.equal(withoutBlob.signedBlob, undefined);
  });

  it("refuses to unwrap an envelope addressed to another owner", async () => {
    const other = await env.crypto().provisionOwner({ id: "subject:agent-2", kind: "subject" });
    const artifact = await ownerCrypto(agent).signEncrypt("mine", { purpose: PURPOSE });
    const header = deserializeEnvelope(artifact).header.toString("base64");
    const error = await rejectsWithCryptoCode(
      client().unwrap(await credentials(other), header),
      "invalid_ciphertext",
    );
    assert.equal(error.status, 400);
    await rejectsWithCryptoCode(
      ownerCrypto(other).decryptVerify(artifact, { purpose: PURPOSE }),
      "invalid_ciphertext",
    );
  });

  it("answers a malformed unwrap request with 400, never a key", async () => {
    const artifact = await ownerCrypto(agent).signEncrypt("x", { purpose: PURPOSE });
    const header = deserializeEnvelope(artifact).header;
    const own = await credentials(agent);
    for (const bad of [
      artifact,
      header.subarray(0, -1).toString("base64"),
      `${header.toString("base64")} `,
      "%%%",
    ]) {
      await rejectsWithCryptoCode(client().unwrap(own, bad), "invalid_ciphertext");
    }
    const altered = Buffer.from(header);
    altered[altered.length - 1] = (altered[altered.length - 1] ?? 0) ^ 1; // the nonce
    await rejectsWithCryptoCode(client().unwrap(own, altered.toString("base64")), "invalid_ciphertext");
    const raw = async (body: unknown) => {
      const response = await fetch(`${env.cryptoUrl}/v1/actions`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          authorization: `Bearer ${own.token}`,
          api_key: own.apiKey,
          access_key: own.accessKey,
          secret_key: own.secretKey,
        },
        body: JSON.stringify(body),
      });
      return { status: response.status, json: (await response.json()) as Record<string, unknown> };
    };
    const missing = await raw({ actions: ["u"] });
    assert.equal(missing.status, 400);
    assert.deepEqual((missing.json.details as { fields: string[] }).fields, ["envelope_header"]);
    const extra = await raw({
      actions: ["u"],
      envelope_header: header.toString("base64"),
      encrypted_data: artifact,
    });
    assert.equal(extra.status, 400);
    assert.equal(JSON.stringify(extra.json).includes("content_key"), false);
  });

  it("fails like decrypt-verify: altered ciphertext, wrong purpose, unknown or impostor signer", async () => {
    const owner = ownerCrypto(agent);
    const artifact = await owner.signEncrypt("policy", { purpose: PURPOSE });
    const bytes = Buffer.from(artifact, "base64");
    bytes[bytes.length - 20] = (bytes[bytes.length - 20] ?? 0) ^ 1;
    await rejectsWithCryptoCode(
      owner.decryptVerify(bytes.toString("base64"), { purpose: PURPOSE }),
      "invalid_ciphertext",
    );
    await rejectsWithCryptoCode(
      owner.decryptVerify("not base64!", { purpose: PURPOSE }),
      "invalid_ciphertext",
    );
    await rejectsWithCryptoCode(owner.decryptVerify(artifact, { purpose: "other" }), "wrong_purpose");

    // Anyone can encrypt to the agent's public key. A signer the crypto service does not know,
    // and one that names a real owner (and its key id) but signs with another key, both fail.
    const agentKeys = PublicKeyRing.import(await env.crypto().publicKeys(agent.id));
    const ghost = KeyRing.generate({ owner: "subject:ghost" });
    const byGhost = signEncrypt({
      signer: ghost.signer(),
      recipient: agentKeys,
      purpose: PURPOSE,
      plaintext: "allow all",
    });
    await rejectsWithCryptoCode(owner.decryptVerify(byGhost, { purpose: PURPOSE }), "invalid_signature");
    const impostor = KeyRing.generate({ owner: agent.id, keyId: agentKeys.current.keyId });
    const byImpostor = signEncrypt({
      signer: impostor.signer(),
      recipient: agentKeys,
      purpose: PURPOSE,
      plaintext: "allow all",
    });
    await rejectsWithCryptoCode(owner.decryptVerify(byImpostor, { purpose: PURPOSE }), "invalid_signature");
    const forgedKeyId = KeyRing.generate({ owner: agent.id, keyId: "k-forged" });
    const byForgedKeyId = signEncrypt({
      signer: forgedKeyId.signer(),
      recipient: agentKeys,
      purpose: PURPOSE,
      plaintext: "allow all",
    });
    await rejectsWithCryptoCode(
      owner.decryptVerify(byForgedKeyId, { purpose: PURPOSE }),
      "invalid_signature",
    );
    // The same calls still verify what the agent really signed.
    assert.equal((await owner.decryptVerify(artifact, { purpose: PURPOSE })).decryptedData, "policy");
  });

  it("verifies across a rotation at once: old and new envelopes both open", async () => {
    const owner = ownerCrypto(agent);
    const before = await owner.signEncrypt("before", { purpose: PURPOSE });
    assert.equal((await owner.decryptVerify(before, { purpose: PURPOSE })).decryptedData, "before");
    await env.crypto().rotateOwner(agent.id);
    const afterFirst = await owner.signEncrypt("after one", { purpose: PURPOSE });
    assert.equal((await owner.decryptVerify(afterFirst, { purpose: PURPOSE })).decryptedData, "after one");
    await env.crypto().rotateOwner(agent.id);
    const afterSecond = await owner.signEncrypt("after two", { purpose: PURPOSE });
    assert.equal((await owner.decryptVerify(afterSecond, { purpose: PURPOSE })).decryptedData, "after two");
    assert.equal((await owner.decryptVerify(before, { purpose: PURPOSE })).decryptedData, "before");
  });

  it("takes the crypto service down for an outage, not a bad ciphertext, and recovers", async () => {
    const owner = ownerCrypto(agent);
    const artifact = await owner.signEncrypt("up", { purpose: PURPOSE });
    await env.stopCrypto();
    try {
      const error = await owner.decryptVerify(artifact, { purpose: PURPOSE }).then(
        () => assert.fail("opened with the crypto service down"),
        (caught: unknown) => caught,
      );
      assert.ok(error instanceof CryptoClientError);
      assert.equal(isDataFault(error), false);
    } finally {
      await env.startCrypto();
    }
    assert.equal((await owner.decryptVerify(artifact, { purpose: PURPOSE })).decryptedData, "up");
  });
});
