import {
  type CryptoClient,
  CryptoClientError,
  type CryptoClientErrorCode,
  type CryptoCredentials,
} from "../clients/crypto-service/client.ts";
import type { PublicKeyRingJson } from "../crypto/index.ts";
import {
  type OpenedPolicy,
  POLICY_PURPOSE,
  type PolicyProtectionContext,
  PolicyProtectionError,
  type PolicyProtector,
} from "./protector.ts";

/** The credentials of the owner whose keys protect a policy, and that owner's id. */
export interface OwnerCredentials extends CryptoCredentials {
  readonly owner: string;
}

export interface UpstreamProtectorOptions {
  readonly client: CryptoClient;
  /** v2: the service identity's credentials; v1: the subject's own credential set. */
  readonly credentialsFor: (context: PolicyProtectionContext) => Promise<OwnerCredentials>;
  /** A bearer token for the crypto service's public-key route (sidecars verify with those keys). */
  readonly token?: () => Promise<string>;
}

/** Artifact problems deny as unverifiable; everything else is the crypto service being unusable. */
const artifactFaults: ReadonlySet<CryptoClientErrorCode> = new Set([
  "invalid_ciphertext",
  "invalid_signature",
  "wrong_purpose",
  "unknown_recipient",
  "invalid_request",
]);

function translate(error: unknown): PolicyProtectionError {
  if (error instanceof PolicyProtectionError) return error;
  if (error instanceof CryptoClientError && artifactFaults.has(error.code)) {
    return new PolicyProtectionError("policy_unverifiable", `policy artifact rejected: ${error.code}`, {
      cause: error,
    });
  }
  return new PolicyProtectionError("policy_protection_unavailable", "the crypto service is unavailable", {
    cause: error,
  });
}

/**
 * Policy protection through the upstream post-quantum crypto service (`s`+`e` to protect,
 * `d`+`v` to open). Opening also requires that the signature names the expected owner, so a
 * validly signed message of another owner never passes as this subject's policy.
 */
export function createUpstreamPolicyProtector(options: UpstreamProtectorOptions): PolicyProtector {
  const token = options.token;
  const credentials = async (context: PolicyProtectionContext) => {
    try {
      return await options.credentialsFor(context);
    } catch (error) {
      throw translate(error);
    }
  };
  return {
    async protect(canonicalDocument, context) {
      const owner = await credentials(context);
      try {
        const result = await options.client.signEncrypt(owner, canonicalDocument, {
          purpose: POLICY_PURPOSE,
        });
        return result.encryptedData;
      } catch (error) {
        throw translate(error);
      }
    },
    async open(artifact, context): Promise<OpenedPolicy> {
      const owner = await credentials(context);
      let verified: Awaited<ReturnType<CryptoClient["decryptVerify"]>>;
      try {
        verified = await options.client.decryptVerify(owner, artifact, { purpose: POLICY_PURPOSE });
      } catch (error) {
        throw translate(error);
      }
      if (verified.signedBy !== owner.owner) {
        throw new PolicyProtectionError("policy_unverifiable", "policy was signed by another owner");
      }
      return {
        document: verified.decryptedData,
        signer: verified.signedBy,
        signedAt: verified.signedTimestamp,
        ...(verified.signedBlob === undefined ? {} : { signedBlob: verified.signedBlob }),
      };
    },
    ...(token === undefined
      ? {}
      : {
          async signerKeys(owner: string): Promise<PublicKeyRingJson> {
            try {
              return await options.client.publicKeys(await token(), owner);
            } catch (error) {
              throw translate(error);
            }
          },
        }),
  };
}
