/**
 * Idempotency-Key handling for binding invoke (docs/bindings.md, "Idempotency").
 *
 * The key is claimed atomically with `store.create` before anything runs, so of two
 * requests with one key — in this process or on two replicas — exactly one executes.
 * The other waits for the stored result (polling the store; joined directly in-process)
 * and gets the same answer; if the first is still running after `waitMs`, it gets 409.
 * The same key with a different request (body, binding or subject) is 422. Results are
 * kept for `ttlMs` (24 h); an in-progress claim expires after `leaseMs`, so a crashed
 * replica does not block the key for a day.
 *
 * Before the upstream may be contacted, `work` calls `sending()` and waits for it: the claim
 * becomes a `sending` record kept for `ttlMs`. A replica that dies after that point may have
 * executed the operation, so once the record's lease has passed a retry is refused with 409
 * `idempotency_outcome_unknown` instead of being run a second time (decision 2751). The work
 * may store it while it still prepares the call (invoke: while the envelope is signed); when
 * that preparation then fails, nothing was sent, and `unsent()` lets a fault release the key.
 *
 * A stored result is not a grant: before one is replayed, `recheck` runs the current
 * decision again (revocation, expiry, allowlist, mapping, subject, boundary); when it
 * refuses, its deny is the answer and the stored result stays unused (docs/bindings.md).
 */
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import type { Sha256Ref } from "../core/canonical-json.ts";
import { positiveIntegerOption } from "../core/positive-integer.ts";
import { AuthorityError } from "../errors.ts";
import {
  bindingCollections,
  bindingKeys,
  type IdempotencyRecord,
  type StoredResponse,
} from "../store/binding-model.ts";
import type { Store, StoreWrite } from "../store/store.ts";
import { sha256Ref } from "./derive.ts";

export const IDEMPOTENCY_HEADER = "idempotency-key";
/** Printable ASCII without spaces at the ends, 1–255 characters. */
const KEY_PATTERN = /^[\x21-\x7e](?:[\x20-\x7e]{0,253}[\x21-\x7e])?$/;

export interface IdempotencyOptions {
  readonly store: Store;
  /** How long a result is replayed (default 24 h). */
  readonly ttlMs?: number;
  /** How long an unfinished claim blocks the key (default 120 s; longer than any execution). */
  readonly leaseMs?: number;
  /** How long a duplicate waits for the first request's result before 409 (default 15 s). */
  readonly waitMs?: number;
  /** Store polling interval while waiting (default 25 ms). */
  readonly pollMs?: number;
  readonly now?: () => Date;
}

export interface IdempotentOutcome {
  readonly response: StoredResponse;
  /** True when this is a stored result, not a new execution. */
  readonly replayed: boolean;
}

/**
 * What `work` returns: the response, and whether it may be stored. A response that is
 * not kept (a fault before the upstream was contacted) releases the key for a retry.
 */
export interface WorkResult {
  readonly response: StoredResponse;
  readonly keep: boolean;
  /**
   * Records stored in one transaction with the kept result (the call's evidence): a
   * replayable result never exists without them. Not used when the result is not kept.
   */
  readonly writes?: readonly StoreWrite[];
}

export interface ReplayOptions {
  /**
   * Runs before a stored (or joined) result is handed to a duplicate: undefined when the
   * call is still allowed now, else the current refusal, answered instead (not stored).
   */
  readonly recheck?: () => Promise<StoredResponse | undefined>;
}

/**
 * The work of one key. It calls `sending()` (and waits for it) before the upstream may be
 * contacted; nothing before that point can have had an effect outside the authority. It calls
 * `unsent()` before it throws when the upstream was not contacted after all (what it prepared
 * after `sending()` failed): the fault then releases the key instead of marking its outcome
 * unknown. A result that is not kept releases the key in any case.
 */
export type IdempotentWork = (sending: () => Promise<void>, unsent: () => void) => Promise<WorkResult>;

export interface Idempotency {
  run(
    bindingId: string,
    key: string,
    requestHash: Sha256Ref,
    work: IdempotentWork,
    options?: ReplayOptions,
  ): Promise<IdempotentOutcome>;
}

/** The header's value, checked; throws `idempotency_key_required` or `invalid_request`. */
export function readIdempotencyKey(header: string | string[] | undefined): string {
  if (header === undefined || header === "") throw new AuthorityError("idempotency_key_required");
  if (typeof header !== "string" || !KEY_PATTERN.test(header)) {
    throw new AuthorityError("invalid_request", "Idempotency-Key must be 1-255 printable ASCII characters.");
  }
  return header;
}

const conflict = () => new AuthorityError("idempotency_conflict");
const inProgress = () =>
  new AuthorityError("conflict", "A request with this Idempotency-Key is still in progress; retry later.");
const outcomeUnknown = () => new AuthorityError("idempotency_outcome_unknown");
const claimLost = () =>
  new AuthorityError(
    "conflict",
    "This request's claim on the Idempotency-Key lapsed and another request holds the key; retry later.",
  );

