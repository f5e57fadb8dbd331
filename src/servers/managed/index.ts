/** Public API of the managed crypto API. See docs/managed-crypto.md. */

export {
  createDevCertificate,
  type DevCertificate,
  type DevCertificateOptions,
  loadOrCreateDevCertificate,
  type StoredDevCertificate,
} from "./dev-certificate.ts";
export { ManagedError, type ManagedReason, managedReasons } from "./errors.ts";
export { ManagedConfigError, type ManagedServerOptions } from "./options.ts";
export type { RateLimit } from "./rate-limiter.ts";
export { CREDENTIAL_HEADERS } from "./request.ts";
export { createManagedServer, type ManagedServer } from "./server.ts";
