/**
 * Load + verify a subject's policy for the runtime paths. The stored record (small: its
 * facts and the artifact's address; record-store.ts) is read on every call, so a policy
 * change or revocation is seen on the very next call. Only the expensive part — reading the
 * artifact, decrypt-verify, schema validation, version path — is cached, keyed by subject
 * + document_hash + head and checked against the exact artifact the record names (its
 * content address, or its text when inline), so a record pointing at another artifact is
 * opened (and refused, if tampered) again, never served from the cache.
 */
import { LRUCache } from "lru-cache";
import type { PolicyLoad, ShadowLoad } from "../core/decision.ts";
import { policySubjectId } from "../core/policy-document.ts";
import { positiveIntegerOption } from "../core/positive-integer.ts";
import type { Store } from "../store/store.ts";
import { openPolicyDocument } from "./artifact.ts";
import { PolicyProtectionError, type PolicyProtector } from "./protector.ts";
import type { PolicyRecordFacts, StoredPolicyRecord } from "./record.ts";
import { type PolicyCollection, readPolicyArtifact, readStoredPolicyRecord } from "./record-store.ts";

/**
 * Where policy records come from: the store here, the authority service over HTTP in the
 * sidecar. A source may return the record without its artifact (`artifact_sha256` names
 * it) and fetch the artifact only when the loader has no verified copy of that one.
 */
export interface PolicyRecordSource {
  get(subjectId: string): Promise<StoredPolicyRecord | undefined>;
  /** The artifact a record names by address; undefined when missing or altered. */
  artifact?(record: StoredPolicyRecord): Promise<string | undefined>;
}

/** Ids no store can hold (too long, NUL, lone surrogates) name no record — not a store fault. */
export function isStorableId(id: string): boolean {
  return id.length > 0 && id.length <= 512 && !id.includes("\u0000") && id.isWellFormed();
}

/**
 * Reads `policies/<subject_id>` (or the shadow's collection) and its artifact on a miss; an id
 * no store can hold names no record.
 */
export function storePolicyRecordSource(store: Store, collection?: PolicyCollection): PolicyRecordSource {
  return {
    get: async (subjectId) =>
      isStorableId(subjectId) ? readStoredPolicyRecord(store, subjectId, collection) : undefined,
    artifact: (record) => readPolicyArtifact(store, record),
  };
}

/**
 * A record source whose answers, absence included, are reused for `ttlMs` (0: the source
 * itself). Only for shadow records (decision 2831): a shadow never changes an outcome, so a
 * shadow set, changed or removed up to `ttlMs` ago only changes the notes beside a decision,
 * as the subject and capability records the same setting covers. Enforced records are never
 * reused: a revocation is seen on the next call.
 */
export function reusedRecordSource(source: PolicyRecordSource, ttlMs: number): PolicyRecordSource {
  if (ttlMs === 0) return source;
  const answers = new LRUCache<string, { readonly record: StoredPolicyRecord | undefined }>({
    max: 10_000,
    ttl: ttlMs,
  });
  return {
    async get(subjectId) {
      const reused = answers.get(subjectId);
      if (reused !== undefined) return reused.record;
      const record = await source.get(subjectId);
      answers.set(subjectId, { record });
      return record;
    },
    ...(source.artifact === undefined ? {} : { artifact: source.artifact }),
  };
}

export interface PolicyLoaderOptions {
  /** Where records come from; or give `store` to read `policies/<subject_id>` from it. */
  readonly source?: PolicyRecordSource;
  readonly store?: Store;
  readonly protector: PolicyProtector;
  readonly cache?: {
    /** Verified documents kept (default 10000). */
    readonly max?: number;
    /** Memory hygiene only; freshness comes from the record (default 300000 ms). */
    readonly ttlMs?: number;
  };
}

export interface LoadedPolicy {
  readonly policy: PolicyLoad;
  /** The stored record's facts, when one exists (never the artifact). */
  readonly record?: PolicyRecordFacts;
}

