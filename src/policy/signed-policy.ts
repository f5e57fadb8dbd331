/**
 * Opening a policy with public keys only: what a sidecar does. The authority service (which
 * can decrypt, through the crypto service) hands the sidecar the **signed blob** that was
 * inside the artifact — the signed document, the ML-DSA-65 signature made by the crypto
 * service when the policy was protected, and the policy text. The sidecar checks the
 * signature with the signer's public key, that the signer is the owner this policy must be
 * signed by (`service:<identity>` for v2, `subject:<id>` for v1) and that the purpose is a
 * policy's. It never holds a key that could open an artifact or sign a policy.
 *
 * Signer public keys come from a pinned key set (configuration) or, for owners not pinned,
 * from the authority service over the sidecar's authenticated channel (signer-key-cache.ts:
 * refetched for an unknown key id at most once per cooldown). For a pinned owner only the
 * pinned keys count: a rotation needs the new public key added to the pinned set
 * (docs/sidecar.md, "Policy keys").
 */
import {
  CryptoError,
  decodeSignedBlob,
  isCryptoError,
  PublicKeyRing,
  type PublicKeyRingJson,
  parseSignedDocument,
  verifySignedBlob,
} from "../crypto/index.ts";
import { createSignerKeyCache } from "../crypto/signer-key-cache.ts";
import {
  type OpenedPolicy,
  type OpenOptions,
  POLICY_PURPOSE,
  type PolicyOpener,
  type PolicyProtectionContext,
  PolicyProtectionError,
  policyKeyOwner,
} from "./protector.ts";

/** Where the public keys of owners that are not pinned come from (the authority's sidecar route). */
export interface PolicyKeySource {
  /** The owner's public key ring; undefined when the owner is unknown. */
  fetchPolicyKeys(owner: string): Promise<PublicKeyRingJson | undefined>;
}

export interface SignedPolicyVerifierOptions {
  /** Names the v2 signer, `service:<identity>`. */
  readonly serviceIdentity: string;
  /** Keys trusted by configuration; for these owners nothing fetched is used. */
  readonly pinned?: readonly PublicKeyRingJson[];
  /** Keys of other owners; without it only pinned owners can be verified. */
  readonly source?: PolicyKeySource;
  /** Least time between two fetches of one owner's keys (default 10000 ms). */
  readonly refetchCooldownMs?: number;
  /** Owners whose keys are kept (default 10000). */
  readonly maxOwners?: number;
  readonly now?: () => number;
}

function unverifiable(message: string, cause?: unknown): PolicyProtectionError {
  return new PolicyProtectionError(
    "policy_unverifiable",
    message,
    cause === undefined ? undefined : { cause },
  );
}

/** Parses a pinned key set: one public key ring (as the crypto service prints it) or an array of them. */
export function parsePinnedPolicyKeys(json: unknown): PublicKeyRing[] {
  const list = Array.isArray(json) ? json : [json];
  if (list.length === 0) throw new TypeError("the pinned policy key set is empty");
  const owners = new Set<string>();
  return list.map((entry) => {
    const ring = PublicKeyRing.import(entry);
    if (owners.has(ring.owner)) throw new TypeError(`owner ${ring.owner} is pinned twice`);
    owners.add(ring.owner);
    return ring;
  });
}

export function createSignedPolicyVerifier(options: SignedPolicyVerifierOptions): PolicyOpener {
  if (typeof options?.serviceIdentity !== "string" || options.serviceIdentity.length === 0)
    throw new TypeError("serviceIdentity is required");
  const source = options.source;
  const keys = createSignerKeyCache({
    pinned: options.pinned === undefined ? [] : parsePinnedPolicyKeys(options.pinned),
    fetchRing: async (owner) => {
      if (source === undefined) return undefined;
      let json: PublicKeyRingJson | undefined;
      try {
        json = await source.fetchPolicyKeys(owner);
      } catch (error) {
        throw new PolicyProtectionError("policy_protection_unavailable", "policy keys cannot be fetched", {
          cause: error,
        });
      }
      try {
        // Only verified with: its ML-KEM keys are not imported (decision 3132).
        return json === undefined ? undefined : PublicKeyRing.import(json, { verifying: true });
      } catch (error) {
        throw new PolicyProtectionError("policy_protection_unavailable", "policy keys are malformed", {
          cause: error,
        });
      }
    },
    ...(options.refetchCooldownMs === undefined ? {} : { refetchCooldownMs: options.refetchCooldownMs }),
    ...(options.maxOwners === undefined ? {} : { maxOwners: options.maxOwners }),
    ...(options.now === undefined ? {} : { now: options.now }),
  });

  /** The crypto version of the last policy opened: which owner a subject's next policy is likely signed by. */
  let lastVersion: PolicyProtectionContext["cryptoVersion"] | undefined;

  /** Verifies a signed blob (bytes); `signedPolicy`: its base64 as given, handed back as `signedBlob`. */
  const verify = async (
    blob: Buffer,
    context: PolicyProtectionContext,
    openOptions: OpenOptions | undefined,
    signedPolicy?: string,
  ): Promise<OpenedPolicy> => {
    lastVersion = context.cryptoVersion;
    const expected = policyKeyOwner(context, options.serviceIdentity);
    let signer: string;
    let keyId: string;
    try {
      // Unverified: only selects the key that must verify it, and refuses another signer early.
      const document = parseSignedDocument(decodeSignedBlob(blob).document);
      signer = document.signer;
      keyId = document.signer_key_id;
    } catch (error) {
      throw unverifiable("signed policy is malformed", error);
    }
    if (signer !== expected) throw unverifiable("policy was signed by another owner");
    const key = await keys.keyFor(signer, keyId);
    try {
      const verified = await verifySignedBlob(blob, {
        signerKeys: (name, id) => (name === signer && id === keyId ? key : undefined),
        expectedPurpose: POLICY_PURPOSE,
        ...(openOptions?.heldPrefix === undefined ? {} : { heldPrefix: openOptions.heldPrefix }),
      });
      if (verified.signer !== expected) throw new CryptoError("crypto_unknown_signer");
      const payload = verified.payload;
      let text: string | undefined;
      return {
        // Decoded only if asked for (a view into the blob, not copied first): the cache
        // parses the bytes, and decodes little of them when their apis section is known.
        get document() {
          text ??= Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength).toString("utf8");
          return text;
        },
        documentBytes: payload,
        signer: verified.signer,
        signedAt: verified.signedAt,
        ...(signedPolicy === undefined ? {} : { signedBlob: signedPolicy }),
      };
    } catch (error) {
      if (isCryptoError(error)) throw unverifiable(`signed policy rejected: ${error.code}`, error);
      throw error;
    }
  };

  return {
    open: (signedPolicy, context, openOptions) =>
      verify(Buffer.from(signedPolicy, "base64"), context, openOptions, signedPolicy),
    openSigned: (blob, context, openOptions) =>
      verify(Buffer.from(blob.buffer, blob.byteOffset, blob.byteLength), context, openOptions),
    prefetchKeys(subjectId) {
      // Signed by the owner the last policy's crypto version names (v1, a subject's own keys,
      // until a policy says otherwise); for v2 that is the service's ring, fetched once.
      const cryptoVersion = lastVersion ?? "subject_credentials_v1";
      keys.prefetch(policyKeyOwner({ cryptoVersion, subjectId, partnerId: "" }, options.serviceIdentity));
    },
  };
}
