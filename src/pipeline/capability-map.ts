import { ConfigError } from "../core/config-error.ts";
import { isValidCapabilityId } from "../core/index.ts";

/**
 * Which capability a request uses when Envoy's `context_extensions` (or the proxy's
 * `x-authority-capability` header) does not say: `AUTHORITY_SIDECAR_CAPABILITY_MAP`, a JSON
 * object from a key to a capability id. A key is
 *
 * - `host` (`orders.internal`, `orders.internal:8443`) — every path of that host;
 * - `host/prefix` (`api.example.com/v2`) — paths under that prefix on that host;
 * - `/prefix` (`/billing`) — paths under that prefix on any host.
 *
 * A prefix matches whole segments (`/billing` matches `/billing` and `/billing/x`, not
 * `/billingx`). The longest matching prefix wins (a host-only key counts as prefix `/`); on
 * equal prefixes a key naming the host beats one that does not. A host key without a port
 * matches any port; hosts compare case-insensitively. Pure: no I/O.
 */

interface Entry {
  readonly host: string | undefined;
  /** Without trailing slash; "" for a host-only key. */
  readonly prefix: string;
  readonly capabilityId: string;
}

export interface CapabilityMap {
  /** The mapped capability id, or undefined when no key matches. */
  resolve(host: string, path: string): string | undefined;
  readonly size: number;
  /** Every capability id the map names, once each. */
  readonly capabilityIds: readonly string[];
}

const HOST = /^[A-Za-z0-9.-]+(?::\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](?::\d{1,5})?$/;
const PREFIX = /^(?:\/[A-Za-z0-9._~!$&'()*+,;=:@%-]+)+\/?$|^\/$/;

function parseKey(key: string): { host: string | undefined; prefix: string } {
  const slash = key.indexOf("/");
  const host = slash === -1 ? key : key.slice(0, slash);
  const prefix = slash === -1 ? "" : key.slice(slash);
  if (host !== "" && !HOST.test(host))
    throw new ConfigError(`capability map: bad host in key ${JSON.stringify(key)}`);
  if (prefix !== "" && !PREFIX.test(prefix)) {
    throw new ConfigError(`capability map: bad route prefix in key ${JSON.stringify(key)}`);
  }
  return { host: host === "" ? undefined : host.toLowerCase(), prefix: prefix.replace(/\/+$/, "") };
}

function stripPort(host: string): string {
  if (host.startsWith("[")) {
    const end = host.indexOf("]");
    return end === -1 ? host : host.slice(0, end + 1);
  }
  const colon = host.lastIndexOf(":");
  return colon === -1 ? host : host.slice(0, colon);
}

function hostMatches(entryHost: string, requestHost: string): boolean {
  if (entryHost === requestHost) return true;
  // A key without a port matches the host on any port.
  return !/:\d+$/.test(entryHost) && entryHost === stripPort(requestHost);
}

function prefixMatches(prefix: string, path: string): boolean {
  if (prefix === "") return true;
  if (!path.startsWith(prefix)) return false;
  const next = path.charAt(prefix.length);
  return next === "" || next === "/";
}

export function parseCapabilityMap(text: string | undefined): CapabilityMap {
  if (text === undefined || text.trim() === "") return createCapabilityMap({});
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new ConfigError("capability map must be a JSON object");
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new ConfigError("capability map must be a JSON object");
  }
  return createCapabilityMap(value as Record<string, unknown>);
}

export function createCapabilityMap(mapping: Readonly<Record<string, unknown>>): CapabilityMap {
  const entries: Entry[] = [];
  for (const [key, capabilityId] of Object.entries(mapping)) {
    if (typeof capabilityId !== "string" || !isValidCapabilityId(capabilityId)) {
      throw new ConfigError(`capability map: ${JSON.stringify(key)} must map to a capability id`);
    }
    if (key.length === 0 || key.length > 512) throw new ConfigError("capability map: empty or overlong key");
    const { host, prefix } = parseKey(key);
    entries.push({ host, prefix, capabilityId });
  }
  // Most specific first: longer prefix, then host-bound.
  entries.sort(
    (a, b) =>
      b.prefix.length - a.prefix.length || Number(b.host !== undefined) - Number(a.host !== undefined),
  );
  return {
    size: entries.length,
    capabilityIds: [...new Set(entries.map((entry) => entry.capabilityId))],
    resolve(host, path) {
      if (entries.length === 0) return undefined;
      const requestHost = host.toLowerCase();
      const query = path.search(/[?#]/);
      const bare = query === -1 ? path : path.slice(0, query);
      for (const entry of entries) {
        if (entry.host !== undefined && !hostMatches(entry.host, requestHost)) continue;
        if (prefixMatches(entry.prefix, bare)) return entry.capabilityId;
      }
      return undefined;
    },
  };
}
