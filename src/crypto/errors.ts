/**
 * Typed failures of the crypto layer. Messages are fixed per code so that no secret,
 * key byte or plaintext fragment can reach a caller or a log line through an error.
 */

export const cryptoErrorMessages = {
  crypto_malformed: "The ciphertext or key material is malformed.",
  crypto_unsupported: "The ciphertext uses an unsupported format version or algorithm suite.",
  crypto_invalid_argument: "A crypto operation was called with invalid arguments.",
  crypto_invalid_key: "The key has the wrong type or algorithm for this operation.",
  crypto_unknown_key: "No key with the ciphertext's key id is available.",
  crypto_decrypt_failed: "The ciphertext could not be decrypted.",
  crypto_bad_signature: "The signature is not valid.",
  crypto_unknown_signer: "The signer or its key is not known.",
  crypto_wrong_purpose: "The signed document was made for another purpose.",
  crypto_wrong_recipient: "The ciphertext was made for another recipient.",
  crypto_kek_missing: "No key-encryption key is configured.",
  crypto_kek_exists: "A key-encryption key file already exists; it is never replaced.",
  crypto_kek_invalid: "The key-encryption key is not 32 bytes of base64.",
  crypto_wrong_kek: "The key ring was wrapped under a different key-encryption key.",
  crypto_unwrap_failed: "A wrapped key failed its integrity check.",
} as const;

export type CryptoErrorCode = keyof typeof cryptoErrorMessages;

export class CryptoError extends Error {
  readonly code: CryptoErrorCode;

  constructor(code: CryptoErrorCode, options?: { detail?: string; cause?: unknown }) {
    // `detail` names which check failed (a field name, a length); never a value.
    const base = cryptoErrorMessages[code];
    super(
      options?.detail === undefined ? base : `${base} (${options.detail})`,
      options?.cause === undefined ? undefined : { cause: options.cause },
    );
    this.name = "CryptoError";
    this.code = code;
  }
}

export function isCryptoError(error: unknown): error is CryptoError {
  return error instanceof CryptoError;
}
