/**
 * Where secrets at rest (auth-profile secrets, the workload-token signing key) are sealed:
 * key rings in this process (`KeyRingSource`, the embedded mode, under the KEK) or a
 * `SecretBox` — the crypto service sealing with the service identity, so this process holds
 * no key that opens them. `aad` names what the secret belongs to: a sealed value moved onto
 * another record does not open.
 */
import type { KeyRingSource } from "../policy/local-protector.ts";

export interface SecretBox {
  /** Throws SecretSealError("secret_storage_unavailable") when it cannot seal. */
  seal(aad: string, secret: string): Promise<string>;
  /**
   * Throws SecretSealError: "secret_unreadable" for a sealed value that does not open under
   * this aad, "secret_storage_unavailable" when the sealing service cannot be used.
   */
  open(aad: string, sealed: string): Promise<string>;
}

export type SecretKeys = KeyRingSource | SecretBox;

export function isSecretBox(keys: SecretKeys): keys is SecretBox {
  return typeof (keys as Partial<SecretBox>).seal === "function";
}
