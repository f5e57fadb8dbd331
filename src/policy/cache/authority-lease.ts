import type { PolicyChange, PolicyChangesPage } from "../change-log.ts";
import { LEASE_MS_RANGE } from "../change-log.ts";
import { PolicyCacheError } from "./errors.ts";

/**
 * The sidecar's freshness lease (decision 2507): it follows the authority's policy change log
 * directly — never through Redis — and may decide from its cache only while its last answer
 * that reached the end of the log came for a request sent less than `lease_ms` ago (the
 * authority's setting). Every change logged before that request was sent has then reached
 * the listeners; a change that takes access away is answered by the authority only once
 * every such lease granted before it was logged has run out. So once a revoke answered, no
 * sidecar decides on a policy the revocation superseded, whatever Redis does.
 *
 * The lease is renewed every quarter of `lease_ms` in the background: no decision waits for
 * it, and the renewal is one small request per sidecar (not per subject).
 */

/** Where the log is read (the authority client). */
export interface PolicyChangeSource {
  fetchPolicyChanges(
    after: number | undefined,
    options: { readonly timeoutMs: number },
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
   * Resolves true once a first lease was granted — at once when one was, current or not — or
   * false after `timeoutMs`: a decision at start waits for it, a later one never waits.
   */
  whenFirst(timeoutMs: number): Promise<boolean>;
}

export interface AuthorityLease extends FreshnessLease {
  /** Starts renewing (at once, then every quarter of the lease). */
  start(): void;
  /** Reads the log to its end now: resolves once every change logged before the call has reached the listeners. */
  sync(): Promise<void>;
  close(): void;
}

export interface AuthorityLeaseOptions {
  readonly source: PolicyChangeSource;
  /** Monotonic ms (default performance.now). */
  readonly now?: () => number;
  /** Told after each renewal attempt (metrics, the failure's log line). */
  readonly onRenewal?: (result: "ok" | "error", error?: unknown) => void;
}

/** Before the first answer says how long a lease is. */
const FIRST_RENEWAL_TIMEOUT_MS = 2000;
/** Pages one renewal may read (a backlog longer than this is a reset on the authority's side). */
const MAX_PAGES = 20;

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
  const changeListeners = new Set<(changes: readonly PolicyChange[]) => void>();
  const resetListeners = new Set<() => void>();
  const waiters = new Set<(current: boolean) => void>();
  let cursor: number | undefined;
  let leaseMs: number | undefined;
  let validUntil = Number.NEGATIVE_INFINITY;
  let timer: NodeJS.Timeout | undefined;
  let started = false;
  let closed = false;

  const tell = <T extends unknown[]>(listeners: Set<(...args: T) => void>, ...args: T): void => {
    for (const listener of listeners) {
      try {
        listener(...args);
      } catch {
        // One listener's failure must not stop the others.
      }
    }
  };

  /** Reads the log to its end; the lease then runs from when the last request was sent. */
  const renew = async (): Promise<void> => {
    for (let pages = 0; pages < MAX_PAGES; pages++) {
      const sentAt = now();
      const timeoutMs =
        leaseMs === undefined ? FIRST_RENEWAL_TIMEOUT_MS : Math.max(100, Math.floor(leaseMs / 2));
      const page = checkedPage(await source.fetchPolicyChanges(cursor, { timeoutMs }));
      if (closed) return;
      if (page.reset || (cursor !== undefined && page.cursor < cursor)) {
        tell(resetListeners);
      } else if (page.changes.length > 0) {
        tell(changeListeners, page.changes);
      }
      cursor = page.cursor;
      leaseMs = page.lease_ms;
      if (page.complete) {
        validUntil = Math.max(validUntil, sentAt + page.lease_ms);
        for (const wake of [...waiters]) wake(true);
        return;
      }
    }
    throw new PolicyCacheError("source_unavailable", "the policy change log did not end");
  };

  /** One renewal at a time: two reading the log at once could move the cursor backwards. */
  let renewing: Promise<void> | undefined;
  const renewOnce = (): Promise<void> => {
    renewing ??= renew().finally(() => {
      renewing = undefined;
    });
    return renewing;
  };

  const attempt = (): void => {
    renewOnce()
      .then(
        () => options.onRenewal?.("ok"),
        (error: unknown) => options.onRenewal?.("error", error),
      )
      .finally(schedule);
  };

  function schedule(): void {
    if (closed) return;
    const every = leaseMs === undefined ? 250 : Math.max(50, Math.floor(leaseMs / 4));
    timer = setTimeout(() => {
      timer = undefined;
      attempt();
    }, every);
    timer.unref();
  }

  const current = (): boolean => now() <= validUntil;

  return {
    current,
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
      attempt();
    },
    async sync() {
      // A renewal already on its way may have read the log before the caller's moment.
      await renewing?.catch(() => undefined);
      await renewOnce();
    },
    whenFirst(timeoutMs) {
      if (validUntil > Number.NEGATIVE_INFINITY) return Promise.resolve(true);
      if (closed) return Promise.resolve(false);
      return new Promise<boolean>((resolve) => {
        const wake = (isCurrent: boolean): void => {
          clearTimeout(deadline);
          waiters.delete(wake);
          resolve(isCurrent);
        };
        const deadline = setTimeout(() => {
          waiters.delete(wake);
          resolve(false);
        }, timeoutMs);
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
