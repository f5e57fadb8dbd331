/** Public API of the upstream crypto service and its client. See docs/managed-crypto.md. */

export {
  type CryptoClient,
  CryptoClientError,
  type CryptoClientErrorCode,
  type CryptoClientOptions,
  type CryptoCredentials,
  createCryptoClient,
  cryptoClientErrorMessages,
  type DecryptResult,
  type DecryptVerifyResult,
  type EncryptResult,
  type SignEncryptResult,
} from "../../clients/crypto-service/client.ts";
export type { PartnerCredentials } from "../../clients/crypto-service/credentials.ts";
export {
  CryptoServiceError,
  type CryptoServiceReason,
  cryptoServiceReasons,
} from "../../clients/crypto-service/reasons.ts";
export {
  ACTIONS_PATH,
  ADMIN_OWNERS_PATH,
  DEFAULT_PURPOSE,
  PARTNER_HEADERS,
} from "../../clients/crypto-service/wire.ts";
export { CryptoServerConfigError, type CryptoServerOptions } from "./options.ts";
export { OWNER_KINDS, type OwnerKind, type ProvisionOwnerInput } from "./owner-registry.ts";
export {
  type CryptoServer,
  createCryptoServer,
  type ListenAddress,
  type ProvisionedOwner,
  type RotatedOwner,
} from "./server.ts";
