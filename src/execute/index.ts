export type { AuthSession, InjectedCredentials } from "./auth-injector.ts";
export type {
  ApiKeyProfile,
  AuthProfile,
  BearerProfile,
  ClientAuthMethod,
  ClientCredentialsProfile,
  OAuthUserProfile,
  SecretResolver,
  TokenSet,
  TokenSetStore,
} from "./auth-profiles.ts";
export { AuthProfileError, parseAuthProfile } from "./auth-profiles.ts";
export {
  ExecutionError,
  type ExecutionErrorReason,
  executionErrorTable,
  type UpstreamError,
} from "./errors.ts";
export {
  type ConstraintsRolloutOptions,
  createExecutor,
  DEFAULT_MAX_RESPONSE_BYTES,
  DEFAULT_TIMEOUT_MS,
  type ExecutableOperation,
  type ExecutionResult,
  type Executor,
  type ExecutorOptions,
  type SendRequest,
} from "./executor.ts";
export { type ExecutionArgs, validateInput } from "./input.ts";
export {
  codeChallengeS256,
  createCodeVerifier,
  createOAuthUserClient,
  type OAuthUserClient,
  type TokenSetInfo,
} from "./oauth-user.ts";
export { type PreparedUpstreamRequest, prepareUpstreamRequest } from "./prepare.ts";
export { type ScrubbedBody, scrubAndRedact } from "./scrub-redact.ts";
export {
  createStoreTokenSetStore,
  DEFAULT_TOKEN_SET_COLLECTION,
  type StoreTokenSetStoreOptions,
} from "./token-set-store.ts";
export { buildUpstreamUrl } from "./url.ts";
