/**
 * Partner-scoped capability resolution for the runtime paths: the capability record
 * (`capabilities/<partner_id>/<capability_id>`) is read on every call so a new catalog
 * version takes effect at once; the catalog version itself is immutable, so it is read,
 * validated and turned into a core `Capability` once per version and cached.
 */
import { LRUCache } from "lru-cache";
import { type Capability, isValidCapabilityId, validateCapability } from "../core/index.ts";
import { positiveIntegerOption } from "../core/positive-integer.ts";
import { type CapabilityRecord, type CatalogVersionRecord, collections, storeKeys } from "../store/model.ts";
import type { Store } from "../store/store.ts";
import { PolicyLoadError } from "./loader.ts";

/** The store id of one catalog version: `<partner>/<capability>/<version>` (model.ts storeKeys). */
export const catalogVersionId = storeKeys.catalogVersion;

export interface CapabilityResolver {
  /**
   * The capability's current catalog in this partner's scope, or undefined when it does
   * not resolve (unknown id, malformed id, missing or invalid catalog version). Throws
   * PolicyLoadError (`upstream_unavailable`) when the store cannot be read.
   */
  resolve(partnerId: string, capabilityId: string): Promise<Capability | undefined>;
}

export interface CapabilityResolverOptions {
  /** Catalog versions kept in memory (default 1000). */
  readonly max?: number;
  /**
   * Keep found capability records this long (ms; default 0: read every call), so a new
   * catalog version or a deletion takes effect within this time.
   */
  readonly recordTtlMs?: number;
  /** Told when a stored catalog fails validation (it then does not resolve). */
  readonly onInvalidCatalog?: (info: { partnerId: string; capabilityId: string; version: string }) => void;
}

interface Cached {
  readonly capability: Capability | undefined;
  /** False while the version record is absent (an import may still be writing it). */
  readonly final: boolean;
}

export function createCapabilityResolver(
  store: Store,
  options: CapabilityResolverOptions = {},
): CapabilityResolver {
  const max = positiveIntegerOption(options.max, 1000, "max");
  const versions = new LRUCache<string, Cached>({ max });
  const recordTtlMs = options.recordTtlMs ?? 0;
  if (!Number.isSafeInteger(recordTtlMs) || recordTtlMs < 0) {
    throw new TypeError("recordTtlMs must be a non-negative integer");
  }
  const records =
    recordTtlMs === 0 ? undefined : new LRUCache<string, CapabilityRecord>({ max, ttl: recordTtlMs });

  const read = async <T>(collection: string, id: string): Promise<T | undefined> => {
    try {
      return await store.get<T>(collection, id);
    } catch (error) {
      throw new PolicyLoadError("policy_source_unavailable", "capability records are unavailable", {
        cause: error,
      });
    }
  };

  async function loadVersion(
    partnerId: string,
    capabilityId: string,
    record: CapabilityRecord,
  ): Promise<Cached> {
    const version = record.current_version;
    const stored = await read<CatalogVersionRecord>(
      collections.catalogVersions,
      catalogVersionId(partnerId, capabilityId, version),
    );
    if (stored === undefined) return { capability: undefined, final: false };
    try {
      const capability = validateCapability({
        capability_id: capabilityId,
        partner_id: partnerId,
        name: record.name,
        catalog_version: version,
        operations: stored.operations,
      });
      if (stored.capability_id !== capabilityId || stored.partner_id !== partnerId) {
        throw new TypeError("catalog version is filed under another capability");
      }
      return { capability, final: true };
    } catch {
      // Versions are immutable: an invalid one stays invalid, so the verdict is cached.
      options.onInvalidCatalog?.({ partnerId, capabilityId, version });
      return { capability: undefined, final: true };
    }
  }

  return {
    async resolve(partnerId, capabilityId) {
      // Ids that could never be stored are not looked up (and never reach a store key).
      if (!isValidCapabilityId(capabilityId) || partnerId.length === 0) return undefined;
      const id = storeKeys.capability(partnerId, capabilityId);
      let record = records?.get(id);
      if (record === undefined) {
        record = await read<CapabilityRecord>(collections.capabilities, id);
        if (record !== undefined) records?.set(id, record);
      }
      if (record === undefined || typeof record.current_version !== "string") return undefined;
      if (record.partner_id !== partnerId || record.capability_id !== capabilityId) return undefined;
      const key = `${partnerId}\u0000${capabilityId}\u0000${record.current_version}\u0000${record.name}`;
      const cached = versions.get(key);
      if (cached !== undefined) return cached.capability;
      const loaded = await loadVersion(partnerId, capabilityId, record);
      if (loaded.final) versions.set(key, loaded);
      return loaded.capability;
    },
  };
}
