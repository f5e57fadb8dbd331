import type { AuditRecorder } from "../recorder.ts";
import type { DecisionExporter } from "./exporter.ts";

/**
 * The recorder with every decision record it keeps also offered to the exporter — the
 * authority's own decisions and those its sidecars ship (`POST /v1/sidecar/decisions`). A
 * record is offered once the recorder took it: an export never holds up or fails a decision.
 */
export function exportingRecorder(recorder: AuditRecorder, exporter: DecisionExporter): AuditRecorder {
  return {
    ...recorder,
    async record(input, id) {
      const record = await recorder.record(input, id);
      exporter.offer(record as unknown as Readonly<Record<string, unknown>>);
      return record;
    },
  };
}
