import { createHash, randomUUID } from "node:crypto";
import { AuthorityError } from "../errors.ts";
import { collections, logs } from "../store/model.ts";
import type { Store } from "../store/store.ts";

/**
 * The policy change log and the sidecars' freshness leases (docs/sidecar.md, "Freshness,
 * revocation and the staleness bound"; decision 2507).
 *
 * Every stored policy change is appended to the store's `policy_changes` log as
 * `{subject_id, partner_id, head, …}`, and to its partner's own log (`policy_changes.p-<hash>`).
 * Sidecars follow the log from the authority directly (`GET /v1/sidecar/policy-changes?after=<cursor>`,
 * never through Redis): a platform-wide sidecar the whole log, a partner-bound one its partner's
 * log — so its cursor counts only its partner's changes, and nothing it reads (cursor, held read
 * answered early) tells it how many changes other partners made. The two numberings are
 * disjoint (a partner's cursors start at `PARTNER_CURSOR_BASE`): a cursor from the other one is a
 * reset, never a position. An answer that reached the end of the log is a **lease** — for
 * `lease_ms` from the moment the sidecar sent that request it may decide from its cache, because
 * every change logged before then has reached it. A change that can take access away answers its
 * caller only once no lease that could have missed it is in force (`outlast`): every sidecar that
 * could enforce the changed partner's policies (bound to that partner, or platform-wide) and holds
 * a lease has read the log past the change (its next request says so: it is the acknowledgement),
 * or its lease ran out. Another partner's sidecars are not waited on: they never see the change.
 * So from that answer on no sidecar allows what the change removed, whatever Redis does (stalls,
 * restarts, lost messages, keys rolled back). No clock is compared between processes for
 * this: each side measures on its own monotonic clock from an event that precedes the other's.
 *
 * Only the sidecars that read the log from this process are known here. When another process
 * of the authority granted a lease lately (its mark in the store says so), `outlast` waits the
 * whole lease instead, whatever the partner.
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
  /**
   * The position this answer reached in the log the reader follows: the next request's `after`.
   * Opaque to the sidecar (it only sends it back): a platform-wide reader's counts every change,
   * a partner-bound reader's only its partner's, from `PARTNER_CURSOR_BASE`.
   */
  readonly cursor: number;
  /** The changes after `after` up to `cursor`, in log order (a partner-bound reader: its partner's only). */
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

/** Where one change was logged: the next changes a sidecar reads past it acknowledge it. */
export interface LoggedPosition {
  /** Its seq in the whole log (platform-wide readers). */
  readonly seq: number;
  /** Its seq in its partner's log (that partner's readers). */
  readonly partnerSeq: number;
}

