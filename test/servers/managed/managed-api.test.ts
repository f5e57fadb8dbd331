import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
import { after, before, describe, it } from "node:test";
import { connect } from "node:tls";
import { envelopeKeyId, PublicKeyRing, verifySignedBlob } from "../../../src/crypto/index.ts";
import { capturedLogs, type Environment, startEnvironment } from "./harness.ts";
import { type Answer, post, recordedBodies } from "./https-client.ts";

const ISO_WITH_OFFSET = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})$/;
const plaintextCanary = "canary-plaintext-that-must-not-leak-6e1f";
const JWT = /eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}/;

describe("managed crypto API", () => {
  let env: Environment;
  let headers: Record<string, string>;
  const wrongPassword = "canary-wrong-password-91b2";

  before(async () => {
    env = await startEnvironment();
    headers = {
      username: env.account.username,
      password: env.account.password,
      api_key: env.partner.apiKey,
      access_key: env.partner.accessKey,
      secret_key: env.partner.secretKey,
    };
  });
  after(() => env.close());

  const call = (operation: string, body: unknown, extra: Record<string, string> = {}, url = env.managedUrl) =>
    post(`${url}/v1/${operation}`, { ca: env.certificate.cert, headers: { ...headers, ...extra }, body });

  const okBody = (answer: Answer): Record<string, unknown> => {
    assert.equal(answer.status, 200, answer.text);
    assert.deepEqual(Object.keys(answer.json).sort(), ["body", "statusCode"]);
    assert.equal(answer.json.statusCode, 200);
    return answer.json.body as Record<string, unknown>;
  };

  const errorOf = (answer: Answer) =>
    answer.json as {
      error: string;
      message: string;
      requestId: string;
      details?: { reason?: string; fields?: string[] };
    };

  it("encrypts and decrypts with exactly the spec's body fields", async () => {
    const encrypted = okBody(await call("encrypt", { data: "hello, partner" }));
    assert.deepEqual(Object.keys(encrypted), ["encrypted_data"]);
    assert.equal(typeof encrypted.encrypted_data, "string");
    assert.equal(envelopeKeyId(String(encrypted.encrypted_data)), env.partner.keyId);
    const decrypted = okBody(await call("decrypt", { encrypted_data: encrypted.encrypted_data }));
    assert.deepEqual(decrypted, { decrypted_data: "hello, partner" });
  });

  it("signs and encrypts, then decrypts and verifies with signer and signed timestamp", async () => {
    const started = Date.now();
    const sealed = okBody(await call("sign-encrypt", { data: "signed payload" }));
    assert.deepEqual(Object.keys(sealed), ["encrypted_data"]);
    const verified = okBody(await call("decrypt-verify", { encrypted_data: sealed.encrypted_data }));
    assert.deepEqual(Object.keys(verified), [
      "decrypted_data",
      "is_valid_signature",
      "signed_by",
      "signed_timestamp",
      "metadata",
    ]);
    assert.equal(verified.decrypted_data, "signed payload");
    assert.equal(verified.is_valid_signature, true);
    assert.equal(verified.signed_by, "partner-acme");
    assert.match(String(verified.signed_timestamp), ISO_WITH_OFFSET);
    const signedAt = Date.parse(String(verified.signed_timestamp));
    assert.ok(signedAt >= started - 1000 && signedAt <= Date.now() + 1000);
    const { signed_blob: signedBlob, ...metadata } = verified.metadata as Record<string, unknown>;
    assert.deepEqual(metadata, {
      signer_key_id: env.partner.keyId,
      recipient_key_id: env.partner.keyId,
      purpose: "managed-crypto/v1",
    });
    // The original signature (spec note 3): anyone with the signer's public key can check it.
    const ring = PublicKeyRing.import(env.partner.publicKeys);
    const checked = await verifySignedBlob(Buffer.from(String(signedBlob), "base64"), {
      signerKeys: (signer, keyId) => ring.signerKeys(signer, keyId),
      expectedPurpose: "managed-crypto/v1",
    });
    assert.equal(Buffer.from(checked.payload).toString("utf8"), "signed payload");
    assert.equal(checked.signer, "partner-acme");
  });

  it("decrypt-verifies a policy-sized text, over 4 KB, with and without its signed blob (decision 3181)", async () => {
    const purpose = "authority-policy";
    for (const size of [5000, 300_000]) {
      const text = "p".repeat(size);
      const sealed = okBody(await call("sign-encrypt", { data: text, purpose }));
      for (const extra of [{}, { signed_blob: false }]) {
        const verified = okBody(
          await call("decrypt-verify", { encrypted_data: sealed.encrypted_data, purpose, ...extra }),
        );
        assert.equal(verified.decrypted_data, text, `${size}`);
      }
    }
  });

  it("signs under a named purpose, and decrypt-verify with a purpose refuses any other", async () => {
    const purpose = "authority-policy";
    const sealed = okBody(await call("sign-encrypt", { data: "policy text", purpose }));
    const verified = okBody(await call("decrypt-verify", { encrypted_data: sealed.encrypted_data, purpose }));
    assert.equal((verified.metadata as { purpose: string }).purpose, purpose);
    const other = await call("decrypt-verify", {
      encrypted_data: sealed.encrypted_data,
      purpose: "managed-crypto/v1",
    });
    assert.equal(other.status, 403);
    assert.equal(errorOf(other).details?.reason, "invalid_signature");
    const onEncrypt = await call("encrypt", { data: "x", purpose });
    assert.equal(onEncrypt.status, 400);
    assert.deepEqual(errorOf(onEncrypt).details, { reason: "invalid_field", fields: ["purpose"] });
    // Without the original signature when the caller does not need it (half the bytes).
    const lean = okBody(
      await call("decrypt-verify", { encrypted_data: sealed.encrypted_data, purpose, signed_blob: false }),
    );
    assert.equal(lean.decrypted_data, "policy text");
    assert.deepEqual(Object.keys(lean.metadata as object).sort(), [
      "purpose",
      "recipient_key_id",
      "signer_key_id",
    ]);
    for (const [operation, body] of [
      ["encrypt", { data: "x", signed_blob: false }],
      ["decrypt-verify", { encrypted_data: sealed.encrypted_data, signed_blob: "no" }],
    ] as const) {
      const refused = await call(operation, body);
      assert.equal(refused.status, 400);
      assert.deepEqual(errorOf(refused).details?.fields, ["signed_blob"]);
    }
    const notText = await call("sign-encrypt", { data: "x", purpose: 7 });
    assert.equal(notText.status, 400);
    assert.deepEqual(errorOf(notText).details?.fields, ["purpose"]);
  });

  it("carries one request id through the managed API and the crypto service", async () => {
    const id = "corr-7d1c9a52-0001";
    const answer = await call("encrypt", { data: "x" }, { "x-request-id": id });
    assert.equal(answer.headers["x-request-id"], id);
    const routes = capturedLogs
      .map((line) => JSON.parse(line) as { reqId?: string; route?: string })
      .filter((entry) => entry.reqId === id)
      .map((entry) => entry.route);
    assert.ok(routes.includes("/v1/encrypt"));
    assert.ok(routes.includes("/v1/actions"));
  });

  it("answers a wrong identity-provider username or password with 500, as the spec says", async () => {
    for (const extra of [{ password: wrongPassword }, { username: "svc-nobody" }] as Record<
      string,
      string
    >[]) {
      const answer = await call("encrypt", { data: "x" }, extra);
      assert.equal(answer.status, 500);
      assert.equal(errorOf(answer).error, "internal");
      assert.equal(errorOf(answer).details?.reason, "invalid_idp_credentials");
      assert.match(errorOf(answer).requestId, /^req_/);
    }
    // The right password still works right after (a failure is never cached).
    okBody(await call("encrypt", { data: "x" }));
  });

  it("answers each missing or empty credential header with 400 naming it", async () => {
    for (const name of ["username", "password", "api_key", "access_key", "secret_key"]) {
      const without = Object.fromEntries(Object.entries(headers).filter(([key]) => key !== name));
      const missing = await post(`${env.managedUrl}/v1/encrypt`, {
        ca: env.certificate.cert,
        headers: without,
        body: { data: "x" },
      });
      assert.equal(missing.status, 400, name);
      assert.equal(errorOf(missing).error, "invalid_request");
      assert.deepEqual(errorOf(missing).details?.fields, [name]);
      assert.ok(errorOf(missing).message.includes(name));
      const empty = await call("encrypt", { data: "x" }, { [name]: "" });
      assert.equal(empty.status, 400, `${name} empty`);
      assert.deepEqual(errorOf(empty).details?.fields, [name]);
    }
  });

  it("answers each missing, empty or non-string body field with 400 naming it", async () => {
    const fields: Array<[string, string]> = [
      ["encrypt", "data"],
      ["decrypt", "encrypted_data"],
      ["sign-encrypt", "data"],
      ["decrypt-verify", "encrypted_data"],
    ];
    for (const [operation, field] of fields) {
      for (const body of [{}, { [field]: "" }, { other: "x" }]) {
        const answer = await call(operation, body);
        assert.equal(answer.status, 400, `${operation} ${JSON.stringify(body)}`);
        assert.deepEqual(errorOf(answer).details?.fields, [field]);
        assert.ok(errorOf(answer).message.includes(field));
      }
      const wrongType = await call(operation, { [field]: 42 });
      assert.equal(wrongType.status, 400);
      assert.deepEqual(errorOf(wrongType).details?.fields, [field]);
    }
    const noBody = await post(`${env.managedUrl}/v1/encrypt`, { ca: env.certificate.cert, headers });
    assert.equal(noBody.status, 400);
  });

  it("answers wrong partner keys with 403", async () => {
    for (const name of ["api_key", "access_key", "secret_key"]) {
      const answer = await call("encrypt", { data: "x" }, { [name]: `${headers[name]}-wrong` });
      assert.equal(answer.status, 403, name);
      assert.equal(errorOf(answer).details?.reason, "invalid_partner_credentials");
    }
    const swapped = await call(
      "decrypt",
      { encrypted_data: "QUJD" },
      { api_key: headers.secret_key ?? "", secret_key: headers.api_key ?? "" },
    );
    assert.equal(swapped.status, 403);
  });

  it("refuses tampered ciphertexts with a clear 400 and no plaintext", async () => {
    const secretText = plaintextCanary;
    const plain = String(okBody(await call("encrypt", { data: secretText })).encrypted_data);
    const signed = String(okBody(await call("sign-encrypt", { data: secretText })).encrypted_data);
    const flip = (base64: string, index: number) => {
      const bytes = Buffer.from(base64, "base64");
      const at = index < 0 ? bytes.length + index : index;
      bytes[at] = (bytes[at] ?? 0) ^ 0x01;
      return bytes.toString("base64");
    };
    const attempts: Array<[string, string]> = [
      ["decrypt", flip(plain, -1)],
      ["decrypt", flip(plain, 40)],
      ["decrypt", flip(plain, 10)],
      ["decrypt", "not base64 at all!"],
      ["decrypt", plain.slice(0, 100)],
      ["decrypt", signed],
      ["decrypt-verify", flip(signed, -1)],
      ["decrypt-verify", flip(signed, 200)],
      ["decrypt-verify", plain],
    ];
    for (const [operation, encrypted] of attempts) {
      const answer = await call(operation, { encrypted_data: encrypted });
      assert.equal(answer.status, 400, `${operation}: ${answer.text}`);
      assert.equal(errorOf(answer).error, "invalid_ciphertext");
      assert.equal(errorOf(answer).details?.reason, "invalid_ciphertext");
      assert.equal(answer.text.includes(secretText), false);
      assert.equal(answer.text.includes("decrypted_data"), false);
    }
  });

  it("rate-limits per user with 429 and Retry-After", async () => {
    const limited = await env.startManaged({ rateLimit: { perUserPerMinute: 6, burst: 2 } });
    okBody(await call("encrypt", { data: "1" }, {}, limited.url));
    okBody(await call("encrypt", { data: "2" }, {}, limited.url));
    const refused = await call("encrypt", { data: "3" }, {}, limited.url);
    assert.equal(refused.status, 429);
    assert.equal(errorOf(refused).error, "rate_limited");
    const retryAfter = Number(refused.headers["retry-after"]);
    assert.ok(
      Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 10,
      String(refused.headers["retry-after"]),
    );
    // The limit is per user: another user is not affected.
    const other = { username: "svc-other-user", password: "canary-other-password-1d0e" };
    await env.addAccount(other);
    okBody(await call("encrypt", { data: "4" }, other, limited.url));
  });

  it("keeps old ciphertexts readable after a rotation; new ones use the new key id", async () => {
    const before = String(okBody(await call("encrypt", { data: "old secret" })).encrypted_data);
    const signedBefore = String(okBody(await call("sign-encrypt", { data: "old signed" })).encrypted_data);
    const rotated = await env.crypto().rotateOwner(env.partner.id);
    assert.equal(rotated.previousKeyId, env.partner.keyId);
    const after = String(okBody(await call("encrypt", { data: "new secret" })).encrypted_data);
    assert.equal(envelopeKeyId(before), env.partner.keyId);
    assert.equal(envelopeKeyId(after), rotated.keyId);
    assert.notEqual(rotated.keyId, env.partner.keyId);
    assert.deepEqual(okBody(await call("decrypt", { encrypted_data: before })), {
      decrypted_data: "old secret",
    });
    assert.deepEqual(okBody(await call("decrypt", { encrypted_data: after })), {
      decrypted_data: "new secret",
    });
    const verified = okBody(await call("decrypt-verify", { encrypted_data: signedBefore }));
    assert.equal(verified.decrypted_data, "old signed");
    assert.equal((verified.metadata as { signer_key_id: string }).signer_key_id, env.partner.keyId);
    const signedAfter = String(okBody(await call("sign-encrypt", { data: "new signed" })).encrypted_data);
    const verifiedAfter = okBody(await call("decrypt-verify", { encrypted_data: signedAfter }));
    assert.equal((verifiedAfter.metadata as { signer_key_id: string }).signer_key_id, rotated.keyId);
  });

  it("answers bodies over the limit with 413 and wrong media types with 415", async () => {
    const big = await call("encrypt", { data: "x".repeat(1024 * 1024 + 10) });
    assert.equal(big.status, 413);
    assert.equal(errorOf(big).error, "payload_too_large");
    const xml = await post(`${env.managedUrl}/v1/encrypt`, {
      ca: env.certificate.cert,
      headers: { ...headers, "content-type": "application/xml" },
      rawBody: "<data>x</data>",
    });
    assert.equal(xml.status, 415);
    // text/plain (which fastify parses by default) and a body without a Content-Type are not
    // JSON either: 415 with the error code, never a misleading missing_field.
    for (const contentType of ["text/plain", "application/x-www-form-urlencoded", undefined]) {
      const reply = await post(`${env.managedUrl}/v1/encrypt`, {
        ca: env.certificate.cert,
        headers: { ...headers, "content-type": contentType },
        rawBody: '{"data":"x"}',
      });
      assert.equal(reply.status, 415, String(contentType));
      assert.equal(errorOf(reply).error, "unsupported_media_type", String(contentType));
    }
  });

  it("serves HTTPS with the configured certificate and nothing in clear", async () => {
    const { port } = new URL(env.managedUrl);
    const fingerprint = await new Promise<string>((resolve, reject) => {
      const socket = connect({ host: "127.0.0.1", port: Number(port), ca: env.certificate.cert }, () => {
        resolve(socket.getPeerX509Certificate()?.fingerprint256 ?? "");
        socket.end();
      });
      socket.on("error", reject);
    });
    assert.equal(fingerprint, env.certificate.fingerprint);
    const plain = await new Promise<number | string>((resolve) => {
      const req = httpRequest(`http://127.0.0.1:${port}/healthz`, { agent: false }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on("error", (error: NodeJS.ErrnoException) => resolve(error.code ?? "error"));
      req.end();
    });
    assert.notEqual(plain, 200);
  });

  it("never returns or logs a password, a partner key or a token", async () => {
    // A last round of every path, then a scan of every body this suite received.
    await call("encrypt", { data: "x" }, { password: wrongPassword });
    await call("decrypt", { encrypted_data: "QUJD" });
    await call("decrypt-verify", { encrypted_data: "QUJD" }, { secret_key: "canary-secret-key-wrong-55aa" });
    const canaries = [
      env.account.password,
      wrongPassword,
      "canary-secret-key-wrong-55aa",
      "canary-other-password-1d0e",
      plaintextCanary,
      env.partner.apiKey,
      env.partner.accessKey,
      env.partner.secretKey,
    ];
    assert.ok(recordedBodies.length > 50);
    for (const body of recordedBodies) {
      for (const canary of canaries)
        assert.equal(body.includes(canary), false, `a response contains ${canary.slice(0, 12)}…`);
      assert.equal(JWT.test(body), false, "a response contains a JWT");
    }
    assert.ok(capturedLogs.length > 50);
    assert.ok(
      capturedLogs.some((line) => line.includes("invalid_idp_credentials") || line.includes("request")),
    );
    for (const line of capturedLogs) {
      for (const canary of canaries)
        assert.equal(line.includes(canary), false, `a log line contains ${canary.slice(0, 12)}…`);
      assert.equal(JWT.test(line), false, "a log line contains a JWT");
    }
  });
});
