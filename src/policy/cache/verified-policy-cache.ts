import { LRUCache } from "lru-cache";
import type { PolicyLoad } from "../../core/decision.ts";
import { growingBound } from "../../core/growing-bound.ts";
import type { PolicyDocument, PolicyValidationOptions } from "../../core/index.ts";
import { isSubjectIdentity, type SubjectIdentity } from "../../core/subject-identity.ts";
import type { CryptoVersion } from "../../store/model.ts";
import { type OpenedPolicyDocument, openPolicyDocument } from "../artifact.ts";
import type { PolicyChange } from "../change-log.ts";
import { withRevocationMarker } from "../loader.ts";
import { type OpenOptions, type PolicyOpener, PolicyProtectionError } from "../protector.ts";
import type { PolicyRecordFacts } from "../record.ts";
import { createAdmissionCache, type Weight } from "./admission-cache.ts";
import type { FreshnessLease } from "./authority-lease.ts";
import type { CacheKeys } from "./cache-key.ts";
import { PolicyCacheError, positiveCacheOption } from "./errors.ts";
import { createPolicyInterner, heapBytes, type PolicyInterner } from "./policy-interning.ts";
import { policyEntryName } from "./redis-keys.ts";
import type { PolicyHeadStore } from "./redis-policy-store.ts";
import { openEntry, sealEntry } from "./sealed-entry.ts";
import { createWriteBackQueue, type WriteBackResult } from "./write-back-queue.ts";

/**
 * The sidecar's verified-policy cache: local LRU → Redis (sealed entries) → the authority
 * service's signed policy → signature verified with the signer's public key (`opener`,
 * signed-policy.ts). Freshness is decided by the subject's policy head:
 *
 * - With Redis, every lookup checks the subject's current head, `authority:policy-head:<subject>`.
 *   It comes from the **head view** when that is in sync: a head read once from Redis while
 *   the change channel was subscribed, raised by every change message since (the store's
 *   generation), trusted while the store's last sync is less than `viewMaxLagMs` old — every
 *   change published before then has been applied. Otherwise the lookup reads the head from
 *   Redis (one pipelined GET, shared by concurrent lookups of the subject), which also seeds
 *   the view. A local entry is used only when its head equals the current head; otherwise
 *   it is reloaded. When the head cannot be read, the local entry is used only while its
 *   head was confirmed (read, announced, or covered by a sync) less than `stalenessMs` ago;
 *   after that the lookup fails (`freshness_unavailable` → deny 503).
 * - Without Redis, an entry is used for `ttlWithoutRedisMs` after the authority last
 *   confirmed it; then it is revalidated with a conditional request (fail closed).
 * - Whatever Redis says, an entry is revalidated with the authority once it is `maxAgeMs`
 *   old (in the background from half that age), which bounds what a Redis that withholds
 *   or replays changes can do.
 *
 * - With a freshness lease (the sidecar always has one; decision 2507), nothing is answered
 *   while the lease is not current, and the authority's change log outranks Redis: a logged
 *   change evicts every older local entry at once, an answer of the authority older than a
 *   logged head is refused, and an allowing Redis entry is used only when it is exactly the
 *   record the authority last reported for the subject (head, document hash, revocation) —
 *   Redis can make a sidecar reload, never keep or bring back what a logged change superseded.
 *
 * Redis entries are sealed (AES-256-GCM + HMAC-SHA256 under the sidecar's cache key) and
 * bound to their subject; a bad MAC, a wrong subject, an unexpected head or a malformed
 * document means the entry is ignored and the policy reloaded from the authority and
 * verified again — never trusted. A sealed entry carries the signed policy, not a bare
 * document, and its signature is verified again when it is read: the cache key (which every
 * sidecar of a deployment holds) can hide or replay a genuine policy, never forge one.
 */

export type CacheLayer = "local" | "redis" | "authority";

export type PolicyFetchResult =
  | {
      readonly status: "found";
      /** The record's facts (the encrypted artifact never reaches a sidecar). */
      readonly record: PolicyRecordFacts;
      /**
       * base64 signed blob, or the blob itself when the client decoded it from the answer's
       * bytes (decision 3131); null when the authority could not open the artifact.
       */
      readonly signedPolicy: string | Uint8Array | null;
      /** The subject's partner as the authority knows it (from the subject record, not the policy record). */
      readonly partnerId: string;
      /** Which principals stand for the subject (src/core/subject-identity.ts), from the subject record. */
      readonly identity: SubjectIdentity;
    }
  | { readonly status: "not_found" }
  | { readonly status: "not_modified" };

/** Where policy records come from (the authority service's sidecar route). */
export interface PolicyRecordFetcher {
  /**
   * With `knownHead`, may answer `not_modified` when the record still has that head. One
   * fetch serves every concurrent lookup of the subject, so it gets no caller's signal:
   * the fetcher bounds it with its own timeout.
   */
  fetchPolicy(subjectId: string, options: { readonly knownHead?: number }): Promise<PolicyFetchResult>;
}

export interface VerifiedPolicy {
  readonly subjectId: string;
  /** The record's head; 0 when the subject has no policy. */
  readonly head: number;
  /** The policy-owner partner (from the record); undefined when there is no record. */
  readonly partnerId: string | undefined;
  /** Which principals the subject admits; undefined when there is no record (nobody is admitted). */
  readonly identity?: SubjectIdentity | undefined;
  /** What the decision engine gets: a verified document, or why there is none. */
  readonly load: PolicyLoad;
  /** When the authority last confirmed this head (epoch ms). */
  readonly verifiedAt: number;
  /**
   * Read from a sealed Redis entry: its head and age are only what Redis says, so it is never
   * the base of a conditional revalidation (a replayed older genuine policy with the current
   * head would otherwise be confirmed by a 304); the next revalidation fetches in full.
   */
  readonly fromRedis?: true;
  /**
   * The facts of the signed policy this was verified from; absent for a deny. The signed text
   * itself is not kept: it is sealed into Redis when verified, and read from there again.
   */
  readonly signed?: {
    readonly cryptoVersion: CryptoVersion;
    readonly documentHash: string;
    readonly revokedMarker: string | null;
  };
}

