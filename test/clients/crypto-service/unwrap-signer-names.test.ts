/**
 * The signer name and key id in a signed document are read before the signature is checked,
 * and the direct path (content-key-open.ts) looks the signer's public keys up at the crypto
 * service's public-key route with that name in the URL. Anyone holding the service identity's
 * public key can seal a document naming any signer to it. Whatever the name, the answer must
 * be the crypto service's own: an unknown signer (`invalid_signature`, a data fault), so that
 * authority verify refuses the envelope (403) instead of reporting the crypto service
 * unavailable (503), and a sealed secret is unreadable rather than its storage unavailable.
 * An owner the crypto service provisions (ids up to 128 characters) must verify as well.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { PARTNER_PROFILE_V2 } from "../../../src/bindings/envelope.ts";
import { createServiceEnvelopeCrypto } from "../../../src/bindings/envelope-service-crypto.ts";
import { createCryptoClient } from "../../../src/clients/crypto-service/client.ts";
import type { OwnerCrypto } from "../../../src/clients/crypto-service/owner-crypto.ts";
import {
  encodeSignedBlob,
  formatSignedAt,
  KeyRing,
  PublicKeyRing,
  sealBytes,
  serializeEnvelope,
} from "../../../src/crypto/index.ts";
import { SIGN_ENCRYPT_AAD, SIGN_ENCRYPT_CONTEXT } from "../../../src/crypto/sign-encrypt.ts";
import { sign } from "../../../src/crypto/signature.ts";
import { canonicalDocument, payloadDigest, SIGNED_DOCUMENT_TYPE } from "../../../src/crypto/signed-blob.ts";
import { createServiceSecretBox } from "../../../src/servers/authority/key-custody.ts";
import type { ProvisionedOwner } from "../../../src/servers/crypto/server.ts";
import { type Environment, startEnvironment } from "../../servers/managed/harness.ts";
import { directPath, outcome, servicePath } from "./owner-paths.ts";

const PROFILE = PARTNER_PROFILE_V2;
const SECRET_PURPOSE = "authority-secret/v1";

/** Signer names a forger may write into the document (it is parsed before any signature check). */
const ODD_SIGNERS: Record<string, string> = {
  empty: "",
  "101 characters": `service:${"a".repeat(93)}`,
  "256 characters": "s".repeat(256),
  "4000 characters": "s".repeat(4000 - 400),
  "lone surrogate": "service:\ud800",
  unicode: "sérvice:authority",
  __proto__: "__proto__",
  "slash and dots": "../admin/owners",
  "control character": "service:a\u0000b",
  "percent-encoded": "service%3Aauthority",
};

describe("signer names from an unverified document, on the direct path", () => {
  let env: Environment;
  let service: ProvisionedOwner;
  const client = () => createCryptoClient({ baseUrl: env.cryptoUrl, timeoutMs: 5000 });
  const token = () => env.userToken();
  const direct = (owner: ProvisionedOwner): OwnerCrypto => directPath(client(), owner, token);
  const viaService = (owner: ProvisionedOwner): OwnerCrypto => servicePath(client(), owner, token);

  /** A signed blob naming `signer`, signed with a key nobody knows, sealed to the service identity. */
  const forgedBy = async (signer: string, purpose: string): Promise<string> => {
    const keys = PublicKeyRing.import(await env.crypto().publicKeys(service.id));
    const payload = Buffer.from(JSON.stringify({ decision: "allow" }));
    const document = canonicalDocument({
      payload_length: payload.length,
      payload_sha512: payloadDigest(payload).toString("hex"),
      purpose,
      recipient_key_id: keys.current.keyId,
      signed_at: formatSignedAt(new Date()),
      signer,
      signer_key_id: "k1",
      typ: SIGNED_DOCUMENT_TYPE,
    });
    const forger = KeyRing.generate({ owner: "forger" });
    const signature = sign({
      privateKey: forger.current.sig.privateKey,
      message: document,
      context: SIGN_ENCRYPT_CONTEXT,
    });
    return serializeEnvelope(
      sealBytes({
        recipientPublicKey: keys.current.kemPublicKey,
        recipientKeyId: keys.current.keyId,
        plaintext: encodeSignedBlob(document, signature, payload),
        aad: SIGN_ENCRYPT_AAD,
      }),
    );
  };

  before(async () => {
    env = await startEnvironment();
    service = await env.crypto().provisionOwner({ id: "service:authority", kind: "service" });
  });
  after(() => env.close());

  it("answers an odd signer name as the crypto service does: invalid_signature, a data fault", async () => {
    const mismatches: string[] = [];
    for (const [what, signer] of Object.entries(ODD_SIGNERS)) {
      const forged = await forgedBy(signer, PROFILE.purpose);
      const local = await outcome(direct(service).decryptVerify(forged, { purpose: PROFILE.purpose }));
      const remote = await outcome(viaService(service).decryptVerify(forged, { purpose: PROFILE.purpose }));
      assert.equal(remote, "CryptoClientError:invalid_signature:true", what);
      if (local !== remote) mismatches.push(`${what}: ${local}`);
    }
    assert.deepEqual(mismatches, []);
  });

  it("authority verify refuses such an envelope (403) rather than answering unavailable (503)", async () => {
    const envelopes = createServiceEnvelopeCrypto({ service: direct(service) });
    const secrets = createServiceSecretBox(direct(service));
    const unavailable: string[] = [];
    for (const [what, signer] of Object.entries(ODD_SIGNERS)) {
      const envelope = await forgedBy(signer, PROFILE.purpose);
      const opened = await outcome(envelopes.open(envelope, "partner-acme", PROFILE));
      if (opened !== `ok:${JSON.stringify({ ok: false, failure: "invalid_signature" })}`)
        unavailable.push(`verify, ${what}: ${opened}`);
      const secret = await forgedBy(signer, SECRET_PURPOSE);
      const sealed = await outcome(secrets.open("auth-profile:p-1", secret));
      if (sealed !== "SecretSealError:secret_unreadable:false")
        unavailable.push(`secret, ${what}: ${sealed}`);
    }
    assert.deepEqual(unavailable, []);
  });

  it("verifies what an owner with a 101-128 character id signed (ids the crypto service provisions)", async () => {
    for (const id of [`subject:${"a".repeat(93)}`, `s${"a".repeat(127)}`]) {
      const owner = await env.crypto().provisionOwner({ id, kind: "subject" });
      const artifact = await direct(owner).signEncrypt("long id", { purpose: PROFILE.purpose });
      const local = await outcome(direct(owner).decryptVerify(artifact, { purpose: PROFILE.purpose }));
      assert.match(local, /^ok:/, `${id.length} characters: ${local}`);
    }
  });
});
