import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { CryptoClientError } from "../../../src/clients/crypto-service/client.ts";
import { createManagedCryptoClient } from "../../../src/clients/crypto-service/managed-client.ts";

/**
 * The authority's managed-API client against a hostile or broken managed API: every answer
 * that is not exactly a verified result — a non-200, a body that is not the `{ statusCode,
 * body }` envelope, `is_valid_signature` anything but `true`, a signed purpose other than the
 * one asked for — is an error with a fixed code, never a plaintext handed on. Outages and our
 * own credentials refused are faults (the protector answers 503); data problems are the data's.
 */
describe("managed crypto client: answers it must not believe", () => {
  let server: Server;
  let url: string;
  let answer: (request: IncomingMessage, body: string, response: ServerResponse) => void = () => {};
  const seen: Array<{ headers: IncomingMessage["headers"]; body: string }> = [];
  const credentials = {
    username: "authority-svc",
    password: "pw-0123456789",
    apiKey: "apk_1",
    accessKey: "ak_1",
    secretKey: "sk_1",
  };
  const json = (response: ServerResponse, status: number, value: unknown) => {
    response.writeHead(status, { "content-type": "application/json" });
    response.end(typeof value === "string" ? value : JSON.stringify(value));
  };
  const verified = (overrides: Record<string, unknown> = {}, metadata: Record<string, unknown> = {}) => ({
    statusCode: 200,
    body: {
      decrypted_data: "policy text",
      is_valid_signature: true,
      signed_by: "service:env",
      signed_timestamp: "2026-11-26T00:00:00.000+00:00",
      metadata: { signer_key_id: "k1", recipient_key_id: "k1", purpose: "authority-policy", ...metadata },
      ...overrides,
    },
  });

  before(async () => {
    server = createServer((request, response) => {
      let body = "";
      request.on("data", (chunk) => {
        body += chunk;
      });
      request.on("end", () => {
        seen.push({ headers: request.headers, body });
        answer(request, body, response);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));

  const owner = () =>
    createManagedCryptoClient({ baseUrl: url, timeoutMs: 2000 }).owner("service:env", credentials);
  const code = async (run: () => Promise<unknown>) => {
    try {
      await run();
    } catch (error) {
      assert.ok(error instanceof CryptoClientError, String(error));
      assert.equal(error.message.includes("policy text"), false);
      return error.code;
    }
    assert.fail("expected a CryptoClientError");
  };
  const decryptVerify = () => owner().decryptVerify("ciphertext", { purpose: "authority-policy" });

  test("sends the five credential headers and the purpose; reads a verified answer", async () => {
    answer = (_request, _body, response) => json(response, 200, verified({}, { signed_blob: "YmxvYg==" }));
    const result = await owner().decryptVerify("ciphertext", {
      purpose: "authority-policy",
      signedBlob: false,
    });
    assert.equal(result.decryptedData, "policy text");
    assert.equal(result.signedBy, "service:env");
    const last = seen.at(-1);
    assert.ok(last);
    for (const [header, value] of Object.entries({
      username: credentials.username,
      password: credentials.password,
      api_key: credentials.apiKey,
      access_key: credentials.accessKey,
      secret_key: credentials.secretKey,
    })) {
      assert.equal(last.headers[header], value);
    }
    assert.deepEqual(JSON.parse(last.body), {
      encrypted_data: "ciphertext",
      purpose: "authority-policy",
      signed_blob: false,
    });
  });

  test("a verification it cannot take at its word is invalid_signature or wrong_purpose", async () => {
    for (const flag of [false, "true", 1, null, undefined]) {
      answer = (_request, _body, response) => json(response, 200, verified({ is_valid_signature: flag }));
      assert.equal(await code(decryptVerify), "invalid_signature", String(flag));
    }
    answer = (_request, _body, response) =>
      json(response, 200, verified({}, { purpose: "managed-crypto/v1" }));
    assert.equal(await code(decryptVerify), "wrong_purpose");
  });

  test("malformed answers are upstream errors; outages and refused credentials are faults", async () => {
    const cases: Array<[number, unknown, string]> = [
      [200, "not json", "upstream_error"],
      [200, { statusCode: 200 }, "upstream_error"],
      [200, { statusCode: 500, body: {} }, "upstream_error"],
      [200, verified({ signed_by: 7 }), "upstream_error"],
      [
        503,
        { error: "upstream_unavailable", details: { reason: "upstream_unavailable" } },
        "upstream_unavailable",
      ],
      [
        503,
        { error: "upstream_unavailable", details: { reason: "idp_unavailable" } },
        "upstream_unavailable",
      ],
      [504, { error: "upstream_timeout", details: { reason: "upstream_timeout" } }, "upstream_timeout"],
      [429, { error: "rate_limited", details: { reason: "rate_limited" } }, "upstream_unavailable"],
      [500, { error: "internal", details: { reason: "invalid_idp_credentials" } }, "invalid_credentials"],
      [
        403,
        { error: "invalid_credentials", details: { reason: "invalid_partner_credentials" } },
        "invalid_credentials",
      ],
      [400, { error: "invalid_ciphertext", details: { reason: "invalid_ciphertext" } }, "invalid_ciphertext"],
      [403, { error: "invalid_signature", details: { reason: "invalid_signature" } }, "invalid_signature"],
      [502, "<html>bad gateway</html>", "upstream_unavailable"],
      [418, { error: "teapot" }, "upstream_error"],
    ];
    for (const [status, body, expected] of cases) {
      answer = (_request, _body, response) => json(response, status, body);
      assert.equal(await code(decryptVerify), expected, `${status} ${JSON.stringify(body)}`);
    }
    answer = (request) => request.socket.destroy();
    assert.equal(await code(decryptVerify), "upstream_unavailable");
    answer = () => {};
    assert.equal(await code(decryptVerify), "upstream_timeout");
  });
});
