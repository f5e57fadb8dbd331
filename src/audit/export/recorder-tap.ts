import type { AuditRecorder } from "../recorder.ts";
import type { DecisionExporter } from "./exporter.ts";

/**
 * The recorder with every decision record it keeps also offered to the exporter — the
 * authority's own decisions and those its sidecars ship (`POST /v1/sidecar/decisions`). A
 * record is offered once the recorder took it: an export never holds up or fails a decision.
 * A record a sidecar exported itself (`exported`) is kept but not offered: each record is
 * exported by one process (decision 2797).
 */
export function exportingRecorder(recorder: AuditRecorder, exporter: DecisionExporter): AuditRecorder {
  return {
    ...recorder,
    async record(input, id, options) {
      const record = await recorder.record(input, id, options);
      if (options?.exported !== true) exporter.offer(record as unknown as Readonly<Record<string, unknown>>);
      return record;
    },
  };
}
