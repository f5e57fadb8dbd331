import { randomBytes } from "node:crypto";
import type { PolicyChange, PolicyChangesPage } from "../change-log.ts";
import { LEASE_MS_RANGE } from "../change-log.ts";
import { PolicyCacheError } from "./errors.ts";

/**
 * The sidecar's freshness lease (decision 2507): it follows the authority's policy change log
 * directly — never through Redis — and may decide from its cache only while its last answer
 * that reached the end of the log came for a request sent less than `lease_ms` ago (the
 * authority's setting). Every change logged before that request was sent has then reached
 * the listeners. A change that takes access away is answered by the authority only once every
 * sidecar has acknowledged it (its next read says it has applied it) or its lease ran out, so
 * once a revoke answered, no sidecar decides on a policy the revocation superseded, whatever
 * Redis does.
 *
 * The log is read continuously in the background: the authority holds a read with nothing new
 * (up to 45 % of a lease, at most 1 s) and answers it as soon as a change is logged, and the
 * next read, sent at once, is the acknowledgement. No decision waits for it; it is one small
 * request per sidecar (not per subject) at a time.
 *
 * Only while decisions use it: a sidecar no decision asked about its lease for a whole lease
 * (`IDLE_LEASES`) stops reading (an idle pod sends nothing and wakes for nothing), and
 * its lease lapses. The next decision starts reading again and waits for that answer — one
 * round trip — as at start; every change logged meanwhile comes with it (the cursor is kept).
 * Nothing is decided from a lapsed lease, so the pause never widens the staleness bound. A
 * started sidecar reads on until its first decision: readiness promises that one meets its
 * deadline.
 */

/** Where the log is read (the authority client). */
export interface PolicyChangeSource {
  fetchPolicyChanges(
    after: number | undefined,
    options: { readonly timeoutMs: number; readonly instance: string; readonly wait: boolean },
  ): Promise<PolicyChangesPage>;
}

/** What the verified-policy cache needs of the lease. */
export interface FreshnessLease {
  /** True while the last complete answer's request was sent less than its lease ago. */
  current(): boolean;
  /** Changes read from the log, in order, before the lease they belong to is extended. */
  onChanges(listener: (changes: readonly PolicyChange[]) => void): () => void;
  /** The log could not be followed (too far behind, or a replaced store): forget every policy. */
  onReset(listener: () => void): () => void;
  /**
   * Resolves true once the lease is current — at once when it is — or false after `timeoutMs`
   * (or on close). A decision that finds it lapsed waits for the next renewal, within its own
   * deadline: at start, and when the process was too busy to renew in time.
   */
  whenCurrent(timeoutMs: number): Promise<boolean>;
}

export interface AuthorityLease extends FreshnessLease {
  /** Like current(), without counting as a use (metrics, logs): it neither keeps nor restarts the reading. */
  held(): boolean;
  /** Starts following the log. */
  start(): void;
  /** Reads the log to its end now: resolves once every change logged before the call has reached the listeners. */
  sync(): Promise<void>;
  close(): void;
}

export interface AuthorityLeaseOptions {
  readonly source: PolicyChangeSource;
  /** Monotonic ms (default performance.now). */
  readonly now?: () => number;
  /** Told after each read (metrics, the failure's log line). */
  readonly onRenewal?: (result: "ok" | "error", error?: unknown) => void;
}

/** Before the first answer says how long a lease is. */
const FIRST_READ_TIMEOUT_MS = 2000;
/** Pages one renewal may read (a backlog longer than this is a reset on the authority's side). */
const MAX_PAGES = 20;
/** Between two reads that brought nothing (an authority that does not hold them). */
const MIN_IDLE_GAP_MS = 20;
/** Reading stops after this many leases without a decision asking (see the head of this file). */
export const IDLE_LEASES = 1;

function checkedPage(page: PolicyChangesPage): PolicyChangesPage {
  const leaseMs = page?.lease_ms;
  if (
    typeof page !== "object" ||
    page === null ||
    !Number.isSafeInteger(page.cursor) ||
    page.cursor < 0 ||
    !Array.isArray(page.changes) ||
    typeof page.complete !== "boolean" ||
    typeof page.reset !== "boolean" ||
    !Number.isSafeInteger(leaseMs) ||
    leaseMs < LEASE_MS_RANGE.min ||
    leaseMs > LEASE_MS_RANGE.max
  ) {
    throw new PolicyCacheError("source_unavailable", "the policy change log answer is malformed");
  }
  return page;
}

