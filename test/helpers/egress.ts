import { parseEgressAllowEntry } from "../../src/core/egress-address.ts";
import { createEgressPolicy, type EgressPolicy, type EgressPolicyOptions } from "../../src/execute/egress.ts";

/**
 * The `egress-allow` entries that open exactly these test servers (`127.0.0.1:<port>` each),
 * as a platform admin would write them: tests reach their loopback upstreams through the same
 * configuration as a deployment, never through a bypass.
 */
export function allowEntriesFor(...origins: readonly string[]): string[] {
  return origins.map((origin) => new URL(origin).host);
}

/** An egress policy allowing exactly these test servers (and nothing else internal). */
export function egressAllowing(
  origins: readonly string[],
  options: Omit<EgressPolicyOptions, "allow"> = {},
): EgressPolicy {
  const allow = allowEntriesFor(...origins).map((text) => {
    const entry = parseEgressAllowEntry(text);
    if (entry === undefined) throw new Error(`not an allow-list entry: ${text}`);
    return entry;
  });
  return createEgressPolicy({ ...options, allow });
}
