import { egressAllowSetting } from "../../src/config/settings.ts";
import { createEgressPolicy, type EgressPolicy, type EgressPolicyOptions } from "../../src/execute/egress.ts";

/**
 * The `egress-allow` value that opens exactly these test servers (`127.0.0.1:<port>` each), as
 * a platform admin would write it: tests reach their loopback upstreams through the same
 * configuration as a deployment, never through a bypass.
 */
export function egressAllowValue(...origins: readonly string[]): string {
  return origins.map((origin) => new URL(origin).host).join(",");
}

/** The egress policy `egress-allow=<these servers>` gives (and nothing else internal). */
export function egressAllowing(
  origins: readonly string[],
  options: Omit<EgressPolicyOptions, "allow"> = {},
): EgressPolicy {
  const allow = egressAllowSetting.parse(egressAllowValue(...origins), "egress-allow");
  return createEgressPolicy({ ...options, allow });
}
