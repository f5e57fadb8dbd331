import {
  decryptVerify,
  encodeSignedBlob,
  isCryptoError,
  type KeyRing,
  signEncrypt,
} from "../crypto/index.ts";
import {
  type OpenedPolicy,
  POLICY_PURPOSE,
  type PolicyProtectionContext,
  PolicyProtectionError,
  type PolicyProtector,
  policyKeyOwner,
} from "./protector.ts";

/** Where key rings come from (created on first use for a new owner). */
export interface KeyRingSource {
  keyRing(owner: string): Promise<KeyRing>;
}

export interface LocalProtectorOptions {
  readonly keyRings: KeyRingSource;
  /** Name of this environment's service identity (v2 policies). */
  readonly serviceIdentity: string;
}

/**
 * In-process protection with key rings held by this process: the owner signs with its
 * ML-DSA key and seals to its own ML-KEM key; opening verifies the signer is that owner.
 */
export function createLocalPolicyProtector(options: LocalProtectorOptions): PolicyProtector {
  if (options.serviceIdentity.length === 0) throw new TypeError("serviceIdentity is required");
  const ringFor = async (context: PolicyProtectionContext) => {
    const owner = policyKeyOwner(context, options.serviceIdentity);
    try {
      return { owner, ring: await options.keyRings.keyRing(owner) };
    } catch (error) {
      throw new PolicyProtectionError("policy_protection_unavailable", "policy keys are unavailable", {
        cause: error,
      });
    }
  };
  return {
    async protect(canonicalDocument, context) {
      const { ring } = await ringFor(context);
      return signEncrypt({
        signer: ring.signer(),
        recipient: ring,
        purpose: POLICY_PURPOSE,
        plaintext: canonicalDocument,
      });
    },
    async open(artifact, context, openOptions): Promise<OpenedPolicy> {
      const { owner, ring } = await ringFor(context);
      try {
        const opened = decryptVerify(artifact, {
          recipientKeys: ring,
          signerKeys: (signer, keyId) => (signer === owner ? ring.signerKeys(signer, keyId) : undefined),
          expectedPurpose: POLICY_PURPOSE,
        });
        return {
          document: Buffer.from(opened.plaintext).toString("utf8"),
          signer: opened.signer,
          signedAt: opened.signedAt,
          ...(openOptions?.signedBlob === false
            ? {}
            : {
                signedBlob: encodeSignedBlob(
                  opened.signedDocument,
                  opened.signature,
                  opened.plaintext,
                ).toString("base64"),
              }),
        };
      } catch (error) {
        if (isCryptoError(error)) {
          throw new PolicyProtectionError("policy_unverifiable", `policy artifact rejected: ${error.code}`, {
            cause: error,
          });
        }
        throw error;
      }
    },
    async signerKeys(owner) {
      try {
        return (await options.keyRings.keyRing(owner)).exportPublic();
      } catch (error) {
        throw new PolicyProtectionError("policy_protection_unavailable", "policy keys are unavailable", {
          cause: error,
        });
      }
    },
  };
}
