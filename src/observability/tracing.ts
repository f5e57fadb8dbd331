/**
 * OpenTelemetry tracing (docs/observability.md, "Tracing"; decision 2741), off unless
 * `--tracing-url` is set. This module is what the rest of the code calls; it imports nothing
 * of the SDK. A composition root starts tracing (`startTracing`, which loads the SDK only then)
 * and gives it to its transports, which serve each request in a trace context holding it
 * (tracing-context.ts). The stages inside (token, policy load, decide, execute, upstream call)
 * call `traced` where they are, instead of every constructor on the way taking a tracer; in a
 * request without tracing it runs its function and returns, so a process without tracing
 * loads no OpenTelemetry module and opens no span.
 */
import type { Registry } from "prom-client";
import { counter } from "./metrics.ts";
import {
  activeTraceContext,
  type SpanName,
  type SpanOutcome,
  TRACING_KEY,
  type Tracing,
  type TracingConfig,
  type TracingDependencies,
  type TracingMetrics,
} from "./tracing-context.ts";

export type {
  OpenSpan,
  SpanName,
  SpanOutcome,
  TraceCarrier,
  Tracing,
  TracingConfig,
  TracingDependencies,
  TracingFetch,
  TracingMetrics,
} from "./tracing-context.ts";

/** The tracing of a process's settings, the SDK loaded only now; undefined when it is off. */
export async function startTracing(
  config: TracingConfig | undefined,
  dependencies: TracingDependencies,
): Promise<Tracing | undefined> {
  if (config === undefined) return undefined;
  const { createSdkTracing } = await import("./tracing-sdk.ts");
  return createSdkTracing(config, dependencies);
}

/** Logs the first failed export of an outage (then at most once a minute), never span contents. */
export function exportErrorLogger(logger: {
  warn(obj: Record<string, unknown>, msg: string): void;
}): TracingDependencies["onExportError"] {
  let quietUntil = 0;
  return (info) => {
    const now = Date.now();
    if (now < quietUntil) return;
    quietUntil = now + 60_000;
    logger.warn({ ...info }, "span export failing; spans beyond the queue are dropped");
  };
}

/**
 * `<prefix>_tracing_spans_total{outcome}` (exported; dropped: the queue was full; failed: lost
 * with a failed export) and `<prefix>_tracing_export_failures_total` (failed export requests).
 */
export function tracingMetrics(registry: Registry, prefix: string): TracingMetrics {
  const spans = counter(
    registry,
    `${prefix}_tracing_spans_total`,
    "Finished spans exported, dropped because the export queue was full, or lost with a failed export (failed).",
    ["outcome"],
  );
  const failures = counter(
    registry,
    `${prefix}_tracing_export_failures_total`,
    "Span export requests that failed (no answer, or not 2xx); their spans are counted as failed.",
  );
  return {
    spans: (outcome, count) => spans.inc({ outcome }, count),
    exportFailure: () => failures.inc(),
  };
}

/** The tracing serving the running request, if any. */
function current(): Tracing | undefined {
  return activeTraceContext.getStore()?.getValue(TRACING_KEY) as Tracing | undefined;
}

/** `run` in a child span named `name` when the running request is traced; else `run()` alone. */
export function traced<T>(name: SpanName, run: () => T, outcome?: (result: Awaited<T>) => SpanOutcome): T {
  const tracing = current();
  return tracing === undefined ? run() : tracing.span(name, run, outcome);
}

/** The trace headers an outbound request made for the running request carries, when it is traced. */
export function traceHeaders(): Readonly<Record<string, string>> | undefined {
  return current()?.headers();
}

/** The outcome of a decision stage (allow, or deny with its reason). */
export function decisionOutcome(decision: {
  readonly status: string;
  readonly reason?: string | undefined;
}): SpanOutcome {
  return decision.status === "allowed"
    ? { "authority.decision": "allow" }
    : {
        "authority.decision": "deny",
        ...(decision.reason === undefined ? {} : { "authority.reason": decision.reason }),
      };
}