export interface PolicyLookup {
  readonly policy: VerifiedPolicy;
  readonly layer: CacheLayer;
}

export interface PolicyCacheEvents {
  lookup?(layer: CacheLayer, hit: boolean): void;
  verificationFailure?(layer: "redis" | "authority"): void;
  /**
   * `view`: the head came from the synced head view (no Redis round trip); `ok`: read from
   * Redis; `error`: Redis could not be read; `stale_used`: then a recently confirmed entry
   * was used within the staleness bound.
   */
  headRead?(result: "view" | "ok" | "error" | "stale_used"): void;
  /** A sealed entry written to Redis after a load, or dropped (the write-back queue was full), or failed. */
  writeBack?(result: WriteBackResult): void;
}

export interface VerifiedPolicyCacheOptions {
  readonly source: PolicyRecordFetcher;
  /** Verifies signed policies with public keys (createSignedPolicyVerifier). */
  readonly opener: PolicyOpener;
  readonly redis?: { readonly store: PolicyHeadStore; readonly keys: CacheKeys };
  /**
   * The authority's change log and the lease it grants (createAuthorityLease). Without it the
   * cache trusts Redis heads as before: only tests of the Redis layer leave it out.
   */
  readonly freshness?: FreshnessLease;
  /** Local cache size in subjects (`--policy-cache-max-entries`). */
  readonly localMaxEntries: number;
  /**
   * Local cache weight bound: estimated heap bytes of what the entries hold (policy-interning.ts;
   * an entry or snapshot shared by several subjects counts once; `--policy-cache-max-mib`) — so
   * a heap limit (`--max-old-space-size`) stays safe however large the policies. A policy
   * heavier than the bound is used but not kept.
   */
  readonly localMaxBytes: number;
  /**
   * Policy loads (Redis entry or authority fetch, then verification) run at once; more wait
   * their turn in order of arrival (default 8). A burst of new subjects is then answered in
   * order instead of every first Check finishing only when the whole burst is verified
   * (`--policy-load-concurrency`).
   */
  readonly loadConcurrency: number;
  /**
   * With Redis: characters of sealed entries waiting to be written after their Checks were
   * answered (a write-back holds its signed policy until then); past it, write-backs are
   * dropped and counted (default 16 MiB: ≈ 7 signed 500-operation policies).
   */
  readonly writeBackMaxChars?: number;
  /** Without Redis: how long an authority answer is used before revalidation (`--policy-ttl-ms`). */
  readonly ttlWithoutRedisMs: number;
  /** With Redis: how long a confirmed head still counts while Redis cannot be read (`--staleness-ms`). */
  readonly stalenessMs: number;
  /**
   * With Redis: the head view answers only while the store's last sync is at most this old
   * (default 300 ms, never more than `stalenessMs`). It bounds how late a change whose
   * message was lost can be noticed: past it, lookups read the head from Redis.
   */
  readonly viewMaxLagMs?: number;
  /** Entries older than this are revalidated with the authority whatever Redis says (`--policy-max-age-ms`). */
  readonly maxAgeMs: number;
  /** TTL of sealed entries in Redis (default 300000 ms). */
  readonly redisEntryTtlMs?: number;
  readonly now?: () => number;
  readonly events?: PolicyCacheEvents;
}

export interface VerifiedPolicyCache {
  get(subjectId: string): Promise<PolicyLookup>;
  /**
   * The lookup `get` would answer without any I/O — the local entry, its head confirmed by
   * the head view (with Redis) or within the TTL (without) — else undefined, and then
   * nothing happened: call `get`. Lets the decision path stay synchronous when all is cached.
   */
  peek(subjectId: string): PolicyLookup | undefined;
  evict(subjectId: string): void;
  readonly size: number;
  /** Estimated heap bytes the local entries hold, counted against `localMaxBytes`. */
  readonly bytes: number;
  /** Resolves when every queued write-back of a sealed entry to Redis was written or dropped. */
  writtenBack(): Promise<void>;
  close(): void;
}

type DenyLoad = "missing_policy" | "policy_verification_failed";

/** Evicted entries kept for the log (revokedByLog): a few, for a few seconds (a lease is 2 s by default). */
const SUPERSEDED_MAX = 256;
const SUPERSEDED_TTL_MS = 5_000;

/** A verified policy that denies as revoked (whatever head Redis reports, a later grant has a higher one). */
const isRevocation = (policy: VerifiedPolicy): boolean =>
  policy.load.ok && policy.load.document.revoked_at !== null;

/** Under policy loads that never pause, a sealed entry is still written back within about this long. */
const WRITE_BACK_MAX_DEFER_MS = 1000;

/** How long what the authority reported of a record is remembered (any fetch ends far sooner). */
const AUTHORITY_FACTS_TTL_MS = 60_000;

/** A record as the authority reported it: its head, its signed text, its revocation. */
interface RecordFacts {
  readonly head: number;
  readonly documentHash: string | null;
  readonly revokedAt: string | null;
}

function factsOf(policy: VerifiedPolicy): RecordFacts {
  return {
    head: policy.head,
    documentHash: policy.signed?.documentHash ?? null,
    revokedAt: policy.signed?.revokedMarker ?? null,
  };
}

/** Whether a policy is exactly the record the authority reported (never when it reported none). */
function sameFacts(facts: RecordFacts | undefined, policy: VerifiedPolicy): boolean {
  const own = factsOf(policy);
  return (
    facts !== undefined &&
    facts.documentHash !== null &&
    facts.head === own.head &&
    facts.documentHash === own.documentHash &&
    facts.revokedAt === own.revokedAt
  );
}

