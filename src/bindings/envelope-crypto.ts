/**
 * Sealing and opening authority envelopes with key rings: signed by the binding's
 * partner (`partner:<partner_id>`), sealed to the environment's service identity
 * (`service:<identity>`), so only the authority can open one and only the partner's key
 * can have made it.
 */
import { decryptVerifyAsync, isCryptoError, type KeyRing, signEncryptAsync } from "../crypto/index.ts";
import type { KeyRingSource } from "../policy/local-protector.ts";
import { type AuthorityProfile, type EnvelopeClaims, partnerSigner } from "./envelope.ts";

/** Keys or crypto configuration are missing or failing: verify answers 503, invoke fails closed. */
export class EnvelopeCryptoUnavailableError extends Error {
  readonly code = "crypto_unavailable";
  readonly authorityCode = "upstream_unavailable" as const;

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "EnvelopeCryptoUnavailableError";
  }
}

export type EnvelopeOpenResult =
  | { readonly ok: true; readonly plaintext: string; readonly signer: string; readonly signedAt: string }
  | { readonly ok: false; readonly failure: "invalid_signature" | "signer_mismatch" };

export interface EnvelopeCrypto {
  seal(claims: EnvelopeClaims, partnerId: string, profile: AuthorityProfile): Promise<string>;
  /**
   * Decrypts and verifies. A valid signature by another partner is `signer_mismatch`;
   * anything else that does not verify is `invalid_signature`.
   */
  open(envelope: string, expectedPartnerId: string, profile: AuthorityProfile): Promise<EnvelopeOpenResult>;
}

export interface KeyRingEnvelopeCryptoOptions {
  /** Key rings of partner signers and of the service identity. */
  readonly keyRings: KeyRingSource;
  readonly serviceIdentity: string;
  /**
   * Whether a partner exists: only then is its ring consulted to tell a signer mismatch
   * from a forgery (and no ring is ever created for an unknown name).
   */
  readonly partnerExists: (partnerId: string) => Promise<boolean>;
}

const serviceOwner = (identity: string): string => `service:${identity}`;
const MAX_ENVELOPE_CHARS = 64 * 1024;

export function createKeyRingEnvelopeCrypto(options: KeyRingEnvelopeCryptoOptions): EnvelopeCrypto {
  if (typeof options?.keyRings?.keyRing !== "function") throw new TypeError("keyRings is required");
  if (typeof options.serviceIdentity !== "string" || options.serviceIdentity.length === 0) {
    throw new TypeError("serviceIdentity is required");
  }
  if (typeof options.partnerExists !== "function") throw new TypeError("partnerExists is required");
  const { keyRings, partnerExists } = options;

  async function ring(owner: string): Promise<KeyRing> {
    try {
      return await keyRings.keyRing(owner);
    } catch (error) {
      throw new EnvelopeCryptoUnavailableError("envelope keys are unavailable", { cause: error });
    }
  }

  function tryOpen(envelope: string, service: KeyRing, signerRing: KeyRing, profile: AuthorityProfile) {
    return decryptVerifyAsync(envelope, {
      recipientKeys: service,
      signerKeys: (signer, keyId) =>
        signer === signerRing.owner ? signerRing.signerKeys(signer, keyId) : undefined,
      expectedPurpose: profile.purpose,
    });
  }

  return {
    async seal(claims, partnerId, profile) {
      const signer = await ring(partnerSigner(partnerId));
      const service = await ring(serviceOwner(options.serviceIdentity));
      try {
        // ML-DSA signing runs on the thread pool: the event loop keeps serving meanwhile.
        return await signEncryptAsync({
          signer: signer.signer(),
          recipient: service,
          purpose: profile.purpose,
          plaintext: JSON.stringify(claims),
        });
      } catch (error) {
        throw new EnvelopeCryptoUnavailableError("the envelope could not be sealed", { cause: error });
      }
    },

    async open(envelope, expectedPartnerId, profile) {
      if (typeof envelope !== "string" || envelope.length === 0 || envelope.length > MAX_ENVELOPE_CHARS) {
        return { ok: false, failure: "invalid_signature" };
      }
      const service = await ring(serviceOwner(options.serviceIdentity));
      const expected = await ring(partnerSigner(expectedPartnerId));
      let otherSigner: string | undefined;
      try {
        const opened = await decryptVerifyAsync(envelope, {
          recipientKeys: service,
          signerKeys: (signer, keyId) => {
            if (signer === expected.owner) return expected.signerKeys(signer, keyId);
            otherSigner = signer;
            return undefined;
          },
          expectedPurpose: profile.purpose,
        });
        return {
          ok: true,
          plaintext: Buffer.from(opened.plaintext).toString("utf8"),
          signer: opened.signer,
          signedAt: opened.signedAt,
        };
      } catch (error) {
        if (!isCryptoError(error)) throw error;
      }
      // Signed by someone else: a mismatch only if that someone is a real partner whose
      // key verifies the signature; otherwise it is simply not a valid envelope.
      const prefix = "partner:";
      if (otherSigner === undefined || !otherSigner.startsWith(prefix)) {
        return { ok: false, failure: "invalid_signature" };
      }
      const otherPartner = otherSigner.slice(prefix.length);
      let exists = false;
      try {
        exists = await partnerExists(otherPartner);
      } catch (error) {
        throw new EnvelopeCryptoUnavailableError("partner records are unavailable", { cause: error });
      }
      if (!exists) return { ok: false, failure: "invalid_signature" };
      const other = await ring(otherSigner);
      try {
        await tryOpen(envelope, service, other, profile);
        return { ok: false, failure: "signer_mismatch" };
      } catch (error) {
        if (!isCryptoError(error)) throw error;
        return { ok: false, failure: "invalid_signature" };
      }
    },
  };
}
