/**
 * Who signs the decision chains' checkpoints (audit/checkpoints.ts): the service identity,
 * wherever its ML-DSA-65 key lives. The result is the signed blob of sign-encrypt (document,
 * signature, payload) — verifiable by anyone with the identity's public keys, nothing sealed.
 *
 * - Custody modes: the crypto service signs (sign-encrypt to the service itself, then its
 *   decrypt-verify hands back the signed blob, as for policies handed to sidecars — decision
 *   0802): this process holds no key.
 * - Embedded mode: the service identity's key ring in this process.
 */
import type { CheckpointSigner } from "../../audit/checkpoints.ts";
import { CHECKPOINT_PURPOSE } from "../../audit/checkpoints.ts";
import type { OwnerCrypto } from "../../clients/crypto-service/owner-crypto.ts";
import { encodeSignedBlob, type KeyRing, signAsync } from "../../crypto/index.ts";
import { prepareSignature } from "../../crypto/sign-encrypt.ts";

export function serviceCheckpointSigner(service: OwnerCrypto): CheckpointSigner {
  return {
    async sign(payload) {
      const sealed = await service.signEncrypt(payload, { purpose: CHECKPOINT_PURPOSE });
      const opened = await service.decryptVerify(sealed, { purpose: CHECKPOINT_PURPOSE, signedBlob: true });
      if (opened.signedBlob === undefined || opened.signedBy !== service.owner) {
        throw new Error("the crypto service returned no signed blob of the service identity");
      }
      return opened.signedBlob;
    },
  };
}

export function keyRingCheckpointSigner(ring: () => Promise<KeyRing>): CheckpointSigner {
  return {
    async sign(payload) {
      const keys = await ring();
      const prepared = prepareSignature({
        signer: keys.signer(),
        recipient: keys,
        purpose: CHECKPOINT_PURPOSE,
        plaintext: payload,
      });
      const signature = await signAsync(prepared.signOptions);
      return encodeSignedBlob(prepared.document, signature, prepared.payload).toString("base64");
    },
  };
}
