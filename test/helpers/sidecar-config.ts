/**
 * A validated `authority sidecar` configuration for tests: the real resolver with no
 * environment or file (its defaults: the settings schema is the one place they live), then
 * the fields a test sets. `sidecarTestOptions()` gives what `buildSidecar` hands `createSidecar`
 * from that configuration and the services it builds, for tests that call `createSidecar` directly.
 */
import { createEgressPolicy } from "../../src/execute/egress.ts";
import { createLogger } from "../../src/observability/logger.ts";
import { createMetricsRegistry } from "../../src/observability/metrics.ts";
import { resolveSidecarConfig, type SidecarConfig } from "../../src/servers/sidecar/config.ts";
import type { SidecarOptions } from "../../src/servers/sidecar/sidecar.ts";

export function testSidecarConfig(fields: Partial<SidecarConfig> = {}): SidecarConfig {
  const defaults = resolveSidecarConfig({
    flags: { "token-file": "/dev/null", "log-level": "silent" },
    env: {},
  });
  return { ...defaults, ...fields };
}

type ConfiguredOptions =
  | "decisionTimeoutMs"
  | "proxyDecisionTimeoutMs"
  | "upstreamTimeoutMs"
  | "maxResponseBytes"
  | "maxRequestBytes"
  | "stalenessMs"
  | "policyTtlMs"
  | "policyMaxAgeMs"
  | "policyCache"
  | "auditMaxPending"
  | "journalMaxBytes"
  | "logger"
  | "registry"
  | "egress";

/** The settings at their defaults, a silent logger, a registry without default metrics, the strict egress policy. */
export function sidecarTestOptions(
  config: SidecarConfig = testSidecarConfig(),
): Pick<SidecarOptions, ConfiguredOptions> {
  return {
    decisionTimeoutMs: config.decisionTimeoutMs,
    proxyDecisionTimeoutMs: config.proxyDecisionTimeoutMs,
    upstreamTimeoutMs: config.upstreamTimeoutMs,
    maxResponseBytes: config.maxResponseBytes,
    maxRequestBytes: config.maxRequestBytes,
    stalenessMs: config.stalenessMs,
    policyTtlMs: config.policyTtlMs,
    policyMaxAgeMs: config.policyMaxAgeMs,
    policyCache: config.policyCache,
    auditMaxPending: config.auditMaxPending,
    journalMaxBytes: config.journalMaxBytes,
    logger: createLogger("sidecar", "silent"),
    registry: createMetricsRegistry({ collectDefaults: false }),
    egress: createEgressPolicy(),
  };
}
