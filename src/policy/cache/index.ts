export {
  type AuthorityLease,
  type AuthorityLeaseOptions,
  createAuthorityLease,
  type FreshnessLease,
  type PolicyChangeSource,
} from "./authority-lease.ts";
export { CACHE_KEY_BYTES, type CacheKeys, deriveCacheKeys, parseCacheKey } from "./cache-key.ts";
export { PolicyCacheError, type PolicyCacheErrorCode } from "./errors.ts";
export {
  createPolicyChangePublisher,
  type PolicyChangePublisher,
  type PolicyChangePublisherOptions,
} from "./publisher.ts";
export {
  isPolicyHead,
  POLICY_CHANGES_CHANNEL,
  type PolicyChangeMessage,
  parsePolicyChange,
  policyEntryKey,
  policyEntryName,
  policyHeadKey,
} from "./redis-keys.ts";
export {
  createRedisPolicyStore,
  type PolicyHeadStore,
  type RedisPolicyStore,
  type RedisPolicyStoreOptions,
} from "./redis-policy-store.ts";
export { MAX_SEALED_ENTRY_CHARS, type OpenResult, openEntry, sealEntry } from "./sealed-entry.ts";
export {
  type CacheLayer,
  createVerifiedPolicyCache,
  type PolicyCacheEvents,
  type PolicyFetchResult,
  type PolicyLookup,
  type PolicyRecordFetcher,
  type VerifiedPolicy,
  type VerifiedPolicyCache,
  type VerifiedPolicyCacheOptions,
} from "./verified-policy-cache.ts";
