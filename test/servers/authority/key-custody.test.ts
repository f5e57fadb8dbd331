import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { SecretSealError } from "../../../src/admin/secret-seal.ts";
import { buildEnvelopeClaims, PARTNER_PROFILE_V2 } from "../../../src/bindings/envelope.ts";
import { EnvelopeCryptoUnavailableError } from "../../../src/bindings/envelope-crypto.ts";
import { createServiceEnvelopeCrypto } from "../../../src/bindings/envelope-service-crypto.ts";
import { createCryptoClient } from "../../../src/clients/crypto-service/client.ts";
import {
  createDirectOwnerCrypto,
  type ServiceTokenSource,
} from "../../../src/clients/crypto-service/owner-crypto.ts";
import { createServiceSecretBox } from "../../../src/servers/authority/key-custody.ts";
import { type RestartableCrypto, startRestartableCrypto } from "../../helpers/crypto-service.ts";
import { createLogCapture } from "../../helpers/log-capture.ts";
import { type RestartableIdp, startRestartableIdp } from "../../helpers/restartable-idp.ts";
import { makeTempDir, type TempDir } from "../../helpers/temp-dir.ts";

/**
 * The service identity's envelope crypto and secret box against the real crypto service:
 * what an attacker can hand them — a value sealed for another record, by another owner, for
 * another purpose, altered bytes — is refused as bad input; the crypto service gone is
 * "unavailable", never a bad envelope or secret, and the first call after it returns works.
 */
