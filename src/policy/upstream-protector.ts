import { type CryptoClient, type CryptoCredentials, isDataFault } from "../clients/crypto-service/client.ts";
import {
  cryptoServiceSignerKeys,
  decryptVerifyWithUnwrap,
} from "../clients/crypto-service/content-key-open.ts";
import type { OwnerCrypto } from "../clients/crypto-service/owner-crypto.ts";
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

/** Calls the crypto service directly with credentials (and a token) per policy owner. */
export interface DirectProtectorOptions {
  readonly client: CryptoClient;
  /** v2: the service identity's credentials; v1: the subject's own credential set. */
  readonly credentialsFor: (context: PolicyProtectionContext) => Promise<OwnerCredentials>;
  /** A bearer token for the crypto service's public-key route (signatures are checked here, and by sidecars). */
  readonly token: () => Promise<string>;
}

/** Goes through an owner's operations, however they reach the crypto service (owner-crypto.ts). */
export interface OwnerProtectorOptions {
  /** v2: the service identity; v1: the subject's own credential set. */
  readonly ownerFor: (context: PolicyProtectionContext) => Promise<OwnerCrypto>;
  /** Public keys of a policy signer, for sidecars. */
  readonly publicKeys?: (owner: string) => Promise<PublicKeyRingJson>;
}

export type UpstreamProtectorOptions = DirectProtectorOptions | OwnerProtectorOptions;

/** Opening unwraps the content key and verifies here, as createDirectOwnerCrypto does. */
function ownerOperations(options: DirectProtectorOptions): OwnerProtectorOptions {
  const { client, token } = options;
  const publicKeys = async (owner: string) => client.publicKeys(await token(), owner);
  const signerKeys = cryptoServiceSignerKeys(publicKeys);
  return {
    async ownerFor(context) {
      const credentials = await options.credentialsFor(context);
      return {
        owner: credentials.owner,
        signEncrypt: async (data, { purpose }) =>
          (await client.signEncrypt(credentials, data, { purpose })).encryptedData,
        decryptVerify: (encryptedData, { purpose, signedBlob }) =>
          decryptVerifyWithUnwrap(encryptedData, {
            unwrap: (header) => client.unwrap(credentials, header),
            signerKeys,
            purpose,
            signedBlob: signedBlob !== false,
          }),
      };
    },
    publicKeys,
  };
}

/** Artifact problems deny as unverifiable; everything else is the crypto service being unusable. */
function translate(error: unknown): PolicyProtectionError {
  if (error instanceof PolicyProtectionError) return error;
  if (isDataFault(error)) {
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
  const operations = "ownerFor" in options ? options : ownerOperations(options);
  const publicKeys = operations.publicKeys;
  const ownerFor = async (context: PolicyProtectionContext) => {
    try {
      return await operations.ownerFor(context);
    } catch (error) {
      throw translate(error);
    }
  };
  return {
    async protect(canonicalDocument, context) {
      const owner = await ownerFor(context);
      try {
        return await owner.signEncrypt(canonicalDocument, { purpose: POLICY_PURPOSE });
      } catch (error) {
        throw translate(error);
      }
    },
    async open(artifact, context, openOptions): Promise<OpenedPolicy> {
      const owner = await ownerFor(context);
      let verified: Awaited<ReturnType<OwnerCrypto["decryptVerify"]>>;
      try {
        verified = await owner.decryptVerify(artifact, {
          purpose: POLICY_PURPOSE,
          signedBlob: openOptions?.signedBlob !== false,
        });
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
    ...(publicKeys === undefined
      ? {}
      : {
          async signerKeys(owner: string): Promise<PublicKeyRingJson> {
            try {
              return await publicKeys(owner);
            } catch (error) {
              throw translate(error);
            }
          },
        }),
  };
}
