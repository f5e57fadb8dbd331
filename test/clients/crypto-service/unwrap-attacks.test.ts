/**
 * Attacks on the content-key unwrap (the crypto service's action `u`) and on the authority's
 * direct path that opens with it (content-key-open.ts, owner-crypto.ts), against the real
 * crypto service: every refused unwrap is one clean 400 that carries no key and tells no check
 * from another; authority envelopes and sealed secrets opened with unwrapped keys are refused
 * exactly where the crypto service's own decrypt-verify refuses them (another owner's
 * signature, another purpose, re-sealed blobs); a forged key id costs one key fetch; a silent
 * crypto service is a timeout, not a bad ciphertext; no key, token or plaintext in its logs.
 */
import assert from "node:assert/strict";
import { createCipheriv, randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { PARTNER_PROFILE_V2 } from "../../../src/bindings/envelope.ts";
import { createServiceEnvelopeCrypto } from "../../../src/bindings/envelope-service-crypto.ts";
import {
  CryptoClientError,
  type CryptoCredentials,
  createCryptoClient,
  isDataFault,
} from "../../../src/clients/crypto-service/client.ts";
import type { OwnerCrypto } from "../../../src/clients/crypto-service/owner-crypto.ts";
import {
  deserializeEnvelope,
  KeyRing,
  openWithContentKey,
  PublicKeyRing,
  sealBytes,
  serializeEnvelope,
  signEncrypt,
} from "../../../src/crypto/index.ts";
import { SIGN_ENCRYPT_AAD } from "../../../src/crypto/sign-encrypt.ts";
import { createServiceSecretBox } from "../../../src/servers/authority/key-custody.ts";
import type { ProvisionedOwner } from "../../../src/servers/crypto/server.ts";
import { canary, LeakWatch } from "../../helpers/canary.ts";
import { rejectsWithCryptoCode } from "../../helpers/crypto-client-error.ts";
import { capturedLogs, type Environment, startEnvironment } from "../../servers/managed/harness.ts";
import { directPath, outcome, partnerKeysOf, servicePath } from "./owner-paths.ts";

const SECRET_PURPOSE = "authority-secret/v1";
const POLICY_PURPOSE = "authority-policy";
const PROFILE = PARTNER_PROFILE_V2;

describe("content-key unwrap under attack", () => {
  let env: Environment;
  let service: ProvisionedOwner;
  let agent: ProvisionedOwner;
  const watch = new LeakWatch();
  /** Every request to the crypto service: method, path, body. */
  const sent: Array<{ method: string; path: string; body: string }> = [];
  const recordingFetch: typeof fetch = (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    sent.push({
      method: init?.method ?? "GET",
      path: url.pathname,
      body: typeof init?.body === "string" ? init.body : "",
    });
    return fetch(input, init);
  };
  const client = () => createCryptoClient({ baseUrl: env.cryptoUrl, fetch: recordingFetch, timeoutMs: 5000 });
  const token = async () => {
    const value = await env.userToken();
    watch.token(value);
    return value;
  };
  const keysOf = partnerKeysOf;
  const credentials = async (owner: ProvisionedOwner): Promise<CryptoCredentials> => ({
    token: await token(),
    ...keysOf(owner),
  });
  /** The authority's direct path: unwrap, then decrypt and verify here. */
  const direct = (owner: ProvisionedOwner, baseClient = client()): OwnerCrypto =>
    directPath(baseClient, owner, token);
  /** The same operations answered by the crypto service's own decrypt-verify (`d`+`v`). */
  const viaService = (owner: ProvisionedOwner): OwnerCrypto => servicePath(client(), owner, token);
  const rawAction = async (owner: ProvisionedOwner, body: string) => {
    const own = await credentials(owner);
    const response = await fetch(`${env.cryptoUrl}/v1/actions`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        authorization: `Bearer ${own.token}`,
        ...{ api_key: own.apiKey, access_key: own.accessKey, secret_key: own.secretKey },
      },
      body,
    });
    const text = await response.text();
    watch.checkResponse("POST /v1/actions (u)", text);
    return { status: response.status, text };
  };
  /** The body without its request id, so two refusals can be compared byte for byte. */
  const withoutRequestId = (text: string) => text.replace(/"requestId":"[^"]*"/, "");

  before(async () => {
    env = await startEnvironment();
    service = await env.crypto().provisionOwner({ id: "service:authority", kind: "service" });
    agent = await env.crypto().provisionOwner({ id: "subject:agent-1", kind: "subject" });
    for (const owner of [service, agent, env.partner]) {
      for (const value of Object.values(keysOf(owner))) watch.secret(value);
    }
  });
  after(async () => {
    watch.checkLogs(capturedLogs);
    await env.close();
    assert.deepEqual(watch.findings(), []);
  });

  it("refuses every bad header with one 400 that names no check and carries no key", async () => {
    const artifact = await direct(agent).signEncrypt(canary("policy-"), { purpose: POLICY_PURPOSE });
    const header = deserializeEnvelope(artifact).header;
    const keyIdEnd = 8 + (header[7] ?? 0);
    const edit = (change: (bytes: Buffer) => void) => {
      const copy = Buffer.from(header);
      change(copy);
      return copy.toString("base64");
    };
    const partnerArtifact = (await client().encrypt(await credentials(env.partner), "the partner's secret"))
      .encryptedData;
    const base64 = header.toString("base64");
    assert.match(base64, /[+/]/, "the header's base64 has characters base64url would change");
    const cryptoFailures = {
      "crafted KEM ciphertext": edit((bytes) => randomBytes(1088).copy(bytes, keyIdEnd + 2)),
      "one KEM ciphertext bit": edit((bytes) => {
        bytes[keyIdEnd + 100] = (bytes[keyIdEnd + 100] ?? 0) ^ 0x01;
      }),
      "mismatching nonce": edit((bytes) => {
        bytes[bytes.length - 1] = (bytes[bytes.length - 1] ?? 0) ^ 0x80;
      }),
      "unknown key id of the same form": edit((bytes) => bytes.write("pq1-0000000000000000", 8, "latin1")),
      "another owner's envelope": deserializeEnvelope(partnerArtifact).header.toString("base64"),
      "header and one more byte": Buffer.concat([header, Buffer.of(0)]).toString("base64"),
      "the whole envelope": artifact,
      "a header cut short": header.subarray(0, -1).toString("base64"),
      "base64url alphabet": base64.replaceAll("+", "-").replaceAll("/", "_"),
      "base64 without padding": base64.replace(/=+$/, ""),
      "base64 with a line break": `${base64.slice(0, 76)}\n${base64.slice(76)}`,
      "base64 with a leading space": ` ${base64}`,
      "not base64": "%%%",
      "another format version": edit((bytes) => {
        bytes[4] = 2;
      }),
      "another suite": edit((bytes) => bytes.writeUInt16BE(0x0002, 5)),
    };
    const bodies = new Set<string>();
    for (const [what, bad] of Object.entries(cryptoFailures)) {
      const answer = await rawAction(agent, JSON.stringify({ actions: ["u"], envelope_header: bad }));
      assert.equal(answer.status, 400, what);
      assert.equal(answer.text.includes("content_key"), false, what);
      const json = JSON.parse(answer.text) as { details?: { reason?: string } };
      assert.equal(json.details?.reason, "invalid_ciphertext", what);
      bodies.add(withoutRequestId(answer.text));
    }
    assert.equal(bodies.size, 1, "every failed unwrap gets the same answer: no oracle");

    for (const body of [
      { actions: ["u"], envelope_header: "" },
      { actions: ["u"], envelope_header: 7 },
      { actions: ["u"], envelope_header: null },
      { actions: ["u"], envelope_header: [base64] },
      { actions: ["u", "v"], envelope_header: base64 },
      { actions: ["u"], envelope_header: base64, purpose: POLICY_PURPOSE },
    ]) {
      const answer = await rawAction(agent, JSON.stringify(body));
      assert.equal(answer.status, 400, JSON.stringify(body).slice(0, 60));
      assert.equal(answer.text.includes("content_key"), false);
    }
    // Still the owner's own header unwraps.
    const good = await client().unwrap(await credentials(agent), base64);
    assert.equal(good.contentKey.length, 32);
    watch.secret(good.contentKey.toString("base64"));
    watch.secret(good.contentKey.toString("hex"));
  });

  it("unwraps only for the owner's credentials, its token and its allowed subjects", async () => {
    const restricted = await env.crypto().provisionOwner({
      id: "subject:restricted",
      kind: "subject",
      allowedSubjects: ["svc-only"],
    });
    for (const value of Object.values(keysOf(restricted))) watch.secret(value);
    const artifact = await client().encrypt(
      { token: await env.userToken("svc-only"), ...keysOf(restricted) },
      canary("restricted-"),
    );
    const header = deserializeEnvelope(artifact.encryptedData).header.toString("base64");
    const body = JSON.stringify({ actions: ["u"], envelope_header: header });
    const attempt = async (bearer: string, keys: ReturnType<typeof keysOf>) => {
      watch.token(bearer);
      const response = await fetch(`${env.cryptoUrl}/v1/actions`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          authorization: `Bearer ${bearer}`,
          ...{ api_key: keys.apiKey, access_key: keys.accessKey, secret_key: keys.secretKey },
        },
        body,
      });
      const text = await response.text();
      watch.checkResponse("POST /v1/actions (u)", text, { expectsSecrets: response.status === 200 });
      assert.equal(text.includes("content_key"), response.status === 200);
      if (response.status === 200) watch.secret((JSON.parse(text) as { content_key: string }).content_key);
      return response.status;
    };
    const wrongSecret = { ...keysOf(restricted), secretKey: `${restricted.secretKey.slice(0, -1)}x` };
    assert.equal(await attempt("not-a-token", keysOf(restricted)), 401);
    assert.equal(await attempt(await env.userToken("svc-only"), wrongSecret), 403);
    assert.equal(await attempt(await env.userToken("svc-acme"), keysOf(restricted)), 403);
    assert.equal(await attempt(await env.userToken("svc-acme"), keysOf(agent)), 400);
    assert.equal(await attempt(await env.userToken("svc-only"), keysOf(restricted)), 200);
  });

  it("refuses huge headers cheaply: 413 over the body limit, 400 under it", async () => {
    const started = performance.now();
    const over = await rawAction(
      agent,
      JSON.stringify({ actions: ["u"], envelope_header: "A".repeat(3 * 1024 * 1024) }),
    );
    assert.equal(over.status, 413);
    const under = await rawAction(
      agent,
      JSON.stringify({ actions: ["u"], envelope_header: "QVBRRQ".padEnd(1_900_000, "A") }),
    );
    assert.equal(under.status, 400);
    assert.equal(under.text.includes("content_key"), false);
    assert.ok(performance.now() - started < 10_000);
  });

  it("unwraps a retired key of the caller's own ring, never another owner's", async () => {
    const before = await direct(env.partner).signEncrypt("signed before", { purpose: POLICY_PURPOSE });
    await env.crypto().rotateOwner(env.partner.id);
    const header = deserializeEnvelope(before).header.toString("base64");
    await rejectsWithCryptoCode(client().unwrap(await credentials(agent), header), "invalid_ciphertext");
    const own = await client().unwrap(await credentials(env.partner), header);
    assert.equal(own.keyId, deserializeEnvelope(before).keyId);
    own.contentKey.fill(0);
    // The direct path verifies a signature by the retired key, as the crypto service does.
    const opened = await direct(env.partner).decryptVerify(before, { purpose: POLICY_PURPOSE });
    assert.equal(opened.decryptedData, "signed before");
    assert.deepEqual(
      opened,
      await viaService(env.partner).decryptVerify(before, { purpose: POLICY_PURPOSE }),
    );
  });

  it("hands its recipient the key of a sign-encrypt envelope whatever the signature; the direct path still refuses it", async () => {
    // Anyone can sign-encrypt to the agent's public key with a key the crypto service never saw.
    const agentKeys = PublicKeyRing.import(await env.crypto().publicKeys(agent.id));
    const forged = signEncrypt({
      signer: KeyRing.generate({ owner: agent.id, keyId: agentKeys.current.keyId }).signer(),
      recipient: agentKeys,
      purpose: POLICY_PURPOSE,
      plaintext: "allow all",
    });
    // `d` refuses it (other associated data), `d`+`v` refuses the signature ...
    await rejectsWithCryptoCode(client().decrypt(await credentials(agent), forged), "invalid_ciphertext");
    // ... but `u` releases its key to the recipient, which can read it unverified.
    const { contentKey } = await client().unwrap(
      await credentials(agent),
      deserializeEnvelope(forged).header.toString("base64"),
    );
    const blob = openWithContentKey(deserializeEnvelope(forged), contentKey, SIGN_ENCRYPT_AAD);
    assert.ok(Buffer.from(blob).toString("latin1").includes("allow all"));
    contentKey.fill(0);
    // What the authority does with it stays a refusal, as the crypto service's own answer.
    const local = await outcome(direct(agent).decryptVerify(forged, { purpose: POLICY_PURPOSE }));
    assert.equal(local, "CryptoClientError:invalid_signature:true");
    assert.equal(await outcome(viaService(agent).decryptVerify(forged, { purpose: POLICY_PURPOSE })), local);
  });

  it("authority envelopes and sealed secrets: refused where the crypto service refuses them", async () => {
    const paths = { direct: direct(service), service: viaService(service) };
    const envelopes = {
      direct: createServiceEnvelopeCrypto({ service: paths.direct }),
      service: createServiceEnvelopeCrypto({ service: paths.service }),
    };
    const secrets = {
      direct: createServiceSecretBox(paths.direct),
      service: createServiceSecretBox(paths.service),
    };
    const claims = JSON.stringify({ binding_id: "b-1", decision: "allow" });
    const envelope = await paths.service.signEncrypt(claims, { purpose: PROFILE.purpose });
    const secret = await secrets.service.seal("auth-profile:p-1", canary("secret-"));
    // A valid signature by another owner of the crypto service, encrypted to the service identity.
    const byPartner = (
      await client().signEncrypt(await credentials(env.partner), claims, {
        purpose: PROFILE.purpose,
        recipient: service.id,
      })
    ).encryptedData;
    const policy = await paths.service.signEncrypt("{}", { purpose: POLICY_PURPOSE });

    const cases: Record<string, (path: "direct" | "service") => Promise<unknown>> = {
      "the envelope": (path) => envelopes[path].open(envelope, "partner-acme", PROFILE),
      "another owner's signature": (path) => envelopes[path].open(byPartner, "partner-acme", PROFILE),
      "a sealed secret as an envelope": (path) => envelopes[path].open(secret, "partner-acme", PROFILE),
      "a policy as an envelope": (path) => envelopes[path].open(policy, "partner-acme", PROFILE),
      "the secret": (path) => secrets[path].open("auth-profile:p-1", secret),
      "the secret under another aad": (path) => secrets[path].open("auth-profile:p-2", secret),
      "an envelope as a secret": (path) => secrets[path].open("auth-profile:p-1", envelope),
      "another owner's envelope as a secret": (path) => secrets[path].open("auth-profile:p-1", byPartner),
      "a policy as a policy of another purpose": (path) =>
        paths[path].decryptVerify(policy, { purpose: SECRET_PURPOSE }),
    };
    const expected: Record<string, string> = {
      "another owner's signature": `ok:${JSON.stringify({ ok: false, failure: "signer_mismatch" })}`,
      "a sealed secret as an envelope": `ok:${JSON.stringify({ ok: false, failure: "invalid_signature" })}`,
      "a policy as an envelope": `ok:${JSON.stringify({ ok: false, failure: "invalid_signature" })}`,
      "the secret under another aad": "SecretSealError:secret_unreadable:false",
      "an envelope as a secret": "SecretSealError:secret_unreadable:false",
      "another owner's envelope as a secret": "SecretSealError:secret_unreadable:false",
      "a policy as a policy of another purpose": "CryptoClientError:wrong_purpose:true",
    };
    for (const [what, run] of Object.entries(cases)) {
      const local = await outcome(run("direct"));
      assert.equal(local, await outcome(run("service")), what);
      if (expected[what] !== undefined) assert.equal(local, expected[what], what);
      else assert.match(local, /^ok:/, what);
    }
  });

  it("a blob re-sealed under a known content key passes only as what it was signed for", async () => {
    const owner = direct(service);
    const envelope = await owner.signEncrypt('{"decision":"allow"}', { purpose: PROFILE.purpose });
    const secret = await owner.signEncrypt('{"aad":"a","secret":"s"}', { purpose: SECRET_PURPOSE });
    const own = await credentials(service);
    const unwrap = async (text: string) =>
      (await client().unwrap(own, deserializeEnvelope(text).header.toString("base64"))).contentKey;
    const envelopeKey = await unwrap(envelope);
    const secretBlob = openWithContentKey(
      deserializeEnvelope(secret),
      await unwrap(secret),
      SIGN_ENCRYPT_AAD,
    );
    /** `blob` encrypted under the envelope's header and content key: what a key holder can make. */
    const resealed = (blob: Uint8Array) => {
      const parsed = deserializeEnvelope(envelope);
      const cipher = createCipheriv("aes-256-gcm", envelopeKey, parsed.nonce, { authTagLength: 16 });
      cipher.setAAD(Buffer.concat([parsed.header, Buffer.from(SIGN_ENCRYPT_AAD)]));
      const body = Buffer.concat([cipher.update(blob), cipher.final(), cipher.getAuthTag()]);
      return Buffer.concat([parsed.header, body]).toString("base64");
    };
    const asSecret = resealed(secretBlob);
    const tampered = Buffer.from(secretBlob);
    tampered[tampered.length - 3] = (tampered[tampered.length - 3] ?? 0) ^ 0x01;
    const altered = resealed(tampered);
    for (const [what, text, purpose, expected] of [
      ["a secret's blob as an envelope", asSecret, PROFILE.purpose, "CryptoClientError:wrong_purpose:true"],
      ["a secret's blob as a secret", asSecret, SECRET_PURPOSE, "ok"],
      ["an altered blob", altered, SECRET_PURPOSE, "CryptoClientError:invalid_signature:true"],
    ] as const) {
      const local = await outcome(direct(service).decryptVerify(text, { purpose, signedBlob: false }));
      assert.equal(
        local,
        await outcome(viaService(service).decryptVerify(text, { purpose, signedBlob: false })),
        what,
      );
      assert.ok(local.startsWith(expected), `${what}: ${local}`);
    }
    envelopeKey.fill(0);
  });

  it("a blob the service signed for a partner, unwrapped by it and re-sealed to the service, is refused", async () => {
    // The service identity signs an envelope for the partner (the crypto service's `s`+`e` with
    // a recipient); the partner unwraps it and seals the signed blob again to the service's key.
    const claims = JSON.stringify({ binding_id: "b-1", decision: "allow" });
    const forPartner = (
      await client().signEncrypt(await credentials(service), claims, {
        purpose: PROFILE.purpose,
        recipient: env.partner.id,
      })
    ).encryptedData;
    const { contentKey } = await client().unwrap(
      await credentials(env.partner),
      deserializeEnvelope(forPartner).header.toString("base64"),
    );
    const blob = openWithContentKey(deserializeEnvelope(forPartner), contentKey, SIGN_ENCRYPT_AAD);
    contentKey.fill(0);
    const serviceKeys = PublicKeyRing.import(await env.crypto().publicKeys(service.id));
    const forwarded = serializeEnvelope(
      sealBytes({
        recipientPublicKey: serviceKeys.current.kemPublicKey,
        recipientKeyId: serviceKeys.current.keyId,
        plaintext: blob,
        aad: SIGN_ENCRYPT_AAD,
      }),
    );
    const local = await outcome(
      createServiceEnvelopeCrypto({ service: direct(service) }).open(forwarded, "partner-acme", PROFILE),
    );
    assert.equal(local, `ok:${JSON.stringify({ ok: false, failure: "invalid_signature" })}`);
    assert.equal(
      await outcome(
        createServiceEnvelopeCrypto({ service: viaService(service) }).open(
          forwarded,
          "partner-acme",
          PROFILE,
        ),
      ),
      local,
    );
  });

  it("a forged key id costs the authority one key fetch per request, no more", async () => {
    const agentKeys = PublicKeyRing.import(await env.crypto().publicKeys(agent.id));
    const forgeries = Array.from({ length: 8 }, (_, i) =>
      signEncrypt({
        signer: KeyRing.generate({ owner: agent.id, keyId: `k-forged-${i}` }).signer(),
        recipient: agentKeys,
        purpose: POLICY_PURPOSE,
        plaintext: "allow all",
      }),
    );
    const owner = direct(agent);
    const real = await owner.signEncrypt("real", { purpose: POLICY_PURPOSE });
    await owner.decryptVerify(real, { purpose: POLICY_PURPOSE });
    sent.length = 0;
    for (const forged of forgeries) {
      await rejectsWithCryptoCode(
        owner.decryptVerify(forged, { purpose: POLICY_PURPOSE }),
        "invalid_signature",
      );
    }
    const keyFetches = sent.filter((request) => request.path.endsWith("/public-keys"));
    const unwraps = sent.filter((request) => request.path === "/v1/actions");
    assert.equal(unwraps.length, forgeries.length);
    assert.ok(keyFetches.length <= forgeries.length, "at most one key fetch per forged key id");
    sent.length = 0;
    assert.equal((await owner.decryptVerify(real, { purpose: POLICY_PURPOSE })).decryptedData, "real");
    assert.equal(sent.filter((request) => request.path.endsWith("/public-keys")).length, 0);
  });

  it("a crypto service that never answers is upstream_timeout, not a bad ciphertext", async () => {
    const hangs: { path: RegExp } = { path: /^$/ };
    const proxy: Server = createServer((request, response) => {
      if (hangs.path.test(request.url ?? "")) return; // never answers
      const chunks: Buffer[] = [];
      request.on("data", (chunk: Buffer) => chunks.push(chunk));
      request.on("end", async () => {
        const upstream = await fetch(`${env.cryptoUrl}${request.url}`, {
          method: request.method ?? "GET",
          headers: request.headers as Record<string, string>,
          ...(request.method === "POST" ? { body: Buffer.concat(chunks) } : {}),
        });
        response.writeHead(upstream.status, { "content-type": "application/json" });
        response.end(await upstream.text());
      });
    });
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    const proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
    try {
      const slowClient = createCryptoClient({ baseUrl: proxyUrl, timeoutMs: 300 });
      const owner = direct(agent, slowClient);
      const artifact = await owner.signEncrypt("up", { purpose: POLICY_PURPOSE });
      // A signer whose keys the authority has not cached yet: the key fetch hangs.
      const byPartner = (
        await client().signEncrypt(await credentials(env.partner), "from the partner", {
          purpose: POLICY_PURPOSE,
          recipient: agent.id,
        })
      ).encryptedData;
      for (const [path, what] of [
        [/public-keys/, byPartner],
        [/^\/v1\/actions/, artifact],
      ] as const) {
        hangs.path = path;
        const started = performance.now();
        const error = await rejectsWithCryptoCode(
          owner.decryptVerify(what, { purpose: POLICY_PURPOSE }),
          "upstream_timeout",
        );
        assert.equal(isDataFault(error), false);
        assert.ok(performance.now() - started < 3000, `bounded by the call timeout (${path})`);
      }
      hangs.path = /^$/;
      assert.equal(
        (await owner.decryptVerify(byPartner, { purpose: POLICY_PURPOSE })).signedBy,
        env.partner.id,
      );
    } finally {
      proxy.closeAllConnections();
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    }
  });

  it("the crypto service logs no content key, token or plaintext of the unwraps it served", async () => {
    const plaintext = canary("plaintext-");
    const owner = direct(agent);
    const artifact = await owner.signEncrypt(plaintext, { purpose: POLICY_PURPOSE });
    const { contentKey } = await client().unwrap(
      await credentials(agent),
      deserializeEnvelope(artifact).header.toString("base64"),
    );
    watch.secret(contentKey.toString("base64"));
    watch.secret(contentKey.toString("hex"));
    contentKey.fill(0);
    assert.equal((await owner.decryptVerify(artifact, { purpose: POLICY_PURPOSE })).decryptedData, plaintext);
    await rejectsWithCryptoCode(owner.decryptVerify(artifact, { purpose: "other" }), "wrong_purpose");
    const failed = await owner.decryptVerify(artifact, { purpose: "other" }).catch((error: unknown) => error);
    assert.ok(failed instanceof CryptoClientError);
    // The error the authority would log carries no key or plaintext either.
    watch.checkLogs([JSON.stringify({ message: failed.message, cause: String(failed.cause) })]);
    assert.ok(capturedLogs.length > 0, "the crypto service logged its requests");
    // Every log line so far against every watched key, secret, token and canary (again in after()).
    watch.checkLogs(capturedLogs.splice(0));
    assert.deepEqual(watch.findings(), []);
  });
});
