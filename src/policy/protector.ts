import type { PayloadPrefix, PublicKeyRingJson } from "../crypto/index.ts";
import type { CryptoVersion } from "../store/model.ts";

/**
 * Protects a policy document (sign, then encrypt) and opens it again (decrypt, then verify).
 * The crypto version picks whose keys do it: `subject_credentials_v1` uses the subject's own
 * credential set, `platform_service_v2` the environment's service identity. Implementations:
 * in-process key rings (local-protector.ts) and the upstream crypto service (upstream-protector.ts).
 */
export interface PolicyProtectionContext {
  readonly cryptoVersion: CryptoVersion;
  readonly subjectId: string;
  readonly partnerId: string;
}

export interface OpenedPolicy {
  readonly document: string;
  /**
   * The exact verified bytes of `document` (UTF-8), when the opener has them: a caller can
   * hash and parse them without decoding the whole text first (parsePolicyDocument).
   */
  readonly documentBytes?: Uint8Array;
  /** The owner whose key signed it, from the signed content. */
  readonly signer: string;
  readonly signedAt: string;
  /**
   * base64 of the signed blob (signed document, ML-DSA signature, policy text) when the
   * opener can give it: what the authority hands sidecars, which verify it with the
   * signer's public key only (signed-policy.ts).
   */
  readonly signedBlob?: string;
}

export interface OpenOptions {
  /**
   * Whether the caller needs `signedBlob` (default true). A decision does not: without it the
   * crypto service sends back half the bytes (the blob repeats the whole policy text).
   */
  readonly signedBlob?: boolean;
  /**
   * A signed blob's payload may start with these bytes, hashed before (a held `apis` section):
   * for verifySignedBlob's `heldPrefix`. Openers that do not verify a signed blob ignore it.
   */
  readonly heldPrefix?: (payload: Uint8Array) => PayloadPrefix | undefined;
}

/** Opens a policy for a decision: the authority decrypt-verifies, a sidecar verifies a signed blob. */
export interface PolicyOpener {
  open(artifact: string, context: PolicyProtectionContext, options?: OpenOptions): Promise<OpenedPolicy>;
  /**
   * `open` for a signed blob given as its bytes rather than base64 (a sidecar's verifier: its
   * client decodes the blob from the answer's bytes; decision 3131). Without it such a blob is
   * opened as its base64.
   */
  openSigned?(
    blob: Uint8Array,
    context: PolicyProtectionContext,
    options?: Pick<OpenOptions, "heldPrefix">,
  ): Promise<OpenedPolicy>;
  /**
   * Starts fetching the public keys a policy of this subject is likely signed with, without
   * waiting, while the policy itself is fetched (openers that fetch keys). Nothing is trusted
   * by it: the keys are only used by `open`, to verify a policy their owner must have signed.
   */
  prefetchKeys?(subjectId: string): void;
}

export interface PolicyProtector extends PolicyOpener {
  protect(canonicalDocument: string, context: PolicyProtectionContext): Promise<string>;
  /** The public keys of a policy signer (an owner as `policyKeyOwner` names it), for sidecars. */
  signerKeys?(owner: string): Promise<PublicKeyRingJson>;
  /** The lifecycle of subjects' owners at the crypto service (custody modes; decision 2513). */
  readonly subjectKeys?: SubjectKeyCustody;
}

/**
 * A `subject_credentials_v1` subject's owner (`subject:<id>`) at the crypto service, acted for
 * by the service identity: nobody, the authority included, holds that owner's credentials.
 * Failures are PolicyProtectionErrors with `authorityCode` `subject_keys_unavailable` (or
 * `upstream_unavailable` when the crypto service is down).
 */
export interface SubjectKeyCustody {
  /** Creates the owner unless it exists already (idempotent). */
  provision(subjectId: string): Promise<void>;
  /** New current keys; the retired ones keep opening what they protected. */
  rotate(subjectId: string): Promise<void>;
  /** Deletes the owner and its keys; an owner already gone is fine. */
  retire(subjectId: string): Promise<void>;
  /** Subjects whose owner was missing or refused on the last use, for diagnostics and readiness. */
  unusable(): ReadonlyArray<{ readonly subjectId: string; readonly reason: string; readonly at: string }>;
}

/** The purpose every policy signature names, so no other signed message can pass as a policy. */
export const POLICY_PURPOSE = "authority-policy";

/** Whose keys protect a policy of this crypto version. */
export function policyKeyOwner(context: PolicyProtectionContext, serviceIdentity: string): string {
  return context.cryptoVersion === "platform_service_v2"
    ? `service:${serviceIdentity}`
    : `subject:${context.subjectId}`;
}

export type PolicyProtectionErrorCode = "policy_unverifiable" | "policy_protection_unavailable";

/**
 * `policy_unverifiable`: the artifact is bad (tampered, wrong keys, wrong signer) — a deny.
 * `policy_protection_unavailable`: keys or the crypto service cannot be reached — also a
 * deny, but a fault the caller may retry; it maps to 503.
 */
export class PolicyProtectionError extends Error {
  readonly code: PolicyProtectionErrorCode;
  readonly authorityCode: "policy_verification_failed" | "upstream_unavailable" | "subject_keys_unavailable";

  /** `subjectKeys`: the subject's owner is missing or refused at the crypto service (a 503 that says so). */
  constructor(
    code: PolicyProtectionErrorCode,
    message: string,
    options?: { cause?: unknown; subjectKeys?: boolean },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "PolicyProtectionError";
    this.code = code;
    this.authorityCode =
      code === "policy_unverifiable"
        ? "policy_verification_failed"
        : options?.subjectKeys === true
          ? "subject_keys_unavailable"
          : "upstream_unavailable";
  }
}
