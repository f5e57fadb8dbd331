/**
 * Authority envelopes signed and verified by the crypto service with the configured service
 * identity (spec, authority verify rule 3: "policy crypto credentials are loaded from a
 * configured service identity, and the envelope is verified with the upstream cryptography
 * service"). The service identity's partner account at the crypto service is the envelope's
 * signer partner (rule 4) and its recipient, so this process holds no envelope key: the
 * crypto service signs (`s`+`e`, purpose of the profile) and decrypts and verifies (`d`+`v`).
 * The binding's partner is bound by the signed claims (`aud`, `binding_id`), which verify
 * checks after the signature.
 *
 * A valid signature by any other owner of the crypto service (anyone with an account there
 * can sign-encrypt to the service identity) is `signer_mismatch`; an envelope that does not
 * decrypt or verify is `invalid_signature`; the crypto service unreachable, slow, or refusing
 * our own credentials is EnvelopeCryptoUnavailableError (verify answers 503) — nothing is
 * remembered, so the next call after it returns succeeds without a restart.
 */
import { isDataFault } from "../clients/crypto-service/client.ts";
import type { OwnerCrypto } from "../clients/crypto-service/owner-crypto.ts";
import type { EnvelopeCrypto } from "./envelope-crypto.ts";
import { EnvelopeCryptoUnavailableError } from "./envelope-crypto.ts";

const MAX_ENVELOPE_CHARS = 64 * 1024;

export function createServiceEnvelopeCrypto(options: { readonly service: OwnerCrypto }): EnvelopeCrypto {
  const { service } = options;
  if (typeof service?.signEncrypt !== "function" || typeof service.decryptVerify !== "function") {
    throw new TypeError("service must be the service identity's crypto operations");
  }
  return {
    async seal(claims, _partnerId, profile) {
      try {
        return await service.signEncrypt(JSON.stringify(claims), { purpose: profile.purpose });
      } catch (error) {
        throw new EnvelopeCryptoUnavailableError("the envelope could not be sealed", { cause: error });
      }
    },

    async open(envelope, _expectedPartnerId, profile) {
      if (typeof envelope !== "string" || envelope.length === 0 || envelope.length > MAX_ENVELOPE_CHARS) {
        return { ok: false, failure: "invalid_signature" };
      }
      let opened: Awaited<ReturnType<OwnerCrypto["decryptVerify"]>>;
      try {
        opened = await service.decryptVerify(envelope, { purpose: profile.purpose });
      } catch (error) {
        if (isDataFault(error)) {
          return { ok: false, failure: "invalid_signature" };
        }
        throw new EnvelopeCryptoUnavailableError("envelope verification is unavailable", { cause: error });
      }
      if (opened.signedBy !== service.owner) return { ok: false, failure: "signer_mismatch" };
      return {
        ok: true,
        plaintext: opened.decryptedData,
        signer: opened.signedBy,
        signedAt: opened.signedTimestamp,
      };
    },
  };
}
