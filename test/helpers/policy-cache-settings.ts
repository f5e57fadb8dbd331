/**
 * The verified-policy cache's settings as the sidecar's settings schema defaults them: the cache
 * takes them from its composition root and keeps no defaults of its own (issue 29).
 */
import { sidecarSettings } from "../../src/servers/sidecar/config.ts";

const defaultOf = (value: { readonly default?: unknown }): number => {
  if (typeof value.default !== "number") throw new TypeError("a numeric default is required");
  return value.default;
};

export const POLICY_CACHE_SETTINGS = {
  stalenessMs: defaultOf(sidecarSettings.staleness),
  ttlWithoutRedisMs: defaultOf(sidecarSettings.policyTtl),
  maxAgeMs: defaultOf(sidecarSettings.policyMaxAge),
  localMaxEntries: defaultOf(sidecarSettings.policyCacheMaxEntries),
  localMaxBytes: defaultOf(sidecarSettings.policyCacheMaxMib) * 1024 * 1024,
  loadConcurrency: defaultOf(sidecarSettings.policyLoadConcurrency),
} as const;
