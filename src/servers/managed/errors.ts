/**
 * Every failure the managed API answers with: a stable `details.reason`, the closest code
 * of the project's error table, and a fixed message. No message carries a credential, a
 * token, a plaintext or anything an upstream said. The table lacks codes for partner
 * credentials, ciphertexts and signatures; they use the closest code meanwhile (see
 * docs/managed-crypto.md), and only this file changes when proper codes are added.
 */

import { ReasonError, type ReasonSpec } from "../../errors.ts";

export const managedReasons = {
  missing_field: { code: "invalid_request", message: "A required header or body field is missing or empty." },
  invalid_field: { code: "invalid_request", message: "A header or body field is invalid." },
  // The spec answers wrong identity-provider credentials with 500.
  invalid_idp_credentials: {
    code: "internal",
    message: "The identity provider rejected the username or password.",
    callerFault: true,
  },
  idp_rate_limited: {
    code: "rate_limited",
    message: "The identity provider is refusing this username for now; retry later.",
  },
  idp_unavailable: { code: "upstream_unavailable", message: "The identity provider is unavailable." },
  rate_limited: { code: "rate_limited", message: "Too many requests for this username; retry later." },
  invalid_partner_credentials: {
    code: "invalid_credentials",
    message: "The partner credentials (api_key, access_key, secret_key) were rejected.",
  },
  invalid_ciphertext: {
    code: "invalid_ciphertext",
    message: "The encrypted data is not valid for these credentials, or it was altered.",
  },
  invalid_signature: { code: "invalid_signature", message: "The signed data could not be verified." },
  unknown_owner: {
    code: "not_found",
    message: "The owner named by act_as is not known to the crypto service.",
  },
  owner_not_delegated: {
    code: "insufficient_role",
    message: "These partner credentials may not act for the owner named by act_as.",
  },
  invalid_data: { code: "invalid_request", message: "The crypto service refused the data as malformed." },
  upstream_unavailable: { code: "upstream_unavailable", message: "The crypto service is unavailable." },
  upstream_timeout: { code: "upstream_timeout", message: "The crypto service did not answer in time." },
  upstream_error: { code: "upstream_unavailable", message: "The crypto service gave an unexpected answer." },
  upstream_token_rejected: {
    code: "internal",
    message: "The crypto service does not accept the identity provider's tokens.",
  },
} as const satisfies Record<string, ReasonSpec>;

export type ManagedReason = keyof typeof managedReasons;

export class ManagedError extends ReasonError<ManagedReason> {
  /** Sent as Retry-After with 429 and 503 answers. */
  readonly retryAfterSec: number | undefined;

  constructor(
    reason: ManagedReason,
    options?: { message?: string; fields?: readonly string[]; retryAfterSec?: number; cause?: unknown },
  ) {
    super(managedReasons[reason], reason, options);
    this.name = "ManagedError";
    this.retryAfterSec = options?.retryAfterSec;
  }
}
