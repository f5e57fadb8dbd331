/**
 * The platform-wide log-only mode of a capability (decision 2761): decide, record, but allow
 * what the policy's allow list does not cover, while a partner onboards. Set only by a
 * platform admin (src/admin/log-only.ts); every path reads it here, beside the capability.
 */
import { LRUCache } from "lru-cache";
import { collections, partnerKey } from "../store/model.ts";
import type { Store } from "../store/store.ts";
import { isStorableId, PolicyLoadError } from "./loader.ts";

/** What `log_only_capabilities/<partner>/<capability>` holds while the mode is on. */
export interface LogOnlyRecord {
  readonly partner_id: string;
  readonly capability_id: string;
  /** Why (shown to admins and in the logs). */
  readonly reason: string;
  readonly set_by: string;
  readonly set_at: string;
}

export interface LogOnlySource {
  /** True when the capability is in the log-only mode; a store fault is an outage (fail closed). */
  covers(partnerId: string, capabilityId: string): Promise<boolean>;
}

/** The mode as stored; the record must name exactly this partner and capability. */
export function storeLogOnlySource(store: Store, options: { readonly ttlMs?: number } = {}): LogOnlySource {
  const ttlMs = options.ttlMs ?? 0;
  const cache = ttlMs === 0 ? undefined : new LRUCache<string, boolean>({ max: 10_000, ttl: ttlMs });
  return {
    async covers(partnerId, capabilityId) {
      if (!isStorableId(partnerId) || !isStorableId(capabilityId)) return false;
      const key = partnerKey(partnerId, capabilityId);
      const cached = cache?.get(key);
      if (cached !== undefined) return cached;
      let record: LogOnlyRecord | undefined;
      try {
        record = await store.get<LogOnlyRecord>(collections.logOnlyCapabilities, key);
      } catch (error) {
        throw new PolicyLoadError("policy_source_unavailable", "log-only settings are unavailable", {
          cause: error,
        });
      }
      const on = record?.partner_id === partnerId && record.capability_id === capabilityId;
      cache?.set(key, on);
      return on;
    },
  };
}