/** The longest a lookup waits for a lapsed freshness lease (its decision's deadline ends it sooner). */
const LEASE_WAIT_MS = 5000;

interface SealedPolicy {
  readonly v: 2;
  readonly subject_id: string;
  readonly head: number;
  readonly partner_id: string | null;
  readonly identity?: SubjectIdentity | null;
  readonly verified_at: number;
  readonly reason: DenyLoad | null;
  readonly signed_policy: string | null;
  readonly crypto_version: CryptoVersion | null;
  readonly document_hash: string | null;
  readonly revoked_marker: string | null;
}

/**
 * What a cached policy holds beside its document: the VerifiedPolicy and its load and facts
 * objects, and its entries in the side tables (heads confirmed, head view, authority facts).
 */
const ENTRY_OVERHEAD_BYTES = 1024;

/** base64 of a signed policy held as its blob: made when it is sealed, after the Check. */
const base64Of = (signed: string | Uint8Array): string =>
  typeof signed === "string"
    ? signed
    : Buffer.from(signed.buffer, signed.byteOffset, signed.byteLength).toString("base64");

/** The sealed entry's content, its signed policy still as given (base64Of when it is sealed). */
type Sealable = Omit<SealedPolicy, "signed_policy"> & { readonly signed_policy: string | Uint8Array | null };

function sealable(policy: VerifiedPolicy, blob: string | Uint8Array | undefined): Sealable | undefined {
  const signed = policy.load.ok ? policy.signed : undefined;
  // An allow without its signed policy cannot be checked again by the next reader: not cached.
  if (policy.load.ok && (signed === undefined || blob === undefined)) return undefined;
  return {
    v: 2,
    subject_id: policy.subjectId,
    head: policy.head,
    partner_id: policy.partnerId ?? null,
    identity: policy.identity ?? null,
    verified_at: policy.verifiedAt,
    reason: policy.load.ok ? null : policy.load.reason,
    signed_policy: signed === undefined ? null : (blob ?? null),
    crypto_version: signed?.cryptoVersion ?? null,
    document_hash: signed?.documentHash ?? null,
    revoked_marker: signed?.revokedMarker ?? null,
  };
}

/** Interns a verified document (its `apis` filed under the bytes it was parsed from and their hash). */
type Verified = (
  document: PolicyDocument,
  facts: Pick<PolicyRecordFacts, "revoked_at">,
  opened?: Pick<OpenedPolicyDocument, "apisHash" | "apisSection">,
) => PolicyLoad;

/**
 * A sealed entry's content, checked field by field and its signed policy verified again;
 * undefined when anything is off. A crypto fault (keys unreachable) is thrown.
 */
async function fromSealed(
  value: unknown,
  subjectId: string,
  opener: PolicyOpener,
  verified: Verified,
  validation: PolicyValidationOptions,
  held: Pick<OpenOptions, "heldPrefix">,
): Promise<VerifiedPolicy | undefined> {
  if (typeof value !== "object" || value === null) return undefined;
  const entry = value as Partial<SealedPolicy>;
  if (entry.v !== 2 || entry.subject_id !== subjectId) return undefined;
  if (typeof entry.head !== "number" || !Number.isSafeInteger(entry.head) || entry.head < 0) return undefined;
  if (typeof entry.verified_at !== "number" || !Number.isFinite(entry.verified_at)) return undefined;
  if (entry.partner_id !== null && typeof entry.partner_id !== "string") return undefined;
  const partnerId = entry.partner_id ?? undefined;
  // An entry of a subject without a valid identity (sealed by an older sidecar) is reloaded.
  const identity = isSubjectIdentity(entry.identity) ? entry.identity : undefined;
  if (partnerId !== undefined && identity === undefined) return undefined;
  if (entry.reason === "missing_policy" || entry.reason === "policy_verification_failed") {
    return {
      subjectId,
      head: entry.head,
      partnerId,
      identity,
      verifiedAt: entry.verified_at,
      load: { ok: false, reason: entry.reason },
    };
  }
  if (entry.reason !== null || partnerId === undefined) return undefined;
  const { signed_policy: blob, crypto_version: cryptoVersion, document_hash: documentHash } = entry;
  const marker = entry.revoked_marker;
  if (typeof blob !== "string" || typeof documentHash !== "string") return undefined;
  if (cryptoVersion !== "subject_credentials_v1" && cryptoVersion !== "platform_service_v2") return undefined;
  if (marker !== null && typeof marker !== "string") return undefined;
  try {
    const opened = await openPolicyDocument(
      blob,
      opener,
      { cryptoVersion, subjectId, partnerId },
      validation,
      held,
    );
    if (opened.documentHash !== documentHash) return undefined;
    return {
      subjectId,
      head: entry.head,
      partnerId,
      identity,
      verifiedAt: entry.verified_at,
      load: verified(opened.document, { revoked_at: marker }, opened),
      signed: { cryptoVersion, documentHash, revokedMarker: marker },
      fromRedis: true,
    };
  } catch (error) {
    if (error instanceof PolicyProtectionError && error.code === "policy_protection_unavailable") throw error;
    return undefined;
  }
}

/** A number in [0, 1) fixed per subject id (FNV-1a): spreads the revalidations of subjects. */
function spread(subjectId: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < subjectId.length; i++) h = Math.imul(h ^ subjectId.charCodeAt(i), 0x01000193) >>> 0;
  return h / 2 ** 32;
}

/** Runs at most `concurrency` tasks at once; the others start in order of arrival. `onIdle`: the last one ended. */
function createLoadQueue(concurrency: number, onIdle: () => void) {
  let running = 0;
  const waiting: Array<() => void> = [];
  return {
    get busy() {
      return running > 0;
    },
    async run<T>(task: () => Promise<T>): Promise<T> {
      if (running >= concurrency) await new Promise<void>((resolve) => waiting.push(resolve));
      else running++;
      try {
        return await task();
      } finally {
        const next = waiting.shift();
        if (next === undefined) {
          running--;
          if (running === 0) onIdle();
        } else next();
      }
    },
  };
}

