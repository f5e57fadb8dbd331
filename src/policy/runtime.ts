/**
 * The runtime pieces every decision path shares — subject lookup, capability resolver,
 * policy loader, audit recorder — attached to the service context they serve.
 * `buildAuthorityService` attaches configured ones; a context built without it (tests of
 * other route groups) gets defaults on first use, so every route sees one set per context.
 */
import { LRUCache } from "lru-cache";
import { type AuditRecorder, createAuditRecorder } from "../audit/recorder.ts";
import { collections, type SubjectRecord, storeKeys } from "../store/model.ts";
import type { Store } from "../store/store.ts";
import { type CapabilityResolver, createCapabilityResolver } from "./capability-resolver.ts";
import {
  createPolicyLoader,
  isStorableId,
  PolicyLoadError,
  type PolicyLoader,
  storePolicyRecordSource,
} from "./loader.ts";
import type { PolicyProtector } from "./protector.ts";

/** Where subject records come from (the subject's partner is derived from it, never from the caller). */
export interface SubjectSource {
  get(subjectId: string): Promise<SubjectRecord | undefined>;
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
}

interface RuntimeOwner {
  readonly store: Store;
  readonly protector: PolicyProtector;
}

const runtimes = new WeakMap<object, DecisionRuntime>();

export function createDecisionRuntime(owner: RuntimeOwner): DecisionRuntime {
  return {
    subjects: storeSubjectSource(owner.store),
    capabilities: createCapabilityResolver(owner.store),
    policies: createPolicyLoader({
      source: storePolicyRecordSource(owner.store),
      protector: owner.protector,
    }),
    recorder: createAuditRecorder({ store: owner.store }),
  };
}

/** Makes `runtime` the one the routes of this context use. */
export function attachDecisionRuntime(owner: object, runtime: DecisionRuntime): void {
  runtimes.set(owner, runtime);
}

export function decisionRuntimeFor(owner: RuntimeOwner): DecisionRuntime {
  let runtime = runtimes.get(owner);
  if (runtime === undefined) {
    runtime = createDecisionRuntime(owner);
    runtimes.set(owner, runtime);
  }
  return runtime;
}
