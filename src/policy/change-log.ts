import { randomUUID } from "node:crypto";
import { AuthorityError } from "../errors.ts";
import { collections, logs } from "../store/model.ts";
import type { Store } from "../store/store.ts";

/**
 * The policy change log and the sidecars' freshness leases (docs/sidecar.md, "Freshness,
 * revocation and the staleness bound"; decision 2507).
 *
 * Every stored policy change is appended to the store's `policy_changes` log as
 * `{subject_id, partner_id, head}`. Sidecars follow the log from the authority directly
 * (`GET /v1/sidecar/policy-changes?after=<seq>`, never through Redis): an answer that reached
 * the end of the log is a **lease** — for `lease_ms` from the moment the sidecar sent that
 * request it may decide from its cache, because every change logged before then has reached
 * it. A change that can take access away answers its caller only once no lease that could
 * have missed it is in force (`outlast`): every sidecar holding one has read the log past the
 * change (its next request says so: it is the acknowledgement), or its lease ran out. So from
 * that answer on no sidecar allows what the change removed, whatever Redis does (stalls,
 * restarts, lost messages, keys rolled back). No clock is compared between processes for
 * this: each side measures on its own monotonic clock from an event that precedes the other's.
 *
 * Only the sidecars that read the log from this process are known here. When another process
 * of the authority granted a lease lately (its mark in the store says so), `outlast` waits the
 * whole lease instead.
 */

/**
 * One logged change, as the sidecars read it: the record's new head, and what the signed text
 * and the revocation of that head are — so a sealed Redis entry is taken only when it is that
 * very policy, not an older genuine one relabelled by a holder of the cache key.
 */
export interface PolicyChange {
  readonly subject_id: string;
  readonly head: number;
  /** The record's `document_hash`; null when the record was removed. */
  readonly document_hash: string | null;
  /** The record's `revoked_at`. */
  readonly revoked_at: string | null;
}

/** What the log stores per change. */
export interface LoggedChange extends PolicyChange {
  readonly partner_id: string;
}

/** `GET /v1/sidecar/policy-changes` answers with this (the wire contract of both ends). */
export interface PolicyChangesPage {
  /** The last seq this answer covers: the next request's `after`. */
  readonly cursor: number;
  /** The changes after `after` up to `cursor`, in log order (another partner's left out). */
  readonly changes: readonly PolicyChange[];
  /** True when the answer reached the end of the log: only then is it a lease. */
  readonly complete: boolean;
  /**
   * True when `after` cannot be followed (too far behind, or ahead of the log: a store that
   * was replaced): the sidecar forgets every policy it holds and continues from `cursor`.
   */
  readonly reset: boolean;
  /** How long, from sending the request, a complete answer lets the sidecar decide from its cache. */
  readonly lease_ms: number;
}

/** One read of the log by a sidecar. */
export interface PolicyChangesRequest {
  /** The seq the sidecar has applied every change up to; absent on its first read. */
  readonly after: number | undefined;
  /** The sidecar process (random, per start), so its reads acknowledge changes. */
  readonly instance: string | undefined;
  /** Who asks (the token's subject): an instance id counts only for the principal that made it. */
  readonly principal: string;
  /** A partner-bound sidecar sees only its partner's changes. */
  readonly partnerId: string | undefined;
  /** The sidecar accepts an answer held until a change is logged (at most 45 % of a lease, ≤ 1 s). */
  readonly wait: boolean;
}

/** Changes in one answer. */
export const POLICY_CHANGES_PAGE = 1000;
/** A sidecar further behind than this starts over (reset) instead of reading the backlog. */
export const POLICY_CHANGES_MAX_BEHIND = 10_000;
/** The lease bounds a setting may choose (ms). */
export const LEASE_MS_RANGE = { min: 200, max: 60_000 } as const;
/** The longest an answer is held for a change. */
const MAX_HOLD_MS = 1000;
/** Sidecar processes tracked per authority process; beyond, every change waits a whole lease. */
const MAX_HOLDERS = 100_000;
/**
 * Processes' wall clocks may differ by this much: only the "did another authority process grant
 * a lease lately" mark compares wall-clock times across processes, and it errs towards waiting.
 */
const CLOCK_SKEW_ALLOWANCE_MS = 1000;

