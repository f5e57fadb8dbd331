/**
 * Failures of the upstream crypto service and of its client, with stable reasons. The
 * project's error table (src/errors.ts) has no ciphertext, signature or partner-credential
 * codes yet, so each reason is answered with the closest table code and names itself in
 * `details.reason`; the mapping lives only here, so adding proper codes is a one-line change.
 */

import { ReasonError, type ReasonSpec } from "../../errors.ts";

/** Public reasons: what a caller is told. Messages are fixed and never contain a value. */
export const cryptoServiceReasons = {
  invalid_request: { code: "invalid_request", message: "The request is malformed." },
  missing_field: { code: "invalid_request", message: "A required field or header is missing or empty." },
  invalid_ciphertext: {
    code: "invalid_ciphertext",
    message: "The encrypted data is not valid for these credentials, or it was altered.",
  },
  invalid_signature: {
    code: "invalid_signature",
    message: "The signed data could not be verified: the signature or its signer is not valid.",
  },
  wrong_purpose: { code: "invalid_request", message: "The signed data was made for another purpose." },
  not_text: { code: "invalid_request", message: "The decrypted data is not UTF-8 text." },
  unknown_recipient: { code: "invalid_request", message: "The recipient is not a known owner." },
  invalid_credentials: {
    code: "invalid_credentials",
    message: "The partner credentials (api_key, access_key, secret_key) were rejected.",
  },
  subject_not_allowed: {
    code: "insufficient_role",
    message: "The authenticated subject may not use these partner credentials.",
  },
  owner_not_found: { code: "not_found", message: "No such owner." },
  owner_not_delegated: {
    code: "insufficient_role",
    message: "These partner credentials may not act for, provision or retire this owner.",
  },
  owner_exists: { code: "conflict", message: "An owner with this id already exists." },
} as const satisfies Record<string, ReasonSpec>;

export type CryptoServiceReason = keyof typeof cryptoServiceReasons;

export function isCryptoServiceReason(value: unknown): value is CryptoServiceReason {
  return typeof value === "string" && Object.hasOwn(cryptoServiceReasons, value);
}

/**
 * A failure of the crypto service. `fields` (field or header names, never values) are
 * public; `cause` is for logs only.
 */
export class CryptoServiceError extends ReasonError<CryptoServiceReason> {
  constructor(
    reason: CryptoServiceReason,
    options?: { message?: string; fields?: readonly string[]; cause?: unknown },
  ) {
    super(cryptoServiceReasons[reason], reason, options);
    this.name = "CryptoServiceError";
  }
}
