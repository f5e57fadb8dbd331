/**
 * Warnings a peer can cause at will (a malformed or empty Check, a stalled request) must not
 * flood the log: one connection sending garbage would otherwise write a line per call. Each
 * kind of warning is written at most once per `intervalMs`; the next line written says how
 * many of that kind were left out since the previous one (`suppressed`). Counting every
 * occurrence is the metrics' job, not the log's.
 */

export interface WarnLogger {
  warn(obj: Record<string, unknown>, msg: string): void;
}

export interface WarningLimiter {
  /** Writes the warning unless one of this `kind` was written less than `intervalMs` ago. */
  warn(kind: string, obj: Record<string, unknown>, msg: string): void;
}

export const DEFAULT_WARNING_INTERVAL_MS = 10_000;

export function createWarningLimiter(
  logger: WarnLogger,
  intervalMs = DEFAULT_WARNING_INTERVAL_MS,
  now: () => number = () => performance.now(),
): WarningLimiter {
  const kinds = new Map<string, { last: number; suppressed: number }>();
  return {
    warn(kind, obj, msg) {
      const at = now();
      const state = kinds.get(kind);
      if (state !== undefined && at - state.last < intervalMs) {
        state.suppressed++;
        return;
      }
      const suppressed = state?.suppressed ?? 0;
      kinds.set(kind, { last: at, suppressed: 0 });
      logger.warn(suppressed === 0 ? obj : { ...obj, suppressed }, msg);
    },
  };
}