/** Appends one change; resolves to its seq. The caller must not report the change in force when this throws. */
export async function appendPolicyChange(store: Store, change: LoggedChange): Promise<number> {
  const entry: LoggedChange = {
    subject_id: change.subject_id,
    partner_id: change.partner_id,
    head: change.head,
    document_hash: change.document_hash,
    revoked_at: change.revoked_at,
  };
  try {
    return await store.append(logs.policyChanges, entry);
  } catch (error) {
    throw new AuthorityError(
      "upstream_unavailable",
      "The change is stored, but it could not be logged for the sidecars; repeat the call.",
      { cause: error },
    );
  }
}

const textOrNull = (value: unknown): value is string | null => value === null || typeof value === "string";

function isLoggedChange(value: unknown): value is LoggedChange {
  if (typeof value !== "object" || value === null) return false;
  const { subject_id: subjectId, partner_id: partnerId, head } = value as Record<string, unknown>;
  const { document_hash: documentHash, revoked_at: revokedAt } = value as Record<string, unknown>;
  return (
    typeof subjectId === "string" &&
    typeof partnerId === "string" &&
    typeof head === "number" &&
    Number.isSafeInteger(head) &&
    head >= 0 &&
    textOrNull(documentHash) &&
    textOrNull(revokedAt)
  );
}

export interface SidecarLeasesOptions {
  readonly store: Store;
  /** The staleness bound every sidecar keeps (the `sidecar-lease-ms` setting). */
  readonly leaseMs: number;
  /** Monotonic ms (default performance.now). */
  readonly monotonic?: () => number;
  /** Wall-clock ms (default Date.now): only for the mark other authority processes read. */
  readonly wallClock?: () => number;
}

export interface SidecarLeases {
  readonly leaseMs: number;
  /** One page of the change log for a sidecar; that read is also its acknowledgement of `after`. */
  read(request: PolicyChangesRequest): Promise<PolicyChangesPage>;
  /** A change was logged: answers the reads held for one. */
  logged(): void;
  /**
   * Resolves once no lease that could have missed the change logged at `seq` is in force:
   * every sidecar that read the log here has acknowledged it or its lease ran out — or, when
   * another authority process granted leases lately (or a sidecar read without an instance
   * id), once a whole lease has passed since this call. At once when no sidecar holds one.
   */
  outlast(seq: number): Promise<void>;
  /** Answers the held reads (shutdown). */
  close(): void;
}

interface Holder {
  /** Every change up to this seq has reached the sidecar (-1: it has read nothing yet). */
  acknowledged: number;
  /** Its lease, whenever it was granted, ends before this (monotonic ms). */
  expiresAt: number;
}

interface GrantMark {
  readonly at: number;
}

