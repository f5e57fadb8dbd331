/**
 * Attack pass on the verified blob moved from the crypto worker (decisions 3171, 3181): many
 * decrypt-verify requests at once through the real crypto service and its worker pool — JSON
 * and binary bodies, with and without the signed blob, plaintexts either side of the Buffer
 * pool's and a 64 KiB edge — each answer carries its own plaintext and a signed blob whose
 * payload is that plaintext, never another request's bytes or a wiped (zeroed) one; tampered
 * and foreign envelopes among them are refused without disturbing the rest.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { type CryptoCredentials, createCryptoClient } from "../../../src/clients/crypto-service/client.ts";
import { decodeSignedBlob } from "../../../src/crypto/index.ts";
import { rejectsWithCryptoCode } from "../../helpers/crypto-client-error.ts";
import { type Environment, startEnvironment } from "../managed/harness.ts";

describe("crypto service: decrypt-verify answers under concurrency", () => {
  let env: Environment;
  let credentials: CryptoCredentials;
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

  it("gives every request its own plaintext and signed blob, whatever runs beside it", async () => {
    const json = createCryptoClient({ baseUrl: env.cryptoUrl, timeoutMs: 30_000 });
    const binary = createCryptoClient({ baseUrl: env.cryptoUrl, timeoutMs: 30_000, binaryBodies: true });
    const sizes = [1, 17, 4095, 4096, 4097, 65_536, 300_000];
    const plaintexts = sizes.map((size, i) => String.fromCharCode(97 + i).repeat(size));
    const sealed: string[] = [];
    for (const [i, plaintext] of plaintexts.entries()) {
      sealed.push((await json.signEncrypt(credentials, plaintext, { purpose: `p${i}` })).encryptedData);
    }
    const tampered = Buffer.from(sealed[3] ?? "", "base64");
    tampered[tampered.length - 20] = (tampered[tampered.length - 20] ?? 0) ^ 1;
    const calls: Array<Promise<unknown>> = [];
    for (let round = 0; round < 3; round++) {
      for (const [i, envelope] of sealed.entries()) {
        for (const client of [json, binary]) {
          for (const signedBlob of [true, false]) {
            calls.push(
              client.decryptVerify(credentials, envelope, { purpose: `p${i}`, signedBlob }).then((answer) => {
                const label = `size ${sizes[i]}, ${client === json ? "JSON" : "binary"}, signed blob ${signedBlob}`;
                assert.equal(answer.decryptedData, plaintexts[i], label);
                if (!signedBlob) return assert.equal(answer.signedBlob, undefined, label);
                assert.ok(answer.signedBlob !== undefined, label);
                const payload = decodeSignedBlob(Buffer.from(answer.signedBlob, "base64")).payload;
                assert.equal(Buffer.from(payload).toString(), plaintexts[i], label);
              }),
            );
          }
        }
      }
      calls.push(
        rejectsWithCryptoCode(
          json.decryptVerify(credentials, tampered.toString("base64")),
          "invalid_ciphertext",
        ),
        rejectsWithCryptoCode(
          binary.decryptVerify(credentials, sealed[0] ?? "", { purpose: "other" }),
          "wrong_purpose",
        ),
      );
    }
    await Promise.all(calls);
  });
});