export interface LoadExpectation {
  /** The subject's partner as derived server-side; a record naming another partner is refused. */
  readonly partnerId?: string;
}

export interface PolicyLoaderStats {
  readonly hits: number;
  readonly misses: number;
  /** Decrypt-verify + validate runs (misses that were not joined to one in flight). */
  readonly opens: number;
  readonly verificationFailures: number;
}

export interface PolicyLoader {
  load(subjectId: string, expect?: LoadExpectation): Promise<LoadedPolicy>;
  stats(): PolicyLoaderStats;
  /** Drops every cached document (key rotation, tests). */
  clear(): void;
}

export type PolicyLoadErrorCode = "policy_source_unavailable" | "policy_protection_unavailable";

/**
 * The policy could not be evaluated because something it depends on is down: the record
 * source (store) or the keys / crypto service. Routes answer with a 503 deny — fail closed.
 */
export class PolicyLoadError extends Error {
  readonly code: PolicyLoadErrorCode;
  /** `subject_keys_unavailable` when the subject's owner at the crypto service is the fault. */
  readonly authorityCode: "upstream_unavailable" | "subject_keys_unavailable";

  constructor(code: PolicyLoadErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "PolicyLoadError";
    this.code = code;
    const cause = options?.cause;
    this.authorityCode =
      cause instanceof PolicyProtectionError && cause.authorityCode === "subject_keys_unavailable"
        ? "subject_keys_unavailable"
        : "upstream_unavailable";
  }
}

interface CacheEntry {
  /** The artifact the outcome was computed from: its address, or its exact text when inline. */
  readonly artifact: string;
  readonly cryptoVersion: string;
  readonly partnerId: string;
  readonly outcome: PolicyLoad;
}

const VERIFICATION_FAILED: PolicyLoad = { ok: false, reason: "policy_verification_failed" };
const MISSING: PolicyLoad = { ok: false, reason: "missing_policy" };

/** The fields the loader relies on, checked because a store can hold anything. */
function isUsableRecord(record: unknown): record is StoredPolicyRecord {
  if (typeof record !== "object" || record === null) return false;
  const r = record as Record<string, unknown>;
  return (
    typeof r.subject_id === "string" &&
    typeof r.partner_id === "string" &&
    (r.crypto_version === "subject_credentials_v1" || r.crypto_version === "platform_service_v2") &&
    typeof r.document_hash === "string" &&
    typeof r.head === "number" &&
    ((typeof r.artifact === "string" && r.artifact.length > 0) ||
      (r.artifact === undefined && typeof r.artifact_sha256 === "string"))
  );
}

/** What identifies the artifact a record names: its address, or its text when inline. */
const artifactIdentity = (record: StoredPolicyRecord): string =>
  typeof record.artifact === "string" ? record.artifact : `sha256:${record.artifact_sha256}`;

function factsOf(record: StoredPolicyRecord): PolicyRecordFacts {
  const { artifact: _artifact, artifact_sha256: _address, ...facts } = record;
  return facts;
}

/**
 * A record revoked while its document could not be re-signed (the crypto service was down)
 * carries `revoked_at` outside the signature: a revocation marker. It can only take away —
 * a verified document that is not revoked is treated as revoked from that moment — so
 * honouring an unsigned field is safe; un-revoking still needs a newly signed document.
 */
export function withRevocationMarker(
  policy: PolicyLoad,
  record: Pick<PolicyRecordFacts, "revoked_at"> | undefined,
): PolicyLoad {
  const marker = record?.revoked_at;
  if (!policy.ok || typeof marker !== "string" || policy.document.revoked_at !== null) return policy;
  return { ok: true, document: { ...policy.document, revoked_at: marker } };
}