describe("key custody through the crypto service: envelopes and secrets of the service identity", () => {
  const SERVICE = "service:custody-unit";
  let dir: TempDir;
  let idp: RestartableIdp;
  let crypto: RestartableCrypto;
  const keys = () => ({
    apiKey: `apk_${randomBytes(8).toString("hex")}`,
    accessKey: `ak_${randomBytes(8).toString("hex")}`,
    secretKey: `sk_${randomBytes(8).toString("hex")}`,
  });
  const serviceKeys = keys();
  const otherKeys = keys();
  const tokens: ServiceTokenSource = {
    get: async () => {
      return (await idp.server().issueToken({ subject: "authority-svc", lifetimeSec: 600 })).accessToken;
    },
    invalidate: () => {},
  };
  const service = () =>
    createDirectOwnerCrypto({
      client: createCryptoClient({ baseUrl: crypto.proxy.url, timeoutMs: 3000 }),
      owner: SERVICE,
      keys: serviceKeys,
      tokens,
    });
  const other = () =>
    createDirectOwnerCrypto({
      client: createCryptoClient({ baseUrl: crypto.proxy.url, timeoutMs: 3000 }),
      owner: "partner-other",
      keys: otherKeys,
      tokens,
    });
  const claims = () =>
    buildEnvelopeClaims({
      profile: PARTNER_PROFILE_V2,
      issuer: "http://authority.test",
      partnerId: "acme",
      bindingId: "acme-app",
      operationId: "getItem",
      permissionId: "items:get:/items/{itemId}",
      argsDigest: `sha256:${"0".repeat(64)}`,
      now: new Date(),
    });

  before(async () => {
    dir = await makeTempDir("key-custody-");
    const logs = createLogCapture("silent");
    idp = await startRestartableIdp({ dir: dir.path, name: "idp", audience: "authority", logs });
    crypto = await startRestartableCrypto({ dir: dir.path, logs, issuer: idp.issuer, jwksUri: idp.jwksUri });
    await crypto.server().provisionOwner({ id: SERVICE, kind: "service", credentials: serviceKeys });
    await crypto.server().provisionOwner({ id: "partner-other", kind: "partner", credentials: otherKeys });
  });
  after(async () => {
    await crypto?.close();
    await idp?.stop();
    await dir?.cleanup();
  });

  test("envelopes: sealed and opened by the crypto service; altered, foreign-signed or other-purpose ones are refused", async () => {
    const envelopes = createServiceEnvelopeCrypto({ service: service() });
    const issued = claims();
    const sealed = await envelopes.seal(issued, "acme", PARTNER_PROFILE_V2);
    assert.equal(sealed.includes("acme-app"), false, "the claims are encrypted");
    const opened = await envelopes.open(sealed, "acme", PARTNER_PROFILE_V2);
    assert.ok(opened.ok);
    assert.equal(opened.signer, SERVICE);
    assert.deepEqual(JSON.parse(opened.plaintext), issued);

    const bytes = Buffer.from(sealed, "base64");
    for (const position of [0, 10, 200, bytes.length - 1]) {
      const altered = Buffer.from(bytes);
      altered[position] = (altered[position] ?? 0) ^ 0x01;
      assert.deepEqual(await envelopes.open(altered.toString("base64"), "acme", PARTNER_PROFILE_V2), {
        ok: false,
        failure: "invalid_signature",
      });
    }
    // Another owner of the crypto service seals claims to the service identity: a valid
    // signature, but not the service identity's.
    const foreign = await createCryptoClient({ baseUrl: crypto.url }).signEncrypt(
      { token: await tokens.get(), ...otherKeys },
      JSON.stringify(claims()),
      { purpose: PARTNER_PROFILE_V2.purpose, recipient: SERVICE },
    );
    assert.deepEqual(await envelopes.open(foreign.encryptedData, "acme", PARTNER_PROFILE_V2), {
      ok: false,
      failure: "signer_mismatch",
    });
    // The service identity's own signature for another purpose (a sealed secret, a policy).
    const otherPurpose = await service().signEncrypt(JSON.stringify(claims()), {
      purpose: "authority-policy",
    });
    assert.deepEqual(await envelopes.open(otherPurpose, "acme", PARTNER_PROFILE_V2), {
      ok: false,
      failure: "invalid_signature",
    });
    for (const junk of ["", "x".repeat(70_000), "not base64 at all"]) {
      const result = await envelopes.open(junk, "acme", PARTNER_PROFILE_V2);
      assert.deepEqual(result, { ok: false, failure: "invalid_signature" });
    }
  });

  test("secrets: a sealed value opens only for its own record, only if the service identity sealed it", async () => {
    const box = createServiceSecretBox(service());
    const sealed = await box.seal("acme/items-key", "upstream-secret-0123456789");
    assert.equal(sealed.includes("upstream-secret"), false);
    assert.equal(await box.open("acme/items-key", sealed), "upstream-secret-0123456789");
    const unreadable = async (run: () => Promise<unknown>) =>
      assert.rejects(
        run,
        (error: unknown) => error instanceof SecretSealError && error.code === "secret_unreadable",
      );
    // Copied onto another profile's record.
    await unreadable(() => box.open("acme/other-key", sealed));
    await unreadable(() => box.open("globex/items-key", sealed));
    // Sealed by another owner for the service identity, with the right purpose and aad.
    const foreign = await createCryptoClient({ baseUrl: crypto.url }).signEncrypt(
      { token: await tokens.get(), ...otherKeys },
      JSON.stringify({ aad: "acme/items-key", secret: "attacker-chosen-secret" }),
      { purpose: "authority-secret/v1", recipient: SERVICE },
    );
    await unreadable(() => box.open("acme/items-key", foreign.encryptedData));
    // An envelope of the service identity is not a sealed secret.
    const envelope = await createServiceEnvelopeCrypto({ service: service() }).seal(
      claims(),
      "acme",
      PARTNER_PROFILE_V2,
    );
    await unreadable(() => box.open("acme/items-key", envelope));
    const flipped = Buffer.from(sealed, "base64");
    flipped[40] = (flipped[40] ?? 0) ^ 0x80;
    await unreadable(() => box.open("acme/items-key", flipped.toString("base64")));
    // Another owner's box cannot open the service identity's secrets.
    await unreadable(() => createServiceSecretBox(other()).open("acme/items-key", sealed));
  });

  test("the crypto service gone: unavailable (never a bad envelope or secret); back: the next call works", async () => {
    const envelopes = createServiceEnvelopeCrypto({ service: service() });
    const box = createServiceSecretBox(service());
    const sealedEnvelope = await envelopes.seal(claims(), "acme", PARTNER_PROFILE_V2);
    const sealedSecret = await box.seal("acme/items-key", "upstream-secret-0123456789");
    await crypto.stop();
    try {
      await assert.rejects(
        envelopes.open(sealedEnvelope, "acme", PARTNER_PROFILE_V2),
        (error: unknown) => error instanceof EnvelopeCryptoUnavailableError,
      );
      await assert.rejects(
        envelopes.seal(claims(), "acme", PARTNER_PROFILE_V2),
        (error: unknown) => error instanceof EnvelopeCryptoUnavailableError,
      );
      await assert.rejects(
        box.open("acme/items-key", sealedSecret),
        (error: unknown) => error instanceof SecretSealError && error.code === "secret_storage_unavailable",
      );
    } finally {
      await crypto.start();
    }
    assert.ok((await envelopes.open(sealedEnvelope, "acme", PARTNER_PROFILE_V2)).ok);
    assert.equal(await box.open("acme/items-key", sealedSecret), "upstream-secret-0123456789");
  });
});
