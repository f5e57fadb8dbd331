/**
 * The binding's own records an invoke reads before its policy: the workload client, the
 * binding, the external mapping, the experience and the auth profile. Each is reused for
 * `record-cache-ms` (as subject and capability records are, src/policy/runtime.ts), so a
 * change or deletion takes effect on every replica within that bound; 0 reads every time. A
 * write to one of `BINDING_RECORD_COLLECTIONS` through this process's store forgets them all
 * (`watchBindingRecordWrites`): a change made through this replica counts at once here.
 * The subject's policy record, which holds revocation, is still read on every call.
 */
import { LRUCache } from "lru-cache";
import { loadExecutionAuthProfile } from "../admin/auth-profiles.ts";
import type { AuthProfile } from "../execute/auth-profiles.ts";
import type {
  BindingRecord,
  ExperienceRecord,
  ExternalMappingRecord,
  WorkloadClientRecord,
} from "../store/binding-model.ts";
import { bindingCollections } from "../store/binding-model.ts";
import { collections } from "../store/model.ts";
import type { Store } from "../store/store.ts";
import { getBinding } from "./bindings.ts";
import { findExperience } from "./experience.ts";
import { findMapping } from "./mappings.ts";
import { findWorkloadClient } from "./workload-clients.ts";

export interface BindingRecords {
  client(clientId: string): Promise<WorkloadClientRecord | undefined>;
  /** Throws `not_found` as getBinding does. */
  binding(bindingId: string): Promise<BindingRecord>;
  mapping(bindingId: string, subjectId: string): Promise<ExternalMappingRecord | undefined>;
  experience(
    binding: Pick<BindingRecord, "binding_id" | "partner_id">,
  ): Promise<ExperienceRecord | undefined>;
  /** Throws `not_found` as loadExecutionAuthProfile does. */
  authProfile(partnerId: string, profileId: string): Promise<AuthProfile>;
  /** Drops every kept record (a write to one of their collections was made here). */
  forget(): void;
}

/** Where the records kept here are stored. */
export const BINDING_RECORD_COLLECTIONS: ReadonlySet<string> = new Set([
  bindingCollections.bindings,
  bindingCollections.workloadClients,
  bindingCollections.mappings,
  bindingCollections.experiences,
  collections.authProfiles,
]);

/** An absent answer that may be kept (the experience: its absence narrows nothing). */
const NONE = Symbol("none");

interface Reused<V> {
  readonly get: (...parts: string[]) => Promise<V | undefined>;
  readonly clear: () => void;
}

/**
 * `load` behind a cache of `ttlMs`. Found records are kept; an absence only with
 * `keepAbsence` (a record created a moment ago is otherwise seen at once). Failures are never kept.
 */
function reused<V extends object>(
  ttlMs: number,
  load: (...parts: string[]) => Promise<V | undefined>,
  keepAbsence = false,
): Reused<V> {
  if (ttlMs === 0) return { get: load, clear: () => {} };
  const cache = new LRUCache<string, V | typeof NONE>({ max: 10_000, ttl: ttlMs });
  const get = async (...parts: string[]): Promise<V | undefined> => {
    // NUL never occurs in a stored id, so the joined key names one tuple.
    const key = parts.join("\u0000");
    const cached = cache.get(key);
    if (cached !== undefined) return cached === NONE ? undefined : cached;
    const value = await load(...parts);
    if (value !== undefined) cache.set(key, value);
    else if (keepAbsence) cache.set(key, NONE);
    return value;
  };
  return { get, clear: () => cache.clear() };
}

export function createBindingRecords(store: Store, ttlMs: number): BindingRecords {
  if (!Number.isSafeInteger(ttlMs) || ttlMs < 0) throw new TypeError("ttlMs must be a non-negative integer");
  const deps = { store };
  const client = reused(ttlMs, (clientId) => findWorkloadClient(deps, clientId));
  const binding = reused(ttlMs, (bindingId) => getBinding(deps, bindingId));
  const mapping = reused(ttlMs, (bindingId, subjectId) => findMapping(deps, bindingId, subjectId));
  const experience = reused(
    ttlMs,
    (partnerId, bindingId) => findExperience(deps, { partner_id: partnerId, binding_id: bindingId }),
    true,
  );
  const authProfile = reused(ttlMs, (partnerId, profileId) =>
    loadExecutionAuthProfile(deps, partnerId, profileId),
  );
  return {
    client: (clientId) => client.get(clientId),
    binding: async (bindingId) => (await binding.get(bindingId)) as BindingRecord,
    mapping: (bindingId, subjectId) => mapping.get(bindingId, subjectId),
    experience: (record) => experience.get(record.partner_id, record.binding_id),
    authProfile: async (partnerId, profileId) => (await authProfile.get(partnerId, profileId)) as AuthProfile,
    forget() {
      for (const kept of [client, binding, mapping, experience, authProfile]) kept.clear();
    },
  };
}

/** The document writes that name their collection first. */
const COLLECTION_WRITES: ReadonlySet<PropertyKey> = new Set([
  "put",
  "create",
  "delete",
  "putIfMatch",
  "deleteIfMatch",
]);

/**
 * `store` whose writes to `BINDING_RECORD_COLLECTIONS` call `changed` once they are done (or
 * failed: a write that may have landed forgets too). Reads and log appends pass through.
 */
export function watchBindingRecordWrites(store: Store, changed: () => void): Store {
  const touches = (collection: unknown) =>
    typeof collection === "string" && BINDING_RECORD_COLLECTIONS.has(collection);
  const after = <T>(result: Promise<T>, hit: boolean): Promise<T> => (hit ? result.finally(changed) : result);
  const watched = (property: PropertyKey, method: (...args: unknown[]) => Promise<unknown>) => {
    if (COLLECTION_WRITES.has(property))
      return (collection: unknown, ...rest: unknown[]) =>
        after(method(collection, ...rest), touches(collection));
    if (property === "writeAll")
      return (writes: readonly { readonly collection?: unknown }[]) =>
        after(
          method(writes),
          writes.some((write) => touches(write.collection)),
        );
    return method;
  };
  // Made once per method: the hot paths read the store's methods on every call.
  const methods = new Map<unknown, unknown>();
  return new Proxy(store, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== "function") return value;
      let method = methods.get(value);
      if (method === undefined) {
        method = watched(property, value.bind(target) as (...args: unknown[]) => Promise<unknown>);
        methods.set(value, method);
      }
      return method;
    },
  });
}