export function createPolicyLoader(options: PolicyLoaderOptions): PolicyLoader {
  const given =
    options?.source ?? (options?.store === undefined ? undefined : storePolicyRecordSource(options.store));
  if (given === undefined || typeof given.get !== "function") {
    throw new TypeError("a PolicyRecordSource (source) or a store is required");
  }
  const source: PolicyRecordSource = given;
  if (typeof options.protector?.open !== "function") throw new TypeError("protector is required");
  const { protector } = options;
  const cache = new LRUCache<string, CacheEntry>({
    max: positiveIntegerOption(options.cache?.max, 10_000, "cache.max"),
    ttl: positiveIntegerOption(options.cache?.ttlMs, 300_000, "cache.ttlMs"),
  });
  // Hand-written, not lru-cache fetch(): a joiner checks the shared result against its own record
  // (artifact, crypto version) and opens its own when they differ (decision 1801).
  const inflight = new Map<string, Promise<PolicyLoad | undefined>>();
  let hits = 0;
  let misses = 0;
  let opens = 0;
  let verificationFailures = 0;

  async function open(record: PolicyRecordFacts, artifact: string, partnerId: string): Promise<PolicyLoad> {
    opens++;
    try {
      const opened = await openPolicyDocument(artifact, protector, {
        cryptoVersion: record.crypto_version,
        subjectId: record.subject_id,
        partnerId,
      });
      // The record's facts (revocation, expiry, allowlist summary) are shown to admins and
      // used by caches; they must describe exactly the signed document.
      if (opened.documentHash !== record.document_hash) {
        verificationFailures++;
        return VERIFICATION_FAILED;
      }
      return { ok: true, document: opened.document };
    } catch (error) {
      if (error instanceof PolicyProtectionError && error.code === "policy_protection_unavailable") {
        throw new PolicyLoadError("policy_protection_unavailable", "policy keys are unavailable", {
          cause: error,
        });
      }
      // A bad artifact, wrong keys, wrong signer, invalid content — or any unexpected
      // failure while opening: never an allow.
      verificationFailures++;
      return VERIFICATION_FAILED;
    }
  }

  // The newest signed policy_version seen per subject. A store writer who puts back an older,
  // validly signed record (e.g. from before a revocation) is refused instead of trusted.
  const newestVersion = new LRUCache<string, string>({
    max: positiveIntegerOption(options.cache?.max, 10_000, "cache.max"),
  });
  function atOrAboveFloor(subjectId: string, outcome: PolicyLoad): PolicyLoad {
    // Another subject's document is left to the decision's subject check (subject_mismatch).
    if (!outcome.ok || policySubjectId(outcome.document) !== subjectId) return outcome;
    const version = outcome.document.policy_version;
    const floor = newestVersion.get(subjectId);
    if (floor !== undefined && version < floor) {
      verificationFailures++;
      return VERIFICATION_FAILED;
    }
    if (floor === undefined || version > floor) newestVersion.set(subjectId, version);
    return outcome;
  }

  async function load(subjectId: string, expect: LoadExpectation = {}): Promise<LoadedPolicy> {
    const loaded = await loadRecord(subjectId, expect);
    const policy = withRevocationMarker(atOrAboveFloor(subjectId, loaded.policy), loaded.record);
    return { ...loaded, policy };
  }

  /** A read from the record source; its failure is an outage (503), never a deny reason. */
  async function fromSource<T>(read: () => Promise<T>): Promise<T> {
    try {
      return await read();
    } catch (error) {
      throw new PolicyLoadError("policy_source_unavailable", "policy records are unavailable", {
        cause: error,
      });
    }
  }

  /** The artifact a record names; undefined when it is gone or altered. */
  function artifactOf(record: StoredPolicyRecord): Promise<string | undefined> {
    if (typeof record.artifact === "string") return Promise.resolve(record.artifact);
    return fromSource(async () => source.artifact?.(record));
  }

  /** Reads the artifact and opens it; undefined when the artifact is gone or altered. */
  async function readAndOpen(
    record: StoredPolicyRecord,
    facts: PolicyRecordFacts,
    partnerId: string,
  ): Promise<PolicyLoad | undefined> {
    const artifact = await artifactOf(record);
    return artifact === undefined ? undefined : open(facts, artifact, partnerId);
  }

  async function loadRecord(
    subjectId: string,
    expect: LoadExpectation,
    retried = false,
  ): Promise<LoadedPolicy> {
    const raw: unknown = await fromSource(() => source.get(subjectId));
    if (raw === undefined || raw === null) return { policy: MISSING };
    if (!isUsableRecord(raw)) return { policy: VERIFICATION_FAILED };
    const record = raw;
    const facts = factsOf(record);
    // A record filed under another subject or partner is not this subject's policy.
    if (record.subject_id !== subjectId) return { policy: VERIFICATION_FAILED, record: facts };
    const partnerId = expect.partnerId ?? record.partner_id;
    if (record.partner_id !== partnerId) return { policy: VERIFICATION_FAILED, record: facts };

    const identity = artifactIdentity(record);
    const key = `${subjectId}\u0000${record.document_hash}\u0000${record.head}`;
    const cached = cache.get(key);
    if (
      cached !== undefined &&
      cached.artifact === identity &&
      cached.cryptoVersion === record.crypto_version &&
      cached.partnerId === partnerId
    ) {
      hits++;
      return { policy: cached.outcome, record: facts };
    }
    misses++;
    const flightKey = `${key}\u0000${partnerId}\u0000${record.crypto_version}\u0000${identity.length}`;
    const pending = inflight.get(flightKey);
    if (pending !== undefined) {
      const joined = await pending;
      // Joined a load of a record read at the same moment; if the artifacts differ, open our own.
      const entry = cache.get(key);
      if (joined !== undefined && entry !== undefined && entry.artifact === identity) {
        return { policy: joined, record: facts };
      }
    }
    let opening = readAndOpen(record, facts, partnerId);
    if (pending === undefined) {
      opening = opening.finally(() => inflight.delete(flightKey));
      inflight.set(flightKey, opening);
    }
    const outcome = await opening;
    if (outcome === undefined) {
      // Replaced between the two reads (the writer removes the old artifact): read the record again.
      if (!retried) return loadRecord(subjectId, expect, true);
      verificationFailures++;
      return { policy: VERIFICATION_FAILED, record: facts };
    }
    cache.set(key, { artifact: identity, cryptoVersion: record.crypto_version, partnerId, outcome });
    return { policy: outcome, record: facts };
  }

  return {
    load,
    stats: () => ({ hits, misses, opens, verificationFailures }),
    clear: () => cache.clear(),
  };
}

