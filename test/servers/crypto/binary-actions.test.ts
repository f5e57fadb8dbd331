/**
 * The action route's binary body (wire.ts BINARY_ACTION_TYPE, decision 3011) beside JSON: the
 * same decrypt-verify, the same answers and the same refusals; any frame an attacker can write
 * is a 400 with a public reason, never a 500, an echo or an action run without credentials.
 * The managed API sends its decrypt-verify this way, and falls back to JSON before an
 * upstream that refuses the type.
 */
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server } from "node:http";
import { after, before, describe, it } from "node:test";
import { type CryptoCredentials, createCryptoClient } from "../../../src/clients/crypto-service/client.ts";
import {
  BINARY_ACTION_TYPE,
  encodeBinaryBody,
  splitBinaryBody,
} from "../../../src/clients/crypto-service/wire.ts";
import { decodeSignedBlob } from "../../../src/crypto/index.ts";
import { rejectsWithCryptoCode } from "../../helpers/crypto-client-error.ts";
import { type Environment, startEnvironment } from "../managed/harness.ts";
import { post as httpsPost } from "../managed/https-client.ts";

/** A length prefix for a head of `length` bytes. */
const prefix = (length: number) => {
  const bytes = Buffer.alloc(4);
  bytes.writeUInt32BE(length, 0);
  return bytes;
};

/**
 * A plain HTTP relay in front of the crypto service that records each action's content type
 * and, when told to, refuses binary bodies with 415 as a crypto service without them does.
 */
