/**
 * Re-protection of every stored policy after a key rotation: each policy is opened and
 * signed + encrypted again under the current keys (writeReprotectedPolicy), one subject at a
 * time under its policy lock, and announced like any policy change. Resumable: after each
 * policy the last subject done is written to `maintenance/reprotect-policies`; a run starts
 * after it, and the checkpoint is removed when the whole collection is done. A policy that
 * does not open is counted and skipped (it denies anyway); the crypto service unavailable
 * stops the run (the checkpoint keeps its place). With `from`, the same run moves an embedded
 * store into custody: opened with the embedded key rings, protected by the crypto service.
 */
import { type PolicyOpener, PolicyProtectionError } from "../policy/protector.ts";
import type { StoredPolicyRecord } from "../policy/record.ts";
import { readPolicyRecord } from "../policy/record-store.ts";
import { collections } from "../store/model.ts";
import type { AdminDeps } from "./deps.ts";
import { withKeyLock } from "./key-lock.ts";
import { notifyPolicyChange, policyLockKey, writeReprotectedPolicy } from "./policy-writer.ts";

export const REPROTECT_CHECKPOINT = { collection: "maintenance", id: "reprotect-policies" } as const;

interface Checkpoint {
  readonly after: string;
  readonly reprotected: number;
  readonly unverifiable: number;
  readonly updated_at: string;
}

export interface ReprotectProgress {
  /** Policies re-protected so far, over every run since the checkpoint was made. */
  readonly reprotected: number;
  /** Policies that did not open (left as they are; they deny). */
  readonly unverifiable: number;
  /** Policies in the collection (at the start of this run). */
  readonly total: number;
  readonly lastSubject: string | undefined;
  /** True when every policy was handled and the checkpoint removed. */
  readonly finished: boolean;
}

export interface ReprotectOptions {
  /** Ignore a checkpoint and start from the first policy. */
  readonly restart?: boolean;
  /** Stop after this many policies in this run (the checkpoint keeps the place). */
  readonly maxPolicies?: number;
  readonly onProgress?: (progress: ReprotectProgress) => void;
  /**
   * Opens the stored policies with these keys instead of the current protector's: moving an
   * embedded installation into custody, the embedded key rings under its KEK open, the crypto
   * service protects (decision 2513).
   */
  readonly from?: PolicyOpener;
}

export async function reprotectPolicies(
  deps: AdminDeps,
  options: ReprotectOptions = {},
): Promise<ReprotectProgress> {
  const { collection, id } = REPROTECT_CHECKPOINT;
  const saved = options.restart === true ? undefined : await deps.store.get<Checkpoint>(collection, id);
  let after = saved?.after;
  let reprotected = saved?.reprotected ?? 0;
  let unverifiable = saved?.unverifiable ?? 0;
  const total = await deps.store.count(collections.policies);
  let handled = 0;
  const progress = (finished: boolean): ReprotectProgress => ({
    reprotected,
    unverifiable,
    total,
    lastSubject: after,
    finished,
  });
  for (;;) {
    const page = await deps.store.list<StoredPolicyRecord>(collections.policies, {
      ...(after === undefined ? {} : { after }),
      limit: 100,
    });
    for (const item of page.items) {
      if (options.maxPolicies !== undefined && handled >= options.maxPolicies) return progress(false);
      const { subject_id: subjectId, partner_id: partnerId } = item.value;
      try {
        const written = await withKeyLock(policyLockKey(partnerId, subjectId), async () => {
          const current = await readPolicyRecord(deps.store, subjectId);
          return current === undefined ? undefined : writeReprotectedPolicy(deps, current, options.from);
        });
        if (written !== undefined) {
          reprotected++;
          // Same content under new keys: nothing is taken away.
          await notifyPolicyChange(deps, written, { narrows: false });
        }
      } catch (error) {
        if (!(error instanceof PolicyProtectionError) || error.code !== "policy_unverifiable") throw error;
        unverifiable++;
        deps.logger?.warn({ subject_id: subjectId }, "policy does not open; not re-protected");
      }
      handled++;
      after = item.id;
      const checkpoint: Checkpoint = {
        after,
        reprotected,
        unverifiable,
        updated_at: deps.now().toISOString(),
      };
      await deps.store.put(collection, id, checkpoint);
      options.onProgress?.(progress(false));
    }
    if (page.next === undefined) break;
  }
  await deps.store.delete(collection, id);
  const done = progress(true);
  options.onProgress?.(done);
  return done;
}