export function createAuthorityLease(options: AuthorityLeaseOptions): AuthorityLease {
  if (typeof options?.source?.fetchPolicyChanges !== "function") {
    throw new PolicyCacheError("invalid_options", "source.fetchPolicyChanges is required");
  }
  const { source } = options;
  const now = options.now ?? (() => performance.now());
  const instance = randomBytes(16).toString("base64url");
  const changeListeners = new Set<(changes: readonly PolicyChange[]) => void>();
  const resetListeners = new Set<() => void>();
  const waiters = new Set<(granted: boolean) => void>();
  let cursor: number | undefined;
  let leaseMs: number | undefined;
  let validUntil = Number.NEGATIVE_INFINITY;
  let timer: NodeJS.Timeout | undefined;
  let started = false;
  let closed = false;
  /** A read is on its way or scheduled; false before start and while paused. */
  let following = false;
  /** The last decision that asked; none yet: a started sidecar reads on until its first Check. */
  let lastUseAt: number | undefined;

  /**
   * Every listener hears it; if one fails, the renewal fails (after all were told): a change
   * that was not applied must not be covered by a lease. The next renewal reads it again.
   */
  const tell = <T extends unknown[]>(listeners: Set<(...args: T) => void>, ...args: T): void => {
    let failure: unknown;
    for (const listener of listeners) {
      try {
        listener(...args);
      } catch (error) {
        failure ??= error;
      }
    }
    if (failure !== undefined) {
      throw new PolicyCacheError("source_unavailable", "a policy change could not be applied", {
        cause: failure,
      });
    }
  };

  /**
   * Reads the log to its end; the lease then runs from when the last request was sent. A
   * read that brought changes is followed by one more at once: it acknowledges them.
   * Resolves whether the renewal brought changes.
   */
  const renew = async (wait: boolean): Promise<boolean> => {
    let brought = false;
    for (let pages = 0; pages < MAX_PAGES; pages++) {
      const sentAt = now();
      const lease = leaseMs;
      // A held read only while half the lease is left: otherwise the answer should come at once.
      const hold = wait && !brought && lease !== undefined && validUntil - sentAt >= lease / 2;
      const page = checkedPage(
        await source.fetchPolicyChanges(cursor, {
          instance,
          wait: hold,
          // An answer later than a lease could not renew it anyway.
          timeoutMs: lease ?? FIRST_READ_TIMEOUT_MS,
        }),
      );
      if (closed) return brought;
      if (page.reset || (cursor !== undefined && page.cursor < cursor)) {
        tell(resetListeners);
      } else if (page.changes.length > 0) {
        tell(changeListeners, page.changes);
      }
      const moved = cursor !== undefined && page.cursor !== cursor;
      cursor = page.cursor;
      leaseMs = page.lease_ms;
      brought ||= moved;
      if (page.complete) {
        validUntil = Math.max(validUntil, sentAt + page.lease_ms);
        for (const wake of [...waiters]) wake(true);
        if (!moved) return brought;
      }
    }
    throw new PolicyCacheError("source_unavailable", "the policy change log did not end");
  };

  /** One read at a time: two at once could move the cursor backwards. */
  let renewing: Promise<boolean> | undefined;
  const renewOnce = (wait: boolean): Promise<boolean> => {
    renewing ??= renew(wait).finally(() => {
      renewing = undefined;
    });
    return renewing;
  };

  const follow = (): void => {
    if (closed) return;
    following = true;
    const sentAt = now();
    renewOnce(true).then(
      (brought) => {
        options.onRenewal?.("ok");
        // A held read already waited: the next one leaves at once, without a timer's wake-up.
        later(brought || now() - sentAt >= MIN_IDLE_GAP_MS ? 0 : MIN_IDLE_GAP_MS);
      },
      (error: unknown) => {
        options.onRenewal?.("error", error);
        later(leaseMs === undefined ? 250 : Math.min(250, Math.floor(leaseMs / 4)));
      },
    );
  };

  function later(ms: number): void {
    if (closed || idle()) {
      following = false;
      return;
    }
    if (ms === 0) {
      follow();
      return;
    }
    timer = setTimeout(() => {
      timer = undefined;
      follow();
    }, ms);
    timer.unref();
  }

  const idle = (): boolean =>
    lastUseAt !== undefined && leaseMs !== undefined && now() - lastUseAt > IDLE_LEASES * leaseMs;
  const held = (): boolean => now() <= validUntil;
  /** Reading goes on (and starts again when it had paused). */
  const resume = (): void => {
    if (started && !following && !closed) follow();
  };
  /** A decision asks. */
  const current = (): boolean => {
    lastUseAt = now();
    resume();
    return held();
  };

  return {
    current,
    held,
    onChanges(listener) {
      changeListeners.add(listener);
      return () => changeListeners.delete(listener);
    },
    onReset(listener) {
      resetListeners.add(listener);
      return () => resetListeners.delete(listener);
    },
    start() {
      if (started || closed) return;
      started = true;
      follow();
    },
    async sync() {
      // A read already on its way may have read the log before the caller's moment.
      await renewing?.catch(() => undefined);
      await renewOnce(false);
    },
    whenCurrent(timeoutMs) {
      if (lastUseAt !== undefined) lastUseAt = now();
      resume();
      if (held()) return Promise.resolve(true);
      if (closed) return Promise.resolve(false);
      return new Promise<boolean>((resolve) => {
        const wake = (granted: boolean): void => {
          clearTimeout(deadline);
          waiters.delete(wake);
          resolve(granted);
        };
        const deadline = setTimeout(() => wake(false), timeoutMs);
        deadline.unref();
        waiters.add(wake);
      });
    },
    close() {
      closed = true;
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
      validUntil = Number.NEGATIVE_INFINITY;
      for (const wake of [...waiters]) wake(false);
    },
  };
}