/**
 * The enforced loader with each verified policy carrying the subject's shadow policy, loaded
 * by its own loader (its own cache and version floor) from the shadow records (decision 2761).
 * The shadow can never change the enforced load: it is read after it, only beside a verified
 * enforced document, and an outage reading it leaves the shadow out (logged by the caller's
 * metrics as no shadow), never a 503.
 */
export function withShadowPolicies(
  enforced: PolicyLoader,
  shadows: PolicyLoader,
  onShadowUnavailable: (error: unknown) => void = () => {},
): PolicyLoader {
  async function shadowOf(subjectId: string, expect?: LoadExpectation): Promise<ShadowLoad | undefined> {
    try {
      const { policy } = await shadows.load(subjectId, expect);
      if (policy.ok) return { ok: true, document: policy.document };
      return policy.reason === "missing_policy" ? undefined : policy;
    } catch (error) {
      onShadowUnavailable(error);
      return undefined;
    }
  }
  return {
    async load(subjectId, expect) {
      const loaded = await enforced.load(subjectId, expect);
      if (!loaded.policy.ok) return loaded;
      const shadow = await shadowOf(subjectId, expect);
      return shadow === undefined ? loaded : { ...loaded, policy: { ...loaded.policy, shadow } };
    },
    stats: () => enforced.stats(),
    clear: () => {
      enforced.clear();
      shadows.clear();
    },
  };
}
