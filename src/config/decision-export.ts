/**
 * The decision-log export settings, the same for `authority serve` and `authority sidecar`
 * (each with its own environment prefix): docs/observability.md, "Decision-log export".
 */
import type { DecisionExportConfig } from "../audit/export/configured.ts";
import type { SettingReader } from "./schema.ts";
import { duration, httpUrl, integer, list, oneOf, setting } from "./settings.ts";

export type { DecisionExportConfig };

export function decisionExportSettings(envPrefix: string) {
  return {
    decisionExportUrl: setting({
      key: "decision-export-url",
      env: `${envPrefix}_DECISION_EXPORT_URL`,
      description:
        "ship every decision record to this endpoint (an OTLP/HTTP logs URL ending in `/v1/logs`, or a plain HTTP endpoint with `--decision-export-format json`); unset: no export",
      parse: httpUrl,
    }),
    decisionExportFormat: setting({
      key: "decision-export-format",
      env: `${envPrefix}_DECISION_EXPORT_FORMAT`,
      description: "`otlp` (OTLP/HTTP JSON log records) or `json` (a JSON array of records per request)",
      default: "otlp",
      parse: oneOf(["otlp", "json"] as const),
    }),
    decisionExportBuffer: setting({
      key: "decision-export-buffer",
      env: `${envPrefix}_DECISION_EXPORT_BUFFER`,
      description:
        "decision records held for export while the endpoint is slow or down (beyond: dropped and counted)",
      default: 10_000,
      parse: integer(1, 10_000_000),
    }),
    decisionExportBatch: setting({
      key: "decision-export-batch",
      env: `${envPrefix}_DECISION_EXPORT_BATCH`,
      description: "most decision records in one export request",
      default: 512,
      parse: integer(1, 10_000),
    }),
    decisionExportInterval: setting({
      key: "decision-export-interval",
      env: `${envPrefix}_DECISION_EXPORT_INTERVAL`,
      description: "milliseconds a record waits for a full batch before a partial one is sent",
      default: 1000,
      parse: duration("ms", 1, 600_000),
    }),
    decisionExportMask: setting({
      key: "decision-export-mask",
      env: `${envPrefix}_DECISION_EXPORT_MASK`,
      description: "record fields exported as `****` (comma-separated, e.g. `actor,subject_id,path`)",
      default: "",
      parse: list,
    }),
    decisionExportAllowPercent: setting({
      key: "decision-export-allow-percent",
      env: `${envPrefix}_DECISION_EXPORT_ALLOW_PERCENT`,
      description: "percentage of allows exported (sampled at random); denies are always exported",
      default: 100,
      parse: integer(0, 100),
    }),
  };
}

type ExportSettings = ReturnType<typeof decisionExportSettings>;

export function decisionExportConfig(read: SettingReader<ExportSettings>): DecisionExportConfig | undefined {
  const url = read.optional("decisionExportUrl");
  if (url === undefined) return undefined;
  return {
    url,
    format: read.value("decisionExportFormat"),
    maxBuffered: read.value("decisionExportBuffer"),
    batchSize: read.value("decisionExportBatch"),
    intervalMs: read.value("decisionExportInterval"),
    maskFields: read.value("decisionExportMask"),
    allowSampleRate: read.value("decisionExportAllowPercent") / 100,
  };
}

/** `{ decisionExport }` when one is configured: for a configuration's spread. */
export function optionalExport(config: DecisionExportConfig | undefined): {
  decisionExport?: DecisionExportConfig;
} {
  return config === undefined ? {} : { decisionExport: config };
}