export function createVerifiedPolicyCache(options: VerifiedPolicyCacheOptions): VerifiedPolicyCache {
  if (typeof options !== "object" || options === null)
    throw new PolicyCacheError("invalid_options", "options are required");
  const { source, opener, redis, events = {} } = options;
  if (typeof source?.fetchPolicy !== "function")
    throw new PolicyCacheError("invalid_options", "source.fetchPolicy is required");
  if (typeof opener?.open !== "function") throw new PolicyCacheError("invalid_options", "opener is required");
  const now = options.now ?? Date.now;
  // The sidecar's settings: their defaults are in its settings schema only (sidecar/config.ts).
  const ttlWithoutRedisMs = positiveCacheOption(options.ttlWithoutRedisMs, undefined, "ttlWithoutRedisMs");
  const stalenessMs = positiveCacheOption(options.stalenessMs, undefined, "stalenessMs");
  const maxAgeMs = positiveCacheOption(options.maxAgeMs, undefined, "maxAgeMs");
  const redisEntryTtlMs = positiveCacheOption(options.redisEntryTtlMs, 300_000, "redisEntryTtlMs");
  const max = positiveCacheOption(options.localMaxEntries, undefined, "localMaxEntries");
  const loadConcurrency = positiveCacheOption(options.loadConcurrency, undefined, "loadConcurrency");
  const writeBackMaxChars = positiveCacheOption(
    options.writeBackMaxChars,
    16 * 1024 * 1024,
    "writeBackMaxChars",
  );
  const viewMaxLagMs = Math.min(positiveCacheOption(options.viewMaxLagMs, 300, "viewMaxLagMs"), stalenessMs);

  const localMaxBytes = positiveCacheOption(options.localMaxBytes, undefined, "localMaxBytes");
  const interner: PolicyInterner = createPolicyInterner();
  /**
   * Sections and entries a verified document already had are not parsed or validated again
   * (policy-interning.ts): a section is found by the hash of its exact bytes only.
   */
  const validation: PolicyValidationOptions = {
    knownEntry: (entry) => interner.knownEntry(entry),
    knownApis: (hash) => interner.knownApis(hash),
    heldApis: (bytes) => interner.heldApis(bytes),
  };
  /** A held section's bytes spare the payload's SHA-512 of a signed policy that starts with them. */
  const held = { heldPrefix: (payload: Uint8Array) => interner.heldPrefix(payload) };
  /** What each verified document holds beside the entries it shares with other subjects. */
  const weights = new WeakMap<PolicyDocument, Weight>();
  /** A verified document, its entries shared with every other holder, revoked by the record's marker. */
  const verified: Verified = (document, facts, opened) => {
    const interned = interner.intern(document, opened?.apisHash, opened?.apisSection);
    const load = withRevocationMarker({ ok: true, document: interned.document }, facts);
    if (load.ok) weights.set(load.document, interned.weight);
    return load;
  };
  const weigh = (policy: VerifiedPolicy): Weight => {
    const document = policy.load.ok ? policy.load.document : undefined;
    const weight =
      document === undefined
        ? undefined
        : (weights.get(document) ?? { ownBytes: heapBytes(document), shared: [] });
    return {
      ownBytes: ENTRY_OVERHEAD_BYTES + heapBytes(policy.subjectId) + (weight?.ownBytes ?? 0),
      shared: weight?.shared ?? [],
    };
  };
  // W-TinyLFU (admission-cache.ts): a working set larger than the cache keeps a hit rate.
  const local = createAdmissionCache<string, VerifiedPolicy>({
    maxEntries: max,
    maxBytes: localMaxBytes,
    weigh,
  });
  /** The last head Redis confirmed per subject, and when: the staleness bound runs from `at`. */
  const confirmed = new LRUCache<string, { head: number; at: number }>(growingBound(max));
  /**
   * The head view: per subject, a head read from Redis in a subscription generation, raised
   * by that generation's change messages. Only a read creates an entry (a message alone may
   * be a retried, older change); messages that arrive while the read is on its way are kept
   * in `viewReads` and applied to its answer.
   */
  const view = new LRUCache<string, { head: number; readonly generation: number }>(growingBound(max));
  const viewReads = new Map<string, { max: number; readonly generation: number }>();
  const headReads = new Map<string, Promise<number | null>>();
  // Hand-written, not lru-cache fetch(): a joiner accepts the shared reload only at the head it
  // expects, else starts its own; the layer answered (redis/authority) is per caller (decision 1801).
  const reloads = new Map<string, Promise<VerifiedPolicy>>();
  const revalidating = new Set<string>();
  // Sealed entries are written after the Check is answered, between loads (write-back-queue.ts).
  const writeBacks = createWriteBackQueue({
    maxPendingChars: writeBackMaxChars,
    busy: () => loads.busy,
    maxDeferMs: WRITE_BACK_MAX_DEFER_MS,
    onResult: (result) => events.writeBack?.(result),
  });
  const loads = createLoadQueue(loadConcurrency, () => writeBacks.idle());

  const freshness = options.freshness;
  /**
   * What the authority itself reported lately per subject (its change log, its answers): the
   * head, signed text and revocation of the current record. Only these confirm a Redis entry,
   * and the head is the floor of any answer that arrives later. Kept for a minute (far longer
   * than a fetch may take). What was dropped before that is counted, so that a fetch that
   * spanned the loss is not trusted: a reset (everything) in `resets`, the bound evicting the
   * facts of a subject whose fetch is on its way in `lost` — only that subject's: what was
   * known of other subjects says nothing about its answer, and with more subjects than the
   * bound, evictions happen during every burst of loads.
   */
  const authorityFacts = new LRUCache<string, RecordFacts>({
    ...growingBound(max),
    ttl: AUTHORITY_FACTS_TTL_MS,
    dispose: (_facts, subjectId, reason) => {
      if (reason === "evict" && fetching.has(subjectId)) lost.set(subjectId, (lost.get(subjectId) ?? 0) + 1);
    },
  });
  let resets = 0;
  /** Fetches on their way per subject, and how often the subject's facts were evicted meanwhile. */
  const fetching = new Map<string, number>();
  const lost = new Map<string, number>();
  const lossMark = (subjectId: string): string => `${resets}:${lost.get(subjectId) ?? 0}`;
  const learn = (subjectId: string, facts: RecordFacts): void => {
    const known = authorityFacts.get(subjectId);
    if (known === undefined || facts.head > known.head) authorityFacts.set(subjectId, facts);
  };
  /**
   * Local entries a Redis change message evicted lately, until the log says what the change was
   * (revokedByLog). Only read for a logged change; never answers a lookup.
   */
  const superseded = new LRUCache<string, VerifiedPolicy>({ max: SUPERSEDED_MAX, ttl: SUPERSEDED_TTL_MS });
  /** Lookups waiting on a reload per subject, answered by a logged revocation (reloadOrLoggedRevocation). */
  const revocationWaiters = new Map<string, Set<(policy: VerifiedPolicy) => void>>();
  const unfollow = [
    freshness?.onChanges((changes) => {
      for (const change of changes) {
        learn(change.subject_id, {
          head: change.head,
          documentHash: change.document_hash,
          revokedAt: change.revoked_at,
        });
        const kept = superseded.get(change.subject_id);
        superseded.delete(change.subject_id);
        const entry = local.quiet(change.subject_id) ?? kept;
        if (entry === undefined || entry.head >= change.head) continue;
        const revoked = revokedByLog(entry, change);
        if (revoked === undefined) local.delete(change.subject_id);
        else {
          local.set(change.subject_id, revoked);
          raiseView(change.subject_id, change.head);
          for (const answer of revocationWaiters.get(change.subject_id) ?? []) answer(revoked);
        }
      }
    }),
    freshness?.onReset(() => {
      resets++;
      authorityFacts.clear();
      local.clear();
      superseded.clear();
    }),
  ];
  /**
   * A logged revocation of the very policy cached (or just evicted by a Redis message that
   * came first, `superseded`): the verified document with the revocation applied, at the
   * logged head — what the re-signed revoked policy decides, so every sidecar denies as soon
   * as the log reaches it instead of after one more fetch and verification (decision 2731). The log is the authority's own word, and honouring a revocation can only
   * deny (as the record's deny-only marker, withRevocationMarker); the entry keeps no signed
   * facts, so it is never sealed into Redis nor confirms a Redis entry, and any later head
   * (a new grant) replaces it. Anything else a change says still evicts.
   */
  const revokedByLog = (entry: VerifiedPolicy, change: PolicyChange): VerifiedPolicy | undefined => {
    // Heads go up by one per stored change: head + 1 is the revocation of exactly this policy.
    if (
      !entry.load.ok ||
      change.head !== entry.head + 1 ||
      typeof change.revoked_at !== "string" ||
      change.document_hash === null
    ) {
      return undefined;
    }
    const { signed: _signed, ...kept } = entry;
    return {
      ...kept,
      head: change.head,
      verifiedAt: now(),
      load: verified(entry.load.document, { revoked_at: change.revoked_at }),
    };
  };
  const assertFresh = (): void => {
    if (freshness !== undefined && !freshness.current()) {
      throw new PolicyCacheError(
        "freshness_unavailable",
        "the authority's policy change log has not been confirmed within the staleness bound",
      );
    }
  };
  /** A lapsed lease is waited for (the next renewal; the decision's deadline bounds the wait). */
  const awaitFresh = async (): Promise<void> => {
    if (freshness !== undefined && !freshness.current()) await freshness.whenCurrent(LEASE_WAIT_MS);
    assertFresh();
  };

  const unsubscribe = redis?.store.onChange((change) => {
    const subjectId = change.subject_id;
    const previous = confirmed.get(subjectId);
    if (previous === undefined || change.head >= previous.head) {
      confirmed.set(subjectId, { head: change.head, at: now() });
    }
    const generation = redis.store.subscribedGeneration();
    const known = view.get(subjectId);
    if (known !== undefined) {
      if (known.generation !== generation) view.delete(subjectId);
      else if (change.head > known.head) known.head = change.head;
    }
    const reading = viewReads.get(subjectId);
    if (reading !== undefined && change.head > reading.max) reading.max = change.head;
    // A newer head makes the local entry useless, also inside the staleness window.
    const entry = local.quiet(subjectId);
    if (entry !== undefined && change.head > entry.head) {
      local.delete(subjectId);
      // Kept aside for the log: Redis usually announces a revocation before the log reaches us.
      superseded.set(subjectId, entry);
    }
  });

  /** The subject's head from the view, when the view is in sync and knows it; else undefined. */
  const viewHead = (subjectId: string): number | undefined => {
    const store = redis?.store;
    const known = view.get(subjectId);
    if (store === undefined || known === undefined) return undefined;
    if (store.subscribedGeneration() !== known.generation) return undefined;
    return store.syncedWithin(known.generation, viewMaxLagMs) ? known.head : undefined;
  };

  /** A head learned from the authority (trusted) raises the view: the local entry must match it. */
  const raiseView = (subjectId: string, head: number): void => {
    const known = view.get(subjectId);
    if (known !== undefined && head > known.head) known.head = head;
  };

  const readHeadShared = (subjectId: string): Promise<number | null> => {
    const store = redis?.store;
    if (store === undefined) return Promise.resolve(null);
    let read = headReads.get(subjectId);
    if (read === undefined) {
      const generation = store.subscribedGeneration();
      const seed = generation === undefined ? undefined : { max: -1, generation };
      if (seed !== undefined) viewReads.set(subjectId, seed);
      read = store.readHead(subjectId).then(
        (head) => {
          if (seed === undefined || viewReads.get(subjectId) !== seed) return head;
          viewReads.delete(subjectId);
          if (head === null) return head;
          // A change announced while the read was on its way may be newer than its answer.
          const current = Math.max(head, seed.max);
          if (store.subscribedGeneration() === seed.generation) {
            view.set(subjectId, { head: current, generation: seed.generation });
          }
          return current;
        },
        (error: unknown) => {
          if (viewReads.get(subjectId) === seed) viewReads.delete(subjectId);
          throw error;
        },
      );
      read = read.finally(() => headReads.delete(subjectId));
      headReads.set(subjectId, read);
    }
    return read;
  };

  /** When the subject's head was last confirmed: a read, a change message, or a sync covering its view entry. */
  const confirmedAt = (subjectId: string, head: number, at: number): boolean => {
    const last = confirmed.get(subjectId);
    if (last !== undefined && last.head === head && at - last.at <= stalenessMs) return true;
    const known = view.get(subjectId);
    return (
      known !== undefined &&
      known.head === head &&
      redis?.store.syncedWithin(known.generation, stalenessMs) === true
    );
  };

  const openRecord = async (
    record: PolicyRecordFacts,
    signedPolicy: string | Uint8Array | null,
    partnerId: string,
    identity: SubjectIdentity,
    subjectId: string,
    at: number,
  ): Promise<VerifiedPolicy> => {
    const base = { subjectId, head: record.head, partnerId, identity, verifiedAt: at };
    const refused = (): VerifiedPolicy => {
      events.verificationFailure?.("authority");
      return { ...base, load: { ok: false, reason: "policy_verification_failed" } };
    };
    // A record filed under another subject or partner is not this subject's policy.
    if (record.subject_id !== subjectId || record.partner_id !== partnerId) return refused();
    if (signedPolicy === null) return refused();
    try {
      const opened = await openPolicyDocument(
        signedPolicy,
        opener,
        { cryptoVersion: record.crypto_version, subjectId: record.subject_id, partnerId },
        validation,
        held,
      );
      // The record's facts (head, revocation, expiry) must describe exactly the signed text.
      if (opened.documentHash !== record.document_hash) return refused();
      // A revocation written while the crypto service was down is a deny-only marker.
      return {
        ...base,
        load: verified(opened.document, record, opened),
        signed: {
          cryptoVersion: record.crypto_version,
          documentHash: record.document_hash,
          revokedMarker: typeof record.revoked_at === "string" ? record.revoked_at : null,
        },
      };
    } catch (error) {
      if (error instanceof PolicyProtectionError && error.code === "policy_protection_unavailable") {
        throw new PolicyCacheError("source_unavailable", "policy protection is unavailable", {
          cause: error,
        });
      }
      return refused();
    }
  };

  /**
   * `blob`: the signed policy just verified, sealed into Redis and not kept (absent: only the
   * head). The head is raised before the Check is answered, as ever; the sealed entry is
   * written after it (writeBacks): best effort, a lost write only costs another sidecar a fetch.
   */
  const store = async (policy: VerifiedPolicy, blob?: string | Uint8Array): Promise<void> => {
    local.set(policy.subjectId, policy);
    if (redis === undefined) return;
    raiseView(policy.subjectId, policy.head);
    const content = sealable(policy, blob);
    if (content !== undefined) writeBackLater(redis, policy, content);
    await redis.store.raiseHead(policy.subjectId, policy.head).catch(() => undefined);
  };

  const writeBackLater = (
    target: NonNullable<VerifiedPolicyCacheOptions["redis"]>,
    policy: VerifiedPolicy,
    content: Sealable,
  ): void => {
    const { subjectId, head } = policy;
    const signed = content.signed_policy;
    const signedChars =
      signed === null ? 0 : typeof signed === "string" ? signed.length : Math.ceil(signed.length / 3) * 4;
    writeBacks.add(subjectId, {
      chars: ENTRY_OVERHEAD_BYTES + signedChars,
      run: async () => {
        // Superseded while it waited: the newer policy's own write-back (or a reload) covers it.
        const current = local.quiet(subjectId)?.head ?? viewHead(subjectId);
        if (current !== undefined && current > head) return false;
        const sealed = sealEntry(target.keys, policyEntryName(subjectId), {
          ...content,
          signed_policy: signed === null ? null : base64Of(signed),
        } satisfies SealedPolicy);
        await target.store.putEntry(subjectId, sealed, redisEntryTtlMs);
        return true;
      },
    });
  };

  const fromRedis = async (subjectId: string, head: number): Promise<VerifiedPolicy | undefined> => {
    if (redis === undefined) return undefined;
    let text: string | null;
    try {
      text = await redis.store.getEntry(subjectId);
    } catch {
      return undefined;
    }
    if (text === null) {
      events.lookup?.("redis", false);
      return undefined;
    }
    const opened = openEntry(redis.keys, policyEntryName(subjectId), text);
    let policy: VerifiedPolicy | undefined;
    try {
      policy = opened.ok
        ? await fromSealed(opened.value, subjectId, opener, verified, validation, held)
        : undefined;
    } catch {
      // Keys cannot be fetched now: the authority path decides (and fails closed) instead.
      events.lookup?.("redis", false);
      return undefined;
    }
    if (policy === undefined) {
      // Tampered, truncated or foreign: never used; the authority's artifact decides.
      events.verificationFailure?.("redis");
      events.lookup?.("redis", false);
      return undefined;
    }
    if (policy.head !== head || now() - policy.verifiedAt > maxAgeMs) {
      events.lookup?.("redis", false);
      return undefined;
    }
    if (freshness !== undefined && policy.load.ok && !sameFacts(authorityFacts.get(subjectId), policy)) {
      // Redis' head and entry agree, but the authority has not confirmed that this is its current
      // policy: a rolled-back pair (or an older genuine policy relabelled by a holder of the cache
      // key) would agree too. The authority decides.
      events.lookup?.("redis", false);
      return undefined;
    }
    events.lookup?.("redis", true);
    local.set(subjectId, policy);
    return policy;
  };

  const fromAuthority = async (
    subjectId: string,
    head: number | null,
    known: VerifiedPolicy | undefined,
  ): Promise<VerifiedPolicy> => {
    const at = now();
    const conditional =
      known !== undefined && known.fromRedis !== true && (head === null || known.head === head)
        ? known
        : undefined;
    const lostBefore = lossMark(subjectId);
    fetching.set(subjectId, (fetching.get(subjectId) ?? 0) + 1);
    try {
      return await fetchAndStore(subjectId, head, conditional, at, lostBefore);
    } finally {
      const others = (fetching.get(subjectId) ?? 1) - 1;
      if (others === 0) {
        fetching.delete(subjectId);
        lost.delete(subjectId);
      } else fetching.set(subjectId, others);
    }
  };

  const fetchAndStore = async (
    subjectId: string,
    head: number | null,
    conditional: VerifiedPolicy | undefined,
    at: number,
    lostBefore: string,
  ): Promise<VerifiedPolicy> => {
    let result: PolicyFetchResult;
    try {
      result = await source.fetchPolicy(
        subjectId,
        conditional === undefined ? {} : { knownHead: conditional.head },
      );
    } catch (error) {
      if (error instanceof PolicyCacheError) throw error;
      throw new PolicyCacheError("source_unavailable", "the authority service could not be asked", {
        cause: error,
      });
    }
    let policy: VerifiedPolicy;
    if (result.status === "not_modified") {
      if (conditional === undefined)
        throw new PolicyCacheError("source_unavailable", "unexpected not-modified answer");
      events.lookup?.("authority", true);
      policy = { ...conditional, verifiedAt: at };
    } else if (result.status === "not_found") {
      events.lookup?.("authority", false);
      policy = {
        subjectId,
        head: 0,
        partnerId: undefined,
        verifiedAt: at,
        load: { ok: false, reason: "missing_policy" },
      };
    } else {
      events.lookup?.("authority", true);
      policy = await openRecord(
        result.record,
        result.signedPolicy,
        result.partnerId,
        result.identity,
        subjectId,
        at,
      );
    }
    if (head !== null && policy.head < head) {
      // Redis knows a newer policy than the authority returned: do not decide on the older one.
      throw new PolicyCacheError(
        "source_inconsistent",
        "the authority returned an older policy than published",
      );
    }
    if (freshness !== undefined && policy.load.ok) {
      // An answer read before a change the log has since delivered (it was on its way meanwhile).
      const logged = authorityFacts.get(subjectId);
      const unknowable = logged === undefined && lossMark(subjectId) !== lostBefore;
      if (unknowable || (logged !== undefined && policy.head < logged.head)) {
        throw new PolicyCacheError("source_inconsistent", "the authority's answer predates a logged change");
      }
    }
    if (policy.head > 0) learn(subjectId, factsOf(policy));
    // A 304 has no signed text: the head is raised, the sealed entry another load wrote stays.
    await store(policy, result.status === "found" ? (result.signedPolicy ?? undefined) : undefined);
    return policy;
  };

  /** Single flight per subject; a joined reload that ended on another head is redone once. */
  const reload = async (
    subjectId: string,
    head: number | null,
    known: VerifiedPolicy | undefined,
  ): Promise<PolicyLookup> => {
    const run = async (): Promise<PolicyLookup> => {
      // The signer's keys on their way beside the policy (Redis' or the authority's), not after it.
      opener.prefetchKeys?.(subjectId);
      // Under the freshness lease a sealed allow is used only when it is the record the
      // authority reported; with none reported yet for this subject (its first lookup in this
      // process), the authority is asked beside the Redis read, not after the entry's
      // verification (decision 2951). The entry is still opened and verified — a forged one is
      // still counted — and a sealed deny still answers.
      const early =
        head !== null && redis !== undefined && freshness !== undefined && !authorityFacts.has(subjectId)
          ? fromAuthority(subjectId, head, known)
          : undefined;
      early?.catch(() => undefined);
      const viaRedis = head === null ? undefined : await fromRedis(subjectId, head);
      if (viaRedis !== undefined) return { policy: viaRedis, layer: "redis" };
      return { policy: await (early ?? fromAuthority(subjectId, head, known)), layer: "authority" };
    };
    const inFlight = reloads.get(subjectId);
    if (inFlight !== undefined) {
      const joined = await inFlight;
      if (head === null || joined.head === head) return { policy: joined, layer: "authority" };
    }
    const started = loads.run(run);
    const shared = started.then((lookup) => lookup.policy);
    shared.catch(() => undefined);
    reloads.set(subjectId, shared);
    try {
      return await started;
    } finally {
      if (reloads.get(subjectId) === shared) reloads.delete(subjectId);
    }
  };

  /**
   * From half of maxAgeMs on — a point between 1/2 and 3/4 of it, fixed per subject, so that
   * subjects loaded together are not all revalidated together — the authority is asked in the
   * background when the entry is used; the entry serves meanwhile. An entry not used is not
   * revalidated: its next use past maxAgeMs reloads it.
   */
  const revalidateSoon = (entry: VerifiedPolicy, at: number): void => {
    const after = maxAgeMs * (0.5 + 0.25 * spread(entry.subjectId));
    if (at - entry.verifiedAt <= after || revalidating.has(entry.subjectId)) return;
    revalidating.add(entry.subjectId);
    fromAuthority(entry.subjectId, entry.head, entry)
      .catch(() => undefined)
      .finally(() => revalidating.delete(entry.subjectId));
  };

  const getWithRedis = async (subjectId: string): Promise<PolicyLookup> => {
    let head: number | null | undefined = viewHead(subjectId);
    if (head !== undefined) {
      events.headRead?.("view");
    } else {
      try {
        head = await readHeadShared(subjectId);
      } catch (error) {
        events.headRead?.("error");
        const at = now();
        const entry = local.get(subjectId);
        if (
          entry !== undefined &&
          confirmedAt(subjectId, entry.head, at) &&
          at - entry.verifiedAt <= maxAgeMs
        ) {
          events.headRead?.("stale_used");
          events.lookup?.("local", true);
          return { policy: entry, layer: "local" };
        }
        throw new PolicyCacheError("freshness_unavailable", "the policy head cannot be read", {
          cause: error,
        });
      }
      events.headRead?.("ok");
      if (head !== null) {
        const previous = confirmed.get(subjectId);
        if (previous === undefined || head >= previous.head) confirmed.set(subjectId, { head, at: now() });
      }
    }
    const at = now();
    const entry = local.get(subjectId);
    if (entry !== undefined && head !== null && entry.head === head && at - entry.verifiedAt <= maxAgeMs) {
      events.lookup?.("local", true);
      revalidateSoon(entry, at);
      return { policy: entry, layer: "local" };
    }
    if (entry !== undefined && head !== null && head < entry.head && isRevocation(entry)) {
      // Redis is behind a revocation the authority's log delivered: a deny needs no newer word.
      events.lookup?.("local", true);
      return { policy: entry, layer: "local" };
    }
    events.lookup?.("local", false);
    // A head below what this sidecar already verified is not believed: ask the authority.
    const trustedHead = entry !== undefined && head !== null && head < entry.head ? null : head;
    const lookup = await reloadOrLoggedRevocation(subjectId, trustedHead, entry);
    if (trustedHead === null) {
      confirmed.set(subjectId, { head: lookup.policy.head, at: lookup.policy.verifiedAt });
    }
    return lookup;
  };

  /**
   * The reload, unless the log applies a revocation of the subject first (revokedByLog): a
   * Check that started a fetch on a Redis message is then answered with it at once (the fetch
   * goes on and stores what the authority says).
   */
  const reloadOrLoggedRevocation = async (
    subjectId: string,
    head: number | null,
    known: VerifiedPolicy | undefined,
  ): Promise<PolicyLookup> => {
    if (freshness === undefined) return reload(subjectId, head, known);
    const waiters = revocationWaiters.get(subjectId) ?? new Set<(policy: VerifiedPolicy) => void>();
    revocationWaiters.set(subjectId, waiters);
    let answer: ((policy: VerifiedPolicy) => void) | undefined;
    const revoked = new Promise<PolicyLookup>((resolve) => {
      answer = (policy) => {
        if (head === null || policy.head >= head) resolve({ policy, layer: "local" });
      };
      waiters.add(answer);
    });
    const reloading = reload(subjectId, head, known);
    try {
      return await Promise.race([reloading, revoked]);
    } finally {
      reloading.catch(() => undefined);
      if (answer !== undefined) waiters.delete(answer);
      if (waiters.size === 0 && revocationWaiters.get(subjectId) === waiters)
        revocationWaiters.delete(subjectId);
    }
  };

  const peek = (subjectId: string): PolicyLookup | undefined => {
    if (freshness !== undefined && !freshness.current()) return undefined;
    const entry = local.get(subjectId);
    if (entry === undefined) return undefined;
    const at = now();
    if (redis === undefined) {
      if (at - entry.verifiedAt > ttlWithoutRedisMs) return undefined;
      events.lookup?.("local", true);
      return { policy: entry, layer: "local" };
    }
    if (viewHead(subjectId) !== entry.head || at - entry.verifiedAt > maxAgeMs) return undefined;
    events.headRead?.("view");
    events.lookup?.("local", true);
    revalidateSoon(entry, at);
    return { policy: entry, layer: "local" };
  };

  const getWithoutRedis = async (subjectId: string): Promise<PolicyLookup> => {
    const entry = local.get(subjectId);
    if (entry !== undefined && now() - entry.verifiedAt <= ttlWithoutRedisMs) {
      events.lookup?.("local", true);
      return { policy: entry, layer: "local" };
    }
    events.lookup?.("local", false);
    return reload(subjectId, null, entry);
  };

  /**
   * Only while the lease is current: waited for at the start, checked again at the end (a reload
   * may outlast it, and a renewal meanwhile may have superseded what the lookup found).
   */
  const getFresh = async (subjectId: string): Promise<PolicyLookup> => {
    await awaitFresh();
    const lookup = await (redis === undefined ? getWithoutRedis(subjectId) : getWithRedis(subjectId));
    assertFresh();
    return lookup;
  };

  return {
    get(subjectId) {
      if (typeof subjectId !== "string" || subjectId.length === 0) {
        return Promise.reject(new PolicyCacheError("invalid_options", "subject id is required"));
      }
      return getFresh(subjectId);
    },
    peek(subjectId) {
      return typeof subjectId === "string" && subjectId.length > 0 ? peek(subjectId) : undefined;
    },
    evict(subjectId) {
      local.delete(subjectId);
    },
    get size() {
      return local.size;
    },
    get bytes() {
      return local.bytes;
    },
    writtenBack: () => writeBacks.drained(),
    close() {
      writeBacks.clear();
      unsubscribe?.();
      for (const stop of unfollow) stop?.();
      authorityFacts.clear();
      local.clear();
      superseded.clear();
      confirmed.clear();
      view.clear();
    },
  };
}
