export { type AccountsFile, loadAccountsFile, parseAccountsFile } from "./accounts-file.ts";
export type { ClientInput, Directory, Principal, ServiceAccountInput } from "./directory.ts";
export { IdpConfigError, OAuthError, type OAuthErrorCode } from "./errors.ts";
export type { KeyRing, SigningKey } from "./keys.ts";
export type { IdpServerOptions } from "./options.ts";
export {
  createIdpServer,
  DISCOVERY_PATH,
  type IdpServer,
  JWKS_PATH,
  type ListenAddress,
  TOKEN_PATH,
} from "./server.ts";
export type { IssuedToken, IssueTokenRequest } from "./token-issuer.ts";
