import type { Registry } from "prom-client";
import { counter, gauge } from "../../observability/metrics.ts";
import type { DecisionExporter, ExportOutcome } from "./exporter.ts";

/**
 * `<prefix>_decision_export_records_total{outcome}` (sent, retried per attempt, dropped,
 * sampled_out): the exporter's `count` option.
 */
export function exportCounter(
  registry: Registry,
  prefix: string,
): (outcome: ExportOutcome, records: number) => void {
  const records = counter(
    registry,
    `${prefix}_decision_export_records_total`,
    "Decision records exported (sent), sent again after a failed attempt (retried), dropped (buffer full, refused by the endpoint, left at close) or not exported by allow sampling (sampled_out).",
    ["outcome"],
  );
  return (outcome, count) => records.inc({ outcome }, count);
}

/** `<prefix>_decision_export_buffered`: records waiting to be exported, read at scrape time. */
export function exportBufferGauge(registry: Registry, prefix: string, exporter: DecisionExporter): void {
  gauge(
    registry,
    `${prefix}_decision_export_buffered`,
    "Decision records waiting to be exported.",
    [],
    (set) => set({}, exporter.stats().buffered),
  );
}
