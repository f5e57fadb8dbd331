import { CryptoError, deserializeEnvelope, isCryptoError, open, seal } from "../crypto/index.ts";
import type { KeyRingSource } from "../policy/local-protector.ts";
import { isSecretBox, type SecretKeys } from "./secret-box.ts";

/**
 * Seals one auth-profile secret to the partner's key ring (ML-KEM-768 + AES-256-GCM).
 * The associated data names the partner and profile, so a sealed secret copied onto
 * another profile record does not open.
 */
const aadOf = (partnerId: string, profileId: string): string =>
  `authority/auth-profile-secret/v1\n${partnerId}/${profileId}`;

export class SecretSealError extends Error {
  readonly code: "secret_storage_unavailable" | "secret_unreadable";
  readonly authorityCode = "upstream_unavailable";

  constructor(code: SecretSealError["code"], message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "SecretSealError";
    this.code = code;
  }
}

async function ringOf(rings: KeyRingSource | undefined, owner: string) {
  if (rings === undefined) {
    throw new SecretSealError("secret_storage_unavailable", "secret key rings are not configured");
  }
  try {
    return await rings.keyRing(owner);
  } catch (error) {
    throw new SecretSealError("secret_storage_unavailable", "secret key ring is unavailable", {
      cause: error,
    });
  }
}

/**
 * Seals `secret` to the owner's key ring (or the SecretBox) under `aad`, which names what the
 * secret belongs to: auth-profile secrets, users' token sets, pending PKCE verifiers.
 */
export async function sealWithAad(
  keys: SecretKeys | undefined,
  owner: string,
  aad: string,
  secret: string,
): Promise<string> {
  if (keys !== undefined && isSecretBox(keys)) return keys.seal(aad, secret);
  const rings: KeyRingSource | undefined = keys;
  const ring = await ringOf(rings, owner);
  const recipient = ring.recipient();
  return seal({
    recipientPublicKey: recipient.publicKey,
    recipientKeyId: recipient.keyId,
    plaintext: secret,
    aad,
  });
}

/** Opens what sealWithAad sealed under the very same owner and aad. */
export async function openWithAad(
  keys: SecretKeys | undefined,
  owner: string,
  aad: string,
  sealed: string,
): Promise<string> {
  if (keys !== undefined && isSecretBox(keys)) return keys.open(aad, sealed);
  const rings: KeyRingSource | undefined = keys;
  const ring = await ringOf(rings, owner);
  try {
    const envelope = deserializeEnvelope(sealed);
    const privateKey = ring.recipientKeys(envelope.keyId);
    if (privateKey === undefined) throw new CryptoError("crypto_unknown_key");
    const plaintext = open({ recipientPrivateKey: privateKey, envelope, aad });
    return Buffer.from(plaintext).toString("utf8");
  } catch (error) {
    if (isCryptoError(error)) {
      throw new SecretSealError("secret_unreadable", `sealed secret rejected: ${error.code}`, {
        cause: error,
      });
    }
    throw error;
  }
}

export function sealSecret(
  keys: SecretKeys | undefined,
  owner: string,
  ids: { partnerId: string; profileId: string },
  secret: string,
): Promise<string> {
  return sealWithAad(keys, owner, aadOf(ids.partnerId, ids.profileId), secret);
}

export function openSecret(
  keys: SecretKeys | undefined,
  owner: string,
  ids: { partnerId: string; profileId: string },
  sealed: string,
): Promise<string> {
  return openWithAad(keys, owner, aadOf(ids.partnerId, ids.profileId), sealed);
}
