/**
 * Decrypt-verify with the content key the crypto service unwraps (docs/managed-crypto.md,
 * "Unwrap"): the crypto service decapsulates with the owner's private key and returns the
 * key of that one envelope; decryption, the ML-DSA signature and every check after it run
 * here, with the signer's public key. Only the envelope's header travels (about 1.1 KB),
 * not the ciphertext and the plaintext as JSON strings, which cost more than the crypto on
 * a large policy (decision 2301). The checks and their order are those of the crypto
 * service's decrypt-verify, and failures are the CryptoClientErrors it would have caused.
 */
import {
  type AsyncSignerKeyLookup,
  CryptoError,
  decryptVerifyWithContentKey,
  deserializeEnvelope,
  type ParsedEnvelope,
  PublicKeyRing,
  type VerifiedMessage,
} from "../../crypto/index.ts";
import { createSignerKeyCache, type SignerKeyCache } from "../../crypto/signer-key-cache.ts";
import { CryptoClientError, type DecryptVerifyResult, type UnwrapResult } from "./client.ts";
import { OWNER_ID } from "./wire.ts";

const textDecoder = new TextDecoder("utf-8", { fatal: true });

/** The crypto service's public reason for a failed local check, as its decrypt-verify answers. */
function clientFailure(error: unknown): unknown {
  if (!(error instanceof CryptoError)) return error;
  switch (error.code) {
    case "crypto_bad_signature":
    case "crypto_unknown_signer":
      return new CryptoClientError("invalid_signature", { cause: error });
    case "crypto_wrong_purpose":
      return new CryptoClientError("wrong_purpose", { cause: error });
    case "crypto_invalid_argument":
      return new CryptoClientError("invalid_request", { cause: error });
    default:
      // Form, decryption, recipient: one answer, as the crypto service gives.
      return new CryptoClientError("invalid_ciphertext", { cause: error });
  }
}

function parse(encryptedData: string): ParsedEnvelope {
  try {
    return deserializeEnvelope(encryptedData);
  } catch (error) {
    throw clientFailure(error);
  }
}

/** Signers' public keys from the crypto service's public-key route; an unknown owner has none. */
export function cryptoServiceSignerKeys(publicKeys: (owner: string) => Promise<unknown>): SignerKeyCache {
  /** The key documents rings were imported from: a refetch that brings the same one re-imports nothing. */
  const importedFrom = new WeakMap<PublicKeyRing, string>();
  return createSignerKeyCache({
    // No cooldown: a rotated key must verify at once. A forged key id or signer name costs one
    // fetch beside the unwrap that every decrypt-verify costs anyway, and no key import when
    // the owner's keys did not change.
    refetchCooldownMs: 0,
    fetchRing: async (owner, previous) => {
      let json: unknown;
      try {
        json = await publicKeys(owner);
      } catch (error) {
        if (error instanceof CryptoClientError && error.status === 404) return undefined;
        throw error;
      }
      const document = JSON.stringify(json);
      if (previous !== undefined && importedFrom.get(previous) === document) return previous;
      let ring: PublicKeyRing;
      try {
        ring = PublicKeyRing.import(json);
      } catch (cause) {
        throw new CryptoClientError("upstream_error", { status: 200, cause });
      }
      importedFrom.set(ring, document);
      return ring;
    },
  });
}

/** base64 of the signed blob (document, signature, plaintext): the verified blob itself, not a copy. */
function signedBlobText(verified: VerifiedMessage): string {
  const blob = verified.signedBlob;
  return Buffer.from(blob.buffer, blob.byteOffset, blob.byteLength).toString("base64");
}

export interface ContentKeyOpenOptions {
  /** The owner's content-key unwrap (a bearer token and the owner's partner credentials bound in). */
  readonly unwrap: (envelopeHeader: string) => Promise<UnwrapResult>;
  readonly signerKeys: SignerKeyCache;
  readonly purpose: string;
  readonly signedBlob: boolean;
}

export async function decryptVerifyWithUnwrap(
  encryptedData: string,
  options: ContentKeyOpenOptions,
): Promise<DecryptVerifyResult> {
  const envelope = parse(encryptedData);
  const { contentKey } = await options.unwrap(envelope.header.toString("base64"));
  // Unverified: a name no owner of the crypto service can have is an unknown signer, as the
  // crypto service's own decrypt-verify answers, and never goes into a URL.
  const signerKeys: AsyncSignerKeyLookup = async (signer, keyId) =>
    OWNER_ID.test(signer) ? options.signerKeys.keyFor(signer, keyId) : undefined;
  let verified: VerifiedMessage;
  try {
    verified = await decryptVerifyWithContentKey(envelope, contentKey, {
      signerKeys,
      expectedPurpose: options.purpose,
    });
  } catch (error) {
    throw clientFailure(error);
  } finally {
    contentKey.fill(0);
  }
  try {
    let decryptedData: string;
    try {
      decryptedData = textDecoder.decode(verified.plaintext);
    } catch (cause) {
      // The crypto service refuses a plaintext that is not UTF-8 text the same way.
      throw new CryptoClientError("invalid_request", { cause });
    }
    return {
      decryptedData,
      isValidSignature: true,
      signedBy: verified.signer,
      signedTimestamp: verified.signedAt,
      signerKeyId: verified.signerKeyId,
      recipientKeyId: verified.recipientKeyId,
      purpose: verified.purpose,
      signedBlob: options.signedBlob ? signedBlobText(verified) : undefined,
    };
  } finally {
    // The whole verified blob: the plaintext is a view into it.
    verified.signedBlob.fill(0);
  }
}
