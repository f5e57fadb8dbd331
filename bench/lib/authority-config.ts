/**
 * A validated `authority serve` configuration for benches: the real resolver's production
 * defaults (record caching included: the figures are what a deployment sees), on an
 * ephemeral loopback port and silent, then the fields a bench sets.
 */
import { type AuthorityConfig, resolveAuthorityConfig } from "../../src/config/authority.ts";

export function benchAuthorityConfig(fields: Partial<AuthorityConfig> = {}): AuthorityConfig {
  const defaults = resolveAuthorityConfig({
    flags: { listen: "127.0.0.1:0", "log-level": "silent", "policy-protection": "embedded" },
    env: {},
  });
  return { ...defaults, ...fields };
}