export function createIdempotency(options: IdempotencyOptions): Idempotency {
  if (options?.store === undefined) throw new TypeError("store is required");
  const store = options.store;
  const ttlMs = positiveIntegerOption(options.ttlMs, 24 * 3600 * 1000, "ttlMs");
  const leaseMs = positiveIntegerOption(options.leaseMs, 120_000, "leaseMs");
  const waitMs = positiveIntegerOption(options.waitMs, 15_000, "waitMs");
  const pollMs = positiveIntegerOption(options.pollMs, 25, "pollMs");
  const now = options.now ?? (() => new Date());
  /** Claims this process holds: duplicates here join the promise instead of polling. */
  const local = new Map<string, { requestHash: Sha256Ref; done: Promise<IdempotentOutcome> }>();

  /** The `sending` record: kept as long as a result, its claimant alive until `leaseUntil`. */
  const sendingRecord = (requestHash: Sha256Ref, claim: string, leaseUntil: number): IdempotencyRecord => ({
    state: "sending",
    request_hash: requestHash,
    claim,
    created_at: now().toISOString(),
    lease_until: new Date(leaseUntil).toISOString(),
  });

  async function execute(id: string, requestHash: Sha256Ref, claim: string, work: IdempotentWork) {
    // Every write after the claim is fenced by its token: a replica that stalled past its lease
    // while another took the key over writes nothing and contacts nothing (decision 2991).
    const ours = { field: "claim", equals: claim };
    const release = () => store.deleteIfMatch(bindingCollections.idempotency, id, ours).catch(() => false);
    let sent = false;
    const sending = async () => {
      const record = sendingRecord(requestHash, claim, now().getTime() + leaseMs);
      if (!(await store.putIfMatch(bindingCollections.idempotency, id, record, ours, { ttlMs }))) {
        throw claimLost();
      }
      sent = true;
    };
    const unsent = () => {
      sent = false;
    };
    let result: WorkResult;
    try {
      result = await work(sending, unsent);
    } catch (error) {
      // A fault after the upstream may have been contacted: the outcome is unknown, at once.
      await (sent
        ? store.putIfMatch(bindingCollections.idempotency, id, sendingRecord(requestHash, claim, 0), ours, {
            ttlMs,
          })
        : release()
      ).catch(() => undefined);
      throw error;
    }
    if (!result.keep) {
      await release();
      return { response: result.response, replayed: false };
    }
    // A `sending` record of ours is never taken over (it lives as long as a result), so the
    // result replaces it unconditionally; a result kept without it is fenced by storing it first
    // (when the key was lost meanwhile, the result's records are still stored, on their own).
    if (!sent) {
      await sending().catch(async (error: unknown) => {
        if (result.writes !== undefined && result.writes.length > 0) await store.writeAll(result.writes);
        throw error;
      });
    }
    const record: IdempotencyRecord = {
      state: "completed",
      request_hash: requestHash,
      claim,
      created_at: now().toISOString(),
      response: result.response,
    };
    await store.writeAll([
      ...(result.writes ?? []),
      { op: "put", collection: bindingCollections.idempotency, id, value: record, ttlMs },
    ]);
    return { response: result.response, replayed: false };
  }

  /** A stored result for a duplicate, unless the current decision refuses it. */
  async function replay(stored: StoredResponse, replayOptions: ReplayOptions): Promise<IdempotentOutcome> {
    const refusal = await replayOptions.recheck?.();
    return refusal === undefined
      ? { response: stored, replayed: true }
      : { response: refusal, replayed: false };
  }

  async function claimOrWait(
    id: string,
    requestHash: Sha256Ref,
    work: IdempotentWork,
    replayOptions: ReplayOptions,
  ): Promise<IdempotentOutcome> {
    const deadline = Date.now() + waitMs;
    for (;;) {
      const joined = local.get(id);
      if (joined !== undefined) {
        if (joined.requestHash !== requestHash) throw conflict();
        const outcome = await joined.done;
        return replay(outcome.response, replayOptions);
      }
      const token = randomBytes(16).toString("base64url");
      const claim: IdempotencyRecord = {
        state: "in_progress",
        request_hash: requestHash,
        claim: token,
        created_at: now().toISOString(),
      };
      if (await store.create(bindingCollections.idempotency, id, claim, { ttlMs: leaseMs })) {
        const done = execute(id, requestHash, token, work);
        local.set(id, { requestHash, done });
        try {
          return await done;
        } finally {
          local.delete(id);
        }
      }
      const existing = await store.get<IdempotencyRecord>(bindingCollections.idempotency, id);
      if (existing !== undefined) {
        if (existing.request_hash !== requestHash) throw conflict();
        if (existing.state === "completed" && existing.response !== undefined) {
          return replay(existing.response, replayOptions);
        }
        // The claimant may have sent the call and is past its lease: taken as dead, its
        // outcome unknown. Running the call again could execute the operation twice.
        if (existing.state === "sending" && !(Date.parse(existing.lease_until ?? "") > now().getTime())) {
          throw outcomeUnknown();
        }
      }
      // Claimed elsewhere and still running (or released a moment ago): wait and look again.
      if (Date.now() >= deadline) throw inProgress();
      await sleep(pollMs);
    }
  }

  return {
    run(bindingId, key, requestHash, work, replayOptions = {}) {
      // The key is hashed: whatever characters it holds never reach a store id.
      const id = bindingKeys.idempotency(bindingId, sha256Ref(key).slice("sha256:".length));
      return claimOrWait(id, requestHash, work, replayOptions);
    },
  };
}
