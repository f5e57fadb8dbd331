/**
 * A validated `authority serve` configuration for tests: the real resolver with no flags,
 * environment or file (its defaults), listening on an ephemeral loopback port and reading
 * records on every call, then the fields a test sets. Passed to `buildAuthorityService`
 * with overrides for the store, verifier, protector and key rings the test supplies.
 */
import { type AuthorityConfig, resolveAuthorityConfig } from "../../src/config/authority.ts";

export function testAuthorityConfig(fields: Partial<AuthorityConfig> = {}): AuthorityConfig {
  const defaults = resolveAuthorityConfig({
    flags: {
      listen: "127.0.0.1:0",
      "record-cache-ms": "0",
      "log-level": "silent",
      // Tests supply their own protector and key rings: the one-process mode, chosen explicitly.
      "policy-protection": "embedded",
    },
    env: {},
  });
  return { ...defaults, ...fields };
}