/** One read of the log by a sidecar. */
export interface PolicyChangesRequest {
  /** The cursor the sidecar has applied every change up to; absent on its first read. */
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
/**
 * A partner-bound reader's cursor is this plus the seq in its partner's log: far above any seq
 * of the whole log, and below the route's 15 digits, so a cursor of one numbering is never read
 * as a position of the other (an authority upgraded while sidecars follow it, replicas of two
 * versions): it is a reset.
 */
export const PARTNER_CURSOR_BASE = 2 ** 40;
/** The lease bounds a setting may choose (ms). */
export const LEASE_MS_RANGE = { min: 200, max: 60_000 } as const;
/** The longest an answer is held for a change. */
const MAX_HOLD_MS = 1000;
/**
 * Sidecar processes tracked per partner (and platform-wide) per authority process; beyond, that
 * partner's changes wait a whole lease.
 */
const MAX_HOLDERS = 100_000;
/** The scope of platform-wide readers: they may enforce every partner's policies. */
const PLATFORM = "";
/**
 * Processes' wall clocks may differ by this much: only the "did another authority process grant
 * a lease lately" mark compares wall-clock times across processes, and it errs towards waiting.
 */
const CLOCK_SKEW_ALLOWANCE_MS = 1000;

/**
 * A partner's own log. Store log names are lowercase and short, partner ids are neither: the
 * name is a digest (160 bits: two partners never share a log), and each entry keeps its
 * `partner_id`, checked when read.
 */
export function partnerLogName(partnerId: string): string {
  return `${logs.policyChanges}.p-${createHash("sha256").update(partnerId).digest("hex").slice(0, 40)}`;
}

/**
 * Appends one change to the whole log and to its partner's; resolves to where. The caller must
 * not report the change in force when this throws (repeating the call logs it again).
 */
export async function appendPolicyChange(store: Store, change: LoggedChange): Promise<LoggedPosition> {
  const entry: LoggedChange = {
    subject_id: change.subject_id,
    partner_id: change.partner_id,
    head: change.head,
    document_hash: change.document_hash,
    revoked_at: change.revoked_at,
  };
  try {
    // One transaction where the store offers it: a revocation waits for one commit, not two.
    if (store.appendAcross !== undefined) {
      const [seq, partnerSeq] = await store.appendAcross([
        { log: logs.policyChanges, value: entry },
        { log: partnerLogName(entry.partner_id), value: entry },
      ]);
      return { seq: seq as number, partnerSeq: partnerSeq as number };
    }
    const seq = await store.append(logs.policyChanges, entry);
    return { seq, partnerSeq: await store.append(partnerLogName(entry.partner_id), entry) };
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

/** The map's value for `key`, made and stored first when there is none. */
function entryOf<K, V>(map: Map<K, V>, key: K, make: () => V): V {
  const found = map.get(key);
  if (found !== undefined) return found;
  const made = make();
  map.set(key, made);
  return made;
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
  /** A change of `partnerId` was logged: answers the reads held for one that can see it. */
  logged(partnerId: string): void;
  /**
   * Resolves once no lease that could have missed the change of `partnerId` logged at
   * `position` is in force: every sidecar that read the log here and sees that partner's changes
   * (bound to it, or platform-wide) has acknowledged it or its lease ran out — or, when another
   * authority process granted leases lately (or such a sidecar read without an instance id),
   * once a whole lease has passed since this call. At once when no such sidecar holds one.
   */
  outlast(position: LoggedPosition, partnerId: string): Promise<void>;
  /** Answers the held reads (shutdown). */
  close(): void;
}

interface Holder {
  /** Every change up to this cursor has reached the sidecar (-1: it has acknowledged nothing yet). */
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
  /** Per scope (a partner id, or PLATFORM): the sidecars that read the log here. */
  const holders = new Map<string, Map<string, Holder>>();
  let reads = 0;
  /** Per scope: leases that nobody acknowledges (no instance id, or too many holders) end before this. */
  const untrackedUntil = new Map<string, number>();
  /** Per scope: reads held for a change, told when one they can see is logged. */
  const heldReads = new Map<string, Set<() => void>>();
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

  const scopeOf = (partnerId: string | undefined): string => partnerId ?? PLATFORM;
  /** The scopes whose sidecars may enforce a partner's policies: its own, and the platform-wide. */
  const enforcing = (partnerId: string): readonly string[] => [partnerId, PLATFORM];
  const sweep = (now: number): void => {
    for (const [scope, scoped] of holders) {
      for (const [key, holder] of scoped) if (holder.expiresAt <= now) scoped.delete(key);
      if (scoped.size === 0) holders.delete(scope);
    }
  };

  /**
   * Registers the read as its sidecar's lease (before the log is read: the lease runs from
   * before it). Returns its holder entry, to take the acknowledgement once the log showed that
   * `after` is a position in it; undefined when the lease cannot be acknowledged.
   */
  const track = (request: PolicyChangesRequest, now: number): Holder | undefined => {
    const scope = scopeOf(request.partnerId);
    const expiresAt = now + leaseMs;
    const untracked = (): undefined => {
      untrackedUntil.set(scope, Math.max(expiresAt, untrackedUntil.get(scope) ?? expiresAt));
      return undefined;
    };
    if (request.instance === undefined) return untracked();
    if (++reads % 1024 === 0) sweep(now);
    const scoped = entryOf(holders, scope, () => new Map<string, Holder>());
    const key = `${request.principal}\u0000${request.instance}`;
    const holder = scoped.get(key);
    if (holder === undefined && scoped.size >= MAX_HOLDERS) return untracked();
    const tracked = holder ?? { acknowledged: -1, expiresAt };
    tracked.expiresAt = expiresAt;
    scoped.set(key, tracked);
    return tracked;
  };

  /** The sidecar applied every change up to `cursor`, a position of the log it reads (or -1 after a reset). */
  const acknowledge = (holder: Holder | undefined, cursor: number): void => {
    if (holder === undefined) return;
    holder.acknowledged = cursor < 0 ? -1 : Math.max(holder.acknowledged, cursor);
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
      const holder = track(request, monotonic());
      const { after, partnerId } = request;
      // The log this reader follows, and where its cursors start.
      const log = partnerId === undefined ? logs.policyChanges : partnerLogName(partnerId);
      const base = partnerId === undefined ? 0 : PARTNER_CURSOR_BASE;
      let length = await store.logLength(log);
      if (after === undefined) return page(base + length, [], true, false);
      const position = after - base;
      if (position < 0 || position > length || length - position > POLICY_CHANGES_MAX_BEHIND) {
        acknowledge(holder, -1);
        return page(base + length, [], true, true);
      }
      // Acknowledged on arrival, also when the read is then held: a revocation waits for no hold.
      acknowledge(holder, after);
      if (request.wait && position === length && !closed) {
        const scope = scopeOf(partnerId);
        const held = entryOf(heldReads, scope, () => new Set<() => void>());
        await nextEvent(held, holdMs);
        if (held.size === 0 && heldReads.get(scope) === held) heldReads.delete(scope);
        length = await store.logLength(log);
      }
      const entries = await store.readLog<unknown>(log, { afterSeq: position, limit: POLICY_CHANGES_PAGE });
      const changes: PolicyChange[] = [];
      for (const { value } of entries) {
        if (!isLoggedChange(value)) continue;
        if (partnerId !== undefined && value.partner_id !== partnerId) continue;
        const { partner_id: _partner, ...change } = value;
        changes.push(change);
      }
      const cursor = base + (entries.at(-1)?.seq ?? position);
      return page(cursor, changes, entries.length < POLICY_CHANGES_PAGE, false);
    },

    logged(partnerId) {
      for (const scope of enforcing(partnerId)) {
        const held = heldReads.get(scope);
        if (held !== undefined) tell(held);
      }
    },

    async outlast(position, partnerId) {
      // Every lease that could have missed the change was granted before this call.
      const deadline = monotonic() + leaseMs;
      const scopes = enforcing(partnerId);
      const untracked = scopes.some(
        (scope) => monotonic() < (untrackedUntil.get(scope) ?? Number.NEGATIVE_INFINITY),
      );
      const wholeLease = untracked || (await othersMayHold());
      /** The change's cursor in each scope's numbering. */
      const logged = (scope: string): number =>
        scope === PLATFORM ? position.seq : PARTNER_CURSOR_BASE + position.partnerSeq;
      for (;;) {
        const now = monotonic();
        if (now >= deadline) return;
        let next = deadline;
        if (!wholeLease) {
          let waiting = false;
          for (const scope of scopes) {
            const cursor = logged(scope);
            for (const holder of holders.get(scope)?.values() ?? []) {
              if (holder.expiresAt <= now || holder.acknowledged >= cursor) continue;
              waiting = true;
              next = Math.min(next, holder.expiresAt);
            }
          }
          if (!waiting) return;
        }
        await nextEvent(ackWaiters, next - now);
      }
    },

    close() {
      closed = true;
      for (const held of heldReads.values()) tell(held);
    },
  };
}
