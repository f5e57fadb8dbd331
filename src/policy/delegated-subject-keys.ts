/**
 * The policy keys of `subject_credentials_v1` subjects in the custody modes (decision 2513):
 * each subject has its own owner at the crypto service (`subject:<stored id>`), provisioned
 * by the service identity, which alone may act for it (`act_as`). The authority holds no
 * subject's credentials — only the service identity's, from its mounted file — so its store
 * yields no key material, and onboarding needs no restart: the owner is provisioned when the
 * subject is created, or at the latest when its first policy is written.
 *
 * A subject listed under `subjects` in the credentials file (the older way) keeps using that
 * credential set; its owner is the operator's to rotate and retire.
 */
import { CryptoClientError, isDataFault } from "../clients/crypto-service/client.ts";
import type { OwnerCrypto } from "../clients/crypto-service/owner-crypto.ts";
import { AuthorityError } from "../errors.ts";
import { PolicyProtectionError, type SubjectKeyCustody } from "./protector.ts";

export type OwnerLifecycle = "provision" | "rotate" | "retire";

export interface DelegatedSubjectKeysOptions {
  /** A subject owner's operations, acted for by the service identity. */
  readonly delegatedOwner: (owner: string) => OwnerCrypto;
  /** Provisions (idempotent), rotates or retires an owner with the service identity's credentials. */
  readonly lifecycle: (owner: string, operation: OwnerLifecycle) => Promise<void>;
  /** Subjects whose credential sets the mounted file lists (legacy). */
  readonly listed: ReadonlyMap<string, OwnerCrypto>;
  readonly now: () => Date;
}

export interface DelegatedSubjectKeys {
  /** The owner that protects and opens this subject's policies. */
  ownerFor(subjectId: string): OwnerCrypto;
  readonly custody: SubjectKeyCustody;
}

/** How many unusable subjects diagnostics remember (the oldest are forgotten first). */
const MAX_REMEMBERED = 1000;

const subjectOwner = (subjectId: string) => `subject:${subjectId}`;

/** The crypto service's answer that the owner is missing, or not ours to act for. */
function ownerFault(error: unknown): "owner_missing" | "owner_not_delegated" | undefined {
  if (!(error instanceof CryptoClientError)) return undefined;
  if (error.code === "unknown_owner") return "owner_missing";
  if (error.code === "not_delegated") return "owner_not_delegated";
  return undefined;
}

export function createDelegatedSubjectKeys(options: DelegatedSubjectKeysOptions): DelegatedSubjectKeys {
  const { delegatedOwner, lifecycle, listed, now } = options;
  const unusable = new Map<string, { subjectId: string; reason: string; at: string }>();

  const remember = (subjectId: string, reason: string) => {
    unusable.delete(subjectId);
    unusable.set(subjectId, { subjectId, reason, at: now().toISOString() });
    if (unusable.size > MAX_REMEMBERED) unusable.delete(unusable.keys().next().value as string);
  };
  /** A specific refusal naming the subject's owner and what to do, never a bare 503. */
  const refusal = (subjectId: string, reason: string, cause: unknown) => {
    remember(subjectId, reason);
    return new PolicyProtectionError(
      "policy_protection_unavailable",
      `the crypto service owner ${subjectOwner(subjectId)} is ${
        reason === "owner_missing" ? "missing" : "not delegated to this service identity"
      }; provision or rotate it with POST /v1/partners/{id}/users/{subject}/rotate-keys`,
      { cause, subjectKeys: true },
    );
  };
  const guarded = async <T>(subjectId: string, run: () => Promise<T>): Promise<T> => {
    try {
      const result = await run();
      unusable.delete(subjectId);
      return result;
    } catch (error) {
      const fault = ownerFault(error);
      throw fault === undefined ? error : refusal(subjectId, fault, error);
    }
  };

  /** Lifecycle calls answer admins: any other crypto-service failure is an outage (503). */
  const managed = async (subjectId: string, operation: OwnerLifecycle) => {
    try {
      await guarded(subjectId, () => lifecycle(subjectOwner(subjectId), operation));
    } catch (error) {
      if (!(error instanceof CryptoClientError) || isDataFault(error)) throw error;
      throw new PolicyProtectionError("policy_protection_unavailable", "the crypto service is unavailable", {
        cause: error,
      });
    }
  };

  const ownerFor = (subjectId: string): OwnerCrypto => {
    const fromFile = listed.get(subjectId);
    if (fromFile !== undefined) return fromFile;
    const owner = delegatedOwner(subjectOwner(subjectId));
    return {
      owner: owner.owner,
      // The first policy write provisions a subject created before its owner was (or while
      // the crypto service was down); opening never does: a missing owner opens nothing.
      signEncrypt: (data, signOptions) =>
        guarded(subjectId, async () => {
          try {
            return await owner.signEncrypt(data, signOptions);
          } catch (error) {
            if (ownerFault(error) !== "owner_missing") throw error;
            await lifecycle(owner.owner, "provision");
            return owner.signEncrypt(data, signOptions);
          }
        }),
      decryptVerify: (encryptedData, openOptions) =>
        guarded(subjectId, () => owner.decryptVerify(encryptedData, openOptions)),
    };
  };

  const delegatedOnly = (subjectId: string) => {
    if (listed.has(subjectId)) {
      throw new AuthorityError(
        "conflict",
        "This subject's credential set comes from the crypto credentials file: its owner is rotated and retired at the crypto service by the operator.",
      );
    }
  };

  return {
    ownerFor,
    custody: {
      async provision(subjectId) {
        if (!listed.has(subjectId)) await managed(subjectId, "provision");
      },
      async rotate(subjectId) {
        delegatedOnly(subjectId);
        await managed(subjectId, "rotate");
      },
      async retire(subjectId) {
        if (listed.has(subjectId)) return;
        try {
          await managed(subjectId, "retire");
        } catch (error) {
          // Already gone (an earlier, interrupted delete): nothing left to retire.
          if (!(error instanceof PolicyProtectionError && ownerFault(error.cause) === "owner_missing"))
            throw error;
        }
        unusable.delete(subjectId);
      },
      unusable: () => [...unusable.values()],
    },
  };
}
