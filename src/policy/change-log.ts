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
 * it. A change that can take access away answers its caller only once every lease granted
 * before it was logged has run out (`outlast`), so from that answer on no sidecar can allow
 * what the change removed, whatever Redis does (stalls, restarts, lost messages, keys rolled
 * back). No clock is compared between processes: each side measures the lease on its own
 * monotonic clock from an event that precedes the other's.
 */

/** One logged change, as the sidecars read it. */
export interface PolicyChange {
  readonly subject_id: string;
  readonly head: number;
}

/** What the log stores per change. */
interface LoggedChange extends PolicyChange {
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

/** Changes in one answer. */
export const POLICY_CHANGES_PAGE = 1000;
/** A sidecar further behind than this starts over (reset) instead of reading the backlog. */
export const POLICY_CHANGES_MAX_BEHIND = 10_000;
/** The lease bounds a setting may choose (ms). */
export const LEASE_MS_RANGE = { min: 200, max: 60_000 } as const;

/** Appends one change; the caller must not report the change as in force when this throws. */
export async function appendPolicyChange(store: Store, change: LoggedChange): Promise<void> {
  const entry: LoggedChange = {
    subject_id: change.subject_id,
    partner_id: change.partner_id,
    head: change.head,
  };
  try {
    await store.append(logs.policyChanges, entry);
  } catch (error) {
    throw new AuthorityError(
      "upstream_unavailable",
      "The change is stored, but it could not be logged for the sidecars; repeat the call.",
      { cause: error },
    );
  }
}

function isLoggedChange(value: unknown): value is LoggedChange {
  if (typeof value !== "object" || value === null) return false;
  const { subject_id: subjectId, partner_id: partnerId, head } = value as Record<string, unknown>;
  return (
    typeof subjectId === "string" &&
    typeof partnerId === "string" &&
    typeof head === "number" &&
    Number.isSafeInteger(head) &&
    head >= 0
  );
}

export interface SidecarLeasesOptions {
  readonly store: Store;
  /** The staleness bound every sidecar keeps (the `sidecar-lease-ms` setting). */
  readonly leaseMs: number;
  /** Monotonic ms (default performance.now): measures the wait. */
  readonly monotonic?: () => number;
  /** Wall-clock ms (default Date.now): only for the shared "a lease was granted" mark. */
  readonly wallClock?: () => number;
  readonly sleep?: (ms: number) => Promise<void>;
}

export interface SidecarLeases {
  readonly leaseMs: number;
  /** One page of the change log for a sidecar (a partner-bound one sees only its partner's changes). */
  read(after: number | undefined, partnerId: string | undefined): Promise<PolicyChangesPage>;
  /**
   * Resolves once no lease granted before this call can still be in force: called once a
   * change is logged, it waits out every lease that could have missed the change. At once
   * when no sidecar was granted a lease lately (no sidecars: nothing to wait for).
   */
  outlast(): Promise<void>;
}

/**
 * Replicas' wall clocks may differ by this much: only the "was any lease granted lately"
 * shortcut compares wall-clock times across processes, and it errs towards waiting.
 */
const CLOCK_SKEW_ALLOWANCE_MS = 1000;
/** The mark that a lease was granted, shared by every replica through the store. */
const GRANT_MARK_ID = "granted";

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
  const sleep =
    options.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, Math.ceil(ms))));
  /** The mark is rewritten at most this often per process; a reader allows for it. */
  const markEveryMs = Math.floor(leaseMs / 4);
  let markedAt = Number.NEGATIVE_INFINITY;

  /** Before a lease is handed out, the store says one was: a change logged later waits for it. */
  const markGrant = async (): Promise<void> => {
    const at = wallClock();
    if (at - markedAt < markEveryMs) return;
    await store.put<GrantMark>(collections.sidecarLeases, GRANT_MARK_ID, { at });
    markedAt = at;
  };

  /** True unless the store shows that no lease was granted within a lease (and the allowances). */
  const leaseMayBeHeld = async (): Promise<boolean> => {
    let mark: GrantMark | undefined;
    try {
      mark = await store.get<GrantMark>(collections.sidecarLeases, GRANT_MARK_ID);
    } catch {
      return true;
    }
    if (mark === undefined) return false;
    if (typeof mark.at !== "number" || !Number.isFinite(mark.at)) return true;
    return wallClock() - mark.at <= leaseMs + markEveryMs + CLOCK_SKEW_ALLOWANCE_MS;
  };

  return {
    leaseMs,

    async read(after, partnerId) {
      await markGrant();
      const length = await store.logLength(logs.policyChanges);
      const page = (cursor: number, changes: PolicyChange[], complete: boolean, reset: boolean) => ({
        cursor,
        changes,
        complete,
        reset,
        lease_ms: leaseMs,
      });
      if (after === undefined) return page(length, [], true, false);
      if (after > length || length - after > POLICY_CHANGES_MAX_BEHIND) return page(length, [], true, true);
      const entries = await store.readLog<unknown>(logs.policyChanges, {
        afterSeq: after,
        limit: POLICY_CHANGES_PAGE,
      });
      const changes: PolicyChange[] = [];
      for (const { value } of entries) {
        if (!isLoggedChange(value)) continue;
        if (partnerId !== undefined && value.partner_id !== partnerId) continue;
        changes.push({ subject_id: value.subject_id, head: value.head });
      }
      const cursor = entries.at(-1)?.seq ?? after;
      return page(cursor, changes, entries.length < POLICY_CHANGES_PAGE, false);
    },

    async outlast() {
      // A lease runs from when its request was sent, before its log read, before this call.
      const calledAt = monotonic();
      if (!(await leaseMayBeHeld())) return;
      for (;;) {
        const left = calledAt + leaseMs - monotonic();
        if (left <= 0) return;
        await sleep(left);
      }
    },
  };
}
