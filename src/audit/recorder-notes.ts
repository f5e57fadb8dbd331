import type { DecisionNoteMetrics } from "../observability/decision-notes.ts";
import type { AuditRecorder } from "./recorder.ts";

/**
 * The recorder with every decision record it keeps counted by its notes (shadow agreement,
 * log-only allows; decision 2761) — the authority's own decisions and those its sidecars ship.
 */
export function notingRecorder(recorder: AuditRecorder, metrics: DecisionNoteMetrics): AuditRecorder {
  return {
    ...recorder,
    async record(input, id, options) {
      const record = await recorder.record(input, id, options);
      metrics.observe(record);
      return record;
    },
  };
}
