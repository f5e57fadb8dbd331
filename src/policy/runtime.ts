/**
 * The runtime pieces every decision path shares — subject lookup, capability resolver,
 * policy loader, audit recorder. The authority's composition root
 * (src/servers/authority/services.ts) builds one set per process and hands it to every
 * route group that decides; nothing here keeps one of its own.
 */
import { LRUCache } from "lru-cache";
import type { AuditRecorder } from "../audit/recorder.ts";
import type { ConstraintsRolloutGate } from "../core/parameter-constraints.ts";
import { type SubjectAuthentication, subjectCandidates } from "../core/subject-identity.ts";
import { collections, type SubjectRecord, storeKeys } from "../store/model.ts";
import type { Store } from "../store/store.ts";
import {
  type CapabilityResolver,
  type CapabilityResolverOptions,
  createCapabilityResolver,
} from "./capability-resolver.ts";
import {
  createPolicyLoader,
  isStorableId,
  PolicyLoadError,
  type PolicyLoader,
  type PolicyLoaderOptions,
  reusedRecordSource,
  storePolicyRecordSource,
  withShadowPolicies,
} from "./loader.ts";
import { type LogOnlySource, storeLogOnlySource } from "./log-only.ts";
import type { PolicyProtector } from "./protector.ts";

/** Where subject records come from (the subject's partner is derived from it, never from the caller). */
export interface SubjectSource {
  get(subjectId: string): Promise<SubjectRecord | undefined>;
}

/**
 * The subject record an authenticated principal names: for a bearer token, the first of its
 * `sub`'s candidate ids that exists (its partner's namespace, then the global one); for a
 * binding, the derived id itself. Whether the record admits the principal is subjectAdmits's.
 */
export async function principalSubject(
  source: SubjectSource,
  subjectId: string,
  auth: SubjectAuthentication,
): Promise<SubjectRecord | undefined> {
  const candidates = auth.via === "bearer" ? subjectCandidates(subjectId, auth.partnerId) : [subjectId];
  for (const candidate of candidates) {
    const record = await source.get(candidate);
    if (record !== undefined) return record;
  }
  return undefined;
}

export interface SubjectSourceOptions {
  /**
   * Keep found subject records this long (ms; default 0: read every call). A subject's
   * partner never changes, and revocation lives in the policy record (read every call),
   * so a short cache only delays a deletion's effect on the partner lookup.
   */
  readonly ttlMs?: number;
  readonly max?: number;
}

export function storeSubjectSource(store: Store, options: SubjectSourceOptions = {}): SubjectSource {
  const ttlMs = options.ttlMs ?? 0;
  if (!Number.isSafeInteger(ttlMs) || ttlMs < 0) throw new TypeError("ttlMs must be a non-negative integer");
  const cache =
    ttlMs === 0 ? undefined : new LRUCache<string, SubjectRecord>({ max: options.max ?? 10_000, ttl: ttlMs });
  return {
    async get(subjectId) {
      if (!isStorableId(subjectId)) return undefined;
      const cached = cache?.get(subjectId);
      if (cached !== undefined) return cached;
      let record: SubjectRecord | undefined;
      try {
        record = await store.get<SubjectRecord>(collections.subjects, storeKeys.subject(subjectId));
      } catch (error) {
        throw new PolicyLoadError("policy_source_unavailable", "subject records are unavailable", {
          cause: error,
        });
      }
      // Only found records are kept: a subject created a moment ago is seen at once.
      if (record !== undefined) cache?.set(subjectId, record);
      return record;
    },
  };
}

export interface DecisionRuntime {
  readonly subjects: SubjectSource;
  readonly capabilities: CapabilityResolver;
  readonly policies: PolicyLoader;
  readonly recorder: AuditRecorder;
  /** The process's parameter-scoping rollout: the decision stage's gate for constrained operations. */
  readonly constraintsRollout: ConstraintsRolloutGate;
  /** The platform-wide log-only mode per capability (decision 2761). */
  readonly logOnly: LogOnlySource;
}

export interface DecisionRuntimeSettings {
  /** The process's parameter-scoping rollout (from the settings: one gate for every path). */
  readonly constraintsRollout: ConstraintsRolloutGate;
  /** How long subject, capability, log-only and shadow records are reused (ms; default 0: read every call). */
  readonly recordCacheMs?: number;
  readonly policyCache?: PolicyLoaderOptions["cache"];
  /** The process's audit recorder (the composition root owns its options). */
  readonly recorder: AuditRecorder;
  /** Told when a stored catalog version does not parse (the capability is denied). */
  readonly onInvalidCatalog?: CapabilityResolverOptions["onInvalidCatalog"];
}

/** The one decision runtime of a process, from its store and protector. */
export function createDecisionRuntime(
  owner: { readonly store: Store; readonly protector: PolicyProtector },
  settings: DecisionRuntimeSettings,
): DecisionRuntime {
  const recordTtlMs = settings.recordCacheMs ?? 0;
  const loaderOptions = {
    protector: owner.protector,
    ...(settings.policyCache === undefined ? {} : { cache: settings.policyCache }),
  };
  return {
    subjects: storeSubjectSource(owner.store, { ttlMs: recordTtlMs }),
    capabilities: createCapabilityResolver(owner.store, {
      recordTtlMs,
      ...(settings.onInvalidCatalog === undefined ? {} : { onInvalidCatalog: settings.onInvalidCatalog }),
    }),
    policies: withShadowPolicies(
      createPolicyLoader({ source: storePolicyRecordSource(owner.store), ...loaderOptions }),
      createPolicyLoader({
        source: reusedRecordSource(
          storePolicyRecordSource(owner.store, collections.shadowPolicies),
          recordTtlMs,
        ),
        ...loaderOptions,
      }),
    ),
    recorder: settings.recorder,
    constraintsRollout: settings.constraintsRollout,
    logOnly: storeLogOnlySource(owner.store, { ttlMs: recordTtlMs }),
  };
}