export function createSidecarLeases(options: SidecarLeasesOptions): SidecarLeases {
  const { store, leaseMs } = options;
  if (!Number.isSafeInteger(leaseMs) || leaseMs < LEASE_MS_RANGE.min || leaseMs > LEASE_MS_RANGE.max) {
    throw new RangeError(`leaseMs must be an integer from ${LEASE_MS_RANGE.min} to ${LEASE_MS_RANGE.max}`);
  }
  const monotonic = options.monotonic ?? (() => performance.now());
  const wallClock = options.wallClock ?? Date.now;
  // Two held reads in a row fit in one lease, with room for the answers to travel.
  const holdMs = Math.min(Math.floor(leaseMs * 0.45), MAX_HOLD_MS);
  /** This process's mark is rewritten at most this often; readers allow for it. */
  const markEveryMs = Math.floor(leaseMs / 4);
  const markTtlMs = leaseMs + markEveryMs + CLOCK_SKEW_ALLOWANCE_MS;
  const processId = randomUUID();
  let markedAt = Number.NEGATIVE_INFINITY;
  const holders = new Map<string, Holder>();
  let reads = 0;
  /** Leases that nobody acknowledges (no instance id, or too many holders) end before this. */
  let untrackedUntil = Number.NEGATIVE_INFINITY;
  /** Reads held for a change: told when one is logged. */
  const heldReads = new Set<() => void>();
  /** `outlast` calls: told when a sidecar acknowledged more. */
  const ackWaiters = new Set<() => void>();
  let closed = false;

  const tell = (listeners: Set<() => void>): void => {
    for (const listener of [...listeners]) listener();
  };

  /** Before a lease is handed out, the store says this process grants them (other processes wait for it). */
  const markGrant = async (): Promise<void> => {
    const at = wallClock();
    if (at - markedAt < markEveryMs) return;
    await store.put<GrantMark>(collections.sidecarLeases, processId, { at }, { ttlMs: markTtlMs });
    markedAt = at;
  };

  /** True unless the store shows that no other authority process granted a lease lately. */
  const othersMayHold = async (): Promise<boolean> => {
    try {
      const page = await store.list<GrantMark>(collections.sidecarLeases, { limit: 1000 });
      const now = wallClock();
      return (
        page.next !== undefined ||
        page.items.some(
          ({ id, value }) =>
            id !== processId && !(typeof value?.at === "number" && now - value.at > markTtlMs),
        )
      );
    } catch {
      return true;
    }
  };

  /** Registers the read as its sidecar's acknowledgement and lease (before the log is read). */
  const track = (request: PolicyChangesRequest, now: number): void => {
    const expiresAt = now + leaseMs;
    if (request.instance === undefined) {
      untrackedUntil = expiresAt;
      return;
    }
    if (++reads % 1024 === 0) {
      for (const [key, holder] of holders) if (holder.expiresAt <= now) holders.delete(key);
    }
    const key = `${request.principal}\u0000${request.instance}`;
    const holder = holders.get(key);
    if (holder === undefined && holders.size >= MAX_HOLDERS) {
      untrackedUntil = expiresAt;
      return;
    }
    const acknowledged = request.after ?? -1;
    holders.set(key, {
      acknowledged: Math.max(acknowledged, holder?.acknowledged ?? -1),
      expiresAt,
    });
    tell(ackWaiters);
  };

  /** Resolves when `listeners` are told, or after `ms`. */
  const nextEvent = (listeners: Set<() => void>, ms: number): Promise<void> =>
    new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        listeners.delete(done);
        resolve();
      };
      const timer = setTimeout(done, Math.max(1, Math.ceil(ms)));
      listeners.add(done);
    });

  const page = (cursor: number, changes: PolicyChange[], complete: boolean, reset: boolean) => ({
    cursor,
    changes,
    complete,
    reset,
    lease_ms: leaseMs,
  });

  return {
    leaseMs,

    async read(request) {
      await markGrant();
      track(request, monotonic());
      const { after, partnerId } = request;
      let length = await store.logLength(logs.policyChanges);
      if (after === undefined) return page(length, [], true, false);
      if (request.wait && after === length && !closed) {
        await nextEvent(heldReads, holdMs);
        length = await store.logLength(logs.policyChanges);
      }
      if (after > length || length - after > POLICY_CHANGES_MAX_BEHIND) return page(length, [], true, true);
      const entries = await store.readLog<unknown>(logs.policyChanges, {
        afterSeq: after,
        limit: POLICY_CHANGES_PAGE,
      });
      const changes: PolicyChange[] = [];
      for (const { value } of entries) {
        if (!isLoggedChange(value)) continue;
        if (partnerId !== undefined && value.partner_id !== partnerId) continue;
        const { partner_id: _partner, ...change } = value;
        changes.push(change);
      }
      const cursor = entries.at(-1)?.seq ?? after;
      return page(cursor, changes, entries.length < POLICY_CHANGES_PAGE, false);
    },

    logged() {
      tell(heldReads);
    },

    async outlast(seq) {
      // Every lease that could have missed the change was granted before this call.
      const deadline = monotonic() + leaseMs;
      const wholeLease = monotonic() < untrackedUntil || (await othersMayHold());
      for (;;) {
        const now = monotonic();
        if (now >= deadline) return;
        let next = deadline;
        if (!wholeLease) {
          let waiting = false;
          for (const holder of holders.values()) {
            if (holder.expiresAt <= now || holder.acknowledged >= seq) continue;
            waiting = true;
            next = Math.min(next, holder.expiresAt);
          }
          if (!waiting) return;
        }
        await nextEvent(ackWaiters, next - now);
      }
    },

    close() {
      closed = true;
      tell(heldReads);
    },
  };
}
