import type { Registry } from "prom-client";
import { createDecisionExporter, type DecisionExporter, type ExportFetch } from "./exporter.ts";
import { exportBufferGauge, exportCounter } from "./metrics.ts";

/** What a process's decision-export settings resolve to (src/config/decision-export.ts reads them). */
export interface DecisionExportConfig {
  readonly url: string;
  readonly format: "otlp" | "json";
  readonly maxBuffered: number;
  readonly batchSize: number;
  readonly intervalMs: number;
  readonly maskFields: readonly string[];
  /** Fraction (0–1) of allows exported; denies always are. */
  readonly allowSampleRate: number;
}

export interface ConfiguredExporterDependencies {
  /** The process's egress gate fetch (the export URL is one of its operator URLs). */
  readonly fetch: ExportFetch;
  readonly registry: Registry;
  /** Metric name prefix: `authority` or `authority_sidecar`. */
  readonly metricPrefix: string;
  readonly serviceName: string;
  readonly logger: { warn(obj: Record<string, unknown>, msg: string): void };
}

/** Retry delays and request deadline of every configured export. */
const RETRY = { initialDelayMs: 100, maxDelayMs: 30_000 } as const;
const REQUEST_TIMEOUT_MS = 10_000;

/** The exporter of a process's settings, its metrics registered; undefined when none is configured. */
export function configuredExporter(
  config: DecisionExportConfig | undefined,
  dependencies: ConfiguredExporterDependencies,
): DecisionExporter | undefined {
  if (config === undefined) return undefined;
  let failing = false;
  const exporter = createDecisionExporter({
    ...config,
    serviceName: dependencies.serviceName,
    fetch: dependencies.fetch,
    retry: RETRY,
    requestTimeoutMs: REQUEST_TIMEOUT_MS,
    random: Math.random,
    count: exportCounter(dependencies.registry, dependencies.metricPrefix),
    onSendError: ({ status, error }) => {
      // Once per outage, not per retry: the metrics count the rest.
      if (failing) return;
      failing = true;
      setTimeout(() => {
        failing = false;
      }, 60_000).unref();
      dependencies.logger.warn(
        { status, err: error instanceof Error ? error.message : undefined },
        "decision export failing; records stay buffered and are retried",
      );
    },
  });
  exportBufferGauge(dependencies.registry, dependencies.metricPrefix, exporter);
  return exporter;
}
