/**
 * Plain encryption on key rings (the upstream crypto service's `e` and `d` actions):
 * seal to the ring's current key, open with whichever version the envelope names.
 */

import type { ParsedEnvelope } from "./envelope.ts";
import { CryptoError } from "./errors.ts";
import { open, seal, toParsedEnvelope } from "./kem.ts";
import { KeyRing, PublicKeyRing, type Recipient, type RecipientKeyLookup } from "./key-ring.ts";

/**
 * Associated data of plain ciphertexts. Sign-encrypt uses a different label, so neither
 * kind of ciphertext opens as the other.
 */
export const ENCRYPT_AAD = "authority/encrypt/v1";

function recipientOf(target: KeyRing | PublicKeyRing | Recipient): Recipient {
  return target instanceof KeyRing || target instanceof PublicKeyRing ? target.recipient() : target;
}

/** Encrypts to the current version of a ring (or to an explicit recipient); returns base64. */
export function encrypt(target: KeyRing | PublicKeyRing | Recipient, plaintext: string | Uint8Array): string {
  const recipient = recipientOf(target);
  return seal({
    recipientPublicKey: recipient.publicKey,
    recipientKeyId: recipient.keyId,
    plaintext,
    aad: ENCRYPT_AAD,
  });
}

/** Decrypts with the ring version the envelope names; `crypto_unknown_key` when it has none. */
export function decrypt(
  keys: KeyRing | RecipientKeyLookup,
  envelope: string | Uint8Array | ParsedEnvelope,
): Uint8Array {
  const parsed = toParsedEnvelope(envelope);
  const lookup = keys instanceof KeyRing ? keys.recipientKeys : keys;
  const privateKey = lookup(parsed.keyId);
  if (privateKey === undefined) throw new CryptoError("crypto_unknown_key");
  return open({ recipientPrivateKey: privateKey, envelope: parsed, aad: ENCRYPT_AAD });
}
