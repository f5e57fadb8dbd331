/**
 * Bounds on what-if replays (docs/decisions/2861-bounded-replays.md): a dry
 * run reads and decides up to MAX_REPLAYED_RECORDS records, so one admin token sending them
 * back to back could keep a replica busy. A replica runs at most `perPartner` replays of one
 * partner and `total` replays in all; another is refused (429 `replay_busy` with
 * Retry-After), not queued.
 */
import { positiveIntegerOption } from "../core/positive-integer.ts";

/** Sent as Retry-After with `replay_busy`: a replay of the largest window takes about this long. */
export const REPLAY_RETRY_AFTER_SEC = 2;

export interface ReplaySlotLimits {
  readonly perPartner: number;
  readonly total: number;
}

export const DEFAULT_REPLAY_SLOTS: ReplaySlotLimits = { perPartner: 1, total: 2 };

export interface ReplaySlots {
  /** A slot of the partner and its release, or undefined when none is free. */
  acquire(partnerId: string): (() => void) | undefined;
}

export function createReplaySlots(limits: ReplaySlotLimits = DEFAULT_REPLAY_SLOTS): ReplaySlots {
  for (const [name, value] of Object.entries(limits)) {
    positiveIntegerOption(value, undefined, `replay slots: ${name}`, (message) => {
      throw new RangeError(message);
    });
  }
  const running = new Map<string, number>();
  let total = 0;
  return {
    acquire(partnerId) {
      const mine = running.get(partnerId) ?? 0;
      if (mine >= limits.perPartner || total >= limits.total) return undefined;
      running.set(partnerId, mine + 1);
      total++;
      let released = false;
      return () => {
        if (released) return;
        released = true;
        total--;
        const left = (running.get(partnerId) ?? 1) - 1;
        if (left === 0) running.delete(partnerId);
        else running.set(partnerId, left);
      };
    },
  };
}