function relay(target: string, refuseBinary: boolean) {
  const seen: string[] = [];
  const server: Server = createServer(async (request: IncomingMessage, response) => {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const type = String(request.headers["content-type"] ?? "");
    seen.push(type);
    if (refuseBinary && type === BINARY_ACTION_TYPE) {
      response.writeHead(415, { "content-type": "application/json" });
      response.end(JSON.stringify({ error: "unsupported_media_type", details: {} }));
      return;
    }
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(request.headers)) {
      if (typeof value === "string" && !["host", "connection", "content-length"].includes(name))
        headers[name] = value;
    }
    const upstream = await fetch(`${target}${request.url}`, {
      method: request.method ?? "POST",
      headers,
      ...(chunks.length === 0 ? {} : { body: Buffer.concat(chunks) }),
    });
    response.writeHead(upstream.status, {
      "content-type": upstream.headers.get("content-type") ?? "application/json",
    });
    response.end(Buffer.from(await upstream.arrayBuffer()));
  });
  return {
    seen,
    listen: () =>
      new Promise<string>((resolve) =>
        server.listen(0, "127.0.0.1", () => {
          const address = server.address();
          resolve(`http://127.0.0.1:${typeof address === "object" && address !== null ? address.port : 0}`);
        }),
      ),
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

describe("crypto service: binary decrypt-verify bodies", () => {
  let env: Environment;
  let credentials: CryptoCredentials;
  let sealed: string;
  const jsonClient = () => createCryptoClient({ baseUrl: env.cryptoUrl, timeoutMs: 10_000 });
  const binaryClient = (baseUrl = env.cryptoUrl) =>
    createCryptoClient({ baseUrl, timeoutMs: 10_000, binaryBodies: true });

  before(async () => {
    env = await startEnvironment();
    credentials = {
      token: await env.userToken(),
      apiKey: env.partner.apiKey,
      accessKey: env.partner.accessKey,
      secretKey: env.partner.secretKey,
    };
    sealed = (
      await jsonClient().signEncrypt(credentials, "policy body é", { purpose: "authority-policy/v1" })
    ).encryptedData;
  });
  after(() => env.close());

  const post = async (body: Uint8Array, headers: Record<string, string> = {}, path = "/v1/actions") => {
    const response = await fetch(`${env.cryptoUrl}${path}`, {
      method: "POST",
      headers: {
        "content-type": BINARY_ACTION_TYPE,
        authorization: `Bearer ${credentials.token}`,
        api_key: credentials.apiKey,
        access_key: credentials.accessKey,
        secret_key: credentials.secretKey,
        ...headers,
      },
      body,
    });
    const bytes = Buffer.from(await response.arrayBuffer());
    for (const secret of [
      credentials.token,
      credentials.apiKey,
      credentials.accessKey,
      credentials.secretKey,
    ])
      assert.equal(bytes.includes(secret), false);
    return { status: response.status, type: response.headers.get("content-type") ?? "", bytes };
  };
  const reason = (bytes: Buffer) =>
    (JSON.parse(bytes.toString()) as { details?: { reason?: string } }).details?.reason;

  it("answers a binary request with the JSON answer's fields as head and the signed blob as bytes", async () => {
    const envelope = Buffer.from(sealed, "base64");
    const answer = await post(
      encodeBinaryBody({ actions: ["d", "v"], purpose: "authority-policy/v1" }, envelope),
    );
    assert.equal(answer.status, 200);
    assert.equal(answer.type, BINARY_ACTION_TYPE);
    const { head, bytes } = splitBinaryBody(answer.bytes);
    const json = await jsonClient().decryptVerify(credentials, sealed, { purpose: "authority-policy/v1" });
    const payload = JSON.parse(head) as Record<string, unknown>;
    assert.equal(payload.decrypted_data, "policy body é");
    assert.equal(payload.is_valid_signature, true);
    assert.equal(payload.signed_by, json.signedBy);
    assert.equal(payload.signed_timestamp, json.signedTimestamp);
    assert.equal(payload.signed_blob, undefined);
    assert.equal(Buffer.from(bytes).toString("base64"), json.signedBlob);
    assert.equal(Buffer.from(decodeSignedBlob(bytes).payload).toString(), "policy body é");

    const lean = await post(encodeBinaryBody({ actions: ["d", "v"], signed_blob: false }, envelope));
    assert.equal(lean.status, 200);
    assert.equal(splitBinaryBody(lean.bytes).bytes.length, 0);
  });

  it("answers a plaintext longer than a request head's bound as JSON does: the answer's head carries it (decision 3181)", async () => {
    // The answer's head holds `decrypted_data`: a policy text is far over the 4 KB a request head may have.
    for (const size of [4000, 4096, 70_000, 400_000]) {
      const text = `é${"policy ".repeat(size / 7)}"\\`;
      const large = (await jsonClient().signEncrypt(credentials, text, { purpose: "authority-policy/v1" }))
        .encryptedData;
      for (const options of [{ purpose: "authority-policy/v1" }, { signedBlob: false }]) {
        const expected = await jsonClient().decryptVerify(credentials, large, options);
        assert.equal(expected.decryptedData, text);
        assert.deepEqual(
          await binaryClient().decryptVerify(credentials, large, options),
          expected,
          `${size}`,
        );
      }
    }
  });

  it("gives the client the same result over both formats, and the same refusals", async () => {
    // Both transports: undici's kept-alive agent and an injected fetch.
    const viaFetch = createCryptoClient({
      baseUrl: env.cryptoUrl,
      timeoutMs: 10_000,
      binaryBodies: true,
      fetch: globalThis.fetch,
    });
    for (const options of [{ purpose: "authority-policy/v1" }, { signedBlob: false }, {}]) {
      const expected = await jsonClient().decryptVerify(credentials, sealed, options);
      assert.deepEqual(await binaryClient().decryptVerify(credentials, sealed, options), expected);
      assert.deepEqual(await viaFetch.decryptVerify(credentials, sealed, options), expected);
    }
    const tampered = Buffer.from(sealed, "base64");
    tampered[tampered.length - 40] = (tampered[tampered.length - 40] ?? 0) ^ 1;
    const plain = (await jsonClient().encrypt(credentials, "x")).encryptedData;
    const refusals: Array<[string, string, Record<string, string>]> = [
      [tampered.toString("base64"), "invalid_ciphertext", {}],
      [plain, "invalid_ciphertext", {}],
      // Not canonical base64: refused by the upstream exactly as over JSON.
      [`${sealed.slice(0, -4)}!${sealed.slice(-3)}`, "invalid_ciphertext", {}],
      [sealed, "wrong_purpose", { purpose: "other" }],
    ];
    for (const [text, code, options] of refusals) {
      await rejectsWithCryptoCode(binaryClient().decryptVerify(credentials, text, options), code);
      await rejectsWithCryptoCode(jsonClient().decryptVerify(credentials, text, options), code);
    }
    await rejectsWithCryptoCode(
      binaryClient().decryptVerify({ ...credentials, secretKey: `${credentials.secretKey}x` }, sealed),
      "invalid_credentials",
    );
  });

  it("refuses every malformed frame or head with a 400 and a public reason", async () => {
    const envelope = Buffer.from(sealed, "base64");
    const head = (value: unknown) => Buffer.from(JSON.stringify(value));
    const framed = (text: Buffer, bytes: Uint8Array = envelope) =>
      Buffer.concat([prefix(text.length), text, bytes]);
    const deep = JSON.parse(`${"[".repeat(200)}${"]".repeat(200)}`) as unknown;
    const cases: Array<[string, Buffer, string]> = [
      ["empty body", Buffer.alloc(0), "invalid_request"],
      ["shorter than the prefix", Buffer.of(0, 0, 1), "invalid_request"],
      [
        "head longer than the body",
        Buffer.concat([prefix(64), head({ actions: ["d", "v"] })]),
        "invalid_request",
      ],
      [
        "head over the limit",
        Buffer.concat([prefix(5000), Buffer.alloc(5000, 0x20), envelope]),
        "invalid_request",
      ],
      ["head length 2^32-1", Buffer.concat([prefix(0xffffffff), envelope]), "invalid_request"],
      ["head not JSON", framed(Buffer.from("{actions")), "invalid_request"],
      ["head not an object", framed(head(["d", "v"])), "invalid_request"],
      ["head nested past the limits", framed(head({ actions: ["d", "v"], x: deep })), "invalid_request"],
      ["no actions", framed(head({})), "missing_field"],
      ["decrypt only", framed(head({ actions: ["d"] })), "invalid_request"],
      ["encrypt", framed(head({ actions: ["e"], data: "x" })), "invalid_request"],
      ["sign-encrypt", framed(head({ actions: ["s", "e"], data: "x" })), "invalid_request"],
      ["unwrap", framed(head({ actions: ["u"] })), "invalid_request"],
      [
        "envelope also in the head",
        framed(head({ actions: ["d", "v"], encrypted_data: sealed })),
        "invalid_request",
      ],
      ["unused field", framed(head({ actions: ["d", "v"], data: "x" })), "invalid_request"],
      [
        "signed_blob not a boolean",
        framed(head({ actions: ["d", "v"], signed_blob: "no" })),
        "invalid_request",
      ],
      ["no envelope bytes", framed(head({ actions: ["d", "v"] }), Buffer.alloc(0)), "missing_field"],
      ["__proto__ in the head", framed(Buffer.from('{"__proto__":{"actions":["d","v"]}}')), "missing_field"],
      [
        "garbage envelope",
        framed(head({ actions: ["d", "v"] }), Buffer.alloc(3000, 7)),
        "invalid_ciphertext",
      ],
      [
        "truncated envelope",
        framed(head({ actions: ["d", "v"] }), envelope.subarray(0, 1200)),
        "invalid_ciphertext",
      ],
    ];
    for (const [name, body, expected] of cases) {
      const answer = await post(body);
      assert.equal(answer.status, 400, name);
      assert.match(answer.type, /^application\/json/, name);
      assert.equal(reason(answer.bytes), expected, name);
      assert.equal(answer.bytes.includes(envelope.subarray(100, 140)), false, name);
    }
    assert.equal(({} as Record<string, unknown>).actions, undefined);
  });

  it("authenticates a binary call before reading it, and no other route takes the type", async () => {
    const body = encodeBinaryBody({ actions: ["d", "v"] }, Buffer.from(sealed, "base64"));
    assert.equal((await post(body, { authorization: "Bearer not-a-token" })).status, 401);
    const noKey = await post(body, { secret_key: "" });
    assert.equal(noKey.status, 400);
    assert.equal(reason(noKey.bytes), "missing_field");
    assert.equal((await post(body, { secret_key: `${credentials.secretKey}x` })).status, 403);
    const admin = await post(body, { authorization: `Bearer ${await env.adminToken()}` }, "/v1/admin/owners");
    assert.equal(admin.status, 400);
    const delegated = await post(body, {}, "/v1/delegated-owners");
    assert.ok(delegated.status === 400 || delegated.status === 403, String(delegated.status));
  });

  it("the managed API sends decrypt-verify as bytes, and JSON to an upstream that refuses them", async () => {
    for (const refuseBinary of [false, true]) {
      const proxy = relay(env.cryptoUrl, refuseBinary);
      const { url } = await env.startManaged({ cryptoUrl: await proxy.listen() });
      try {
        for (let call = 0; call < 2; call += 1) {
          const answer = await httpsPost(`${url}/v1/decrypt-verify`, {
            ca: env.certificate.cert,
            headers: {
              "content-type": "application/json",
              username: env.account.username,
              password: env.account.password,
              api_key: env.partner.apiKey,
              access_key: env.partner.accessKey,
              secret_key: env.partner.secretKey,
            },
            body: { encrypted_data: sealed },
          });
          assert.equal(answer.status, 200);
          const body = answer.json.body as Record<string, unknown>;
          assert.equal(body.decrypted_data, "policy body é");
          assert.equal(body.is_valid_signature, true);
          assert.equal(
            (body.metadata as Record<string, unknown>).signed_blob,
            (await jsonClient().decryptVerify(credentials, sealed)).signedBlob,
          );
        }
        const actions = proxy.seen.filter((type) => type !== "application/x-www-form-urlencoded");
        assert.deepEqual(
          actions,
          refuseBinary
            ? [BINARY_ACTION_TYPE, "application/json", "application/json"]
            : [BINARY_ACTION_TYPE, BINARY_ACTION_TYPE],
        );
      } finally {
        await proxy.close();
      }
    }
  });
});
