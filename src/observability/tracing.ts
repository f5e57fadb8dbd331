/**
 * OpenTelemetry tracing (docs/observability.md, "Tracing"; decision 2741), off unless
 * `--tracing-url` is set. This module is what the rest of the code calls; it imports nothing
 * of the SDK. The composition root of a process starts tracing (`startTracing`, which loads
 * the SDK only then) and installs it; until then every call here runs its function and
 * returns, so a process without tracing loads no OpenTelemetry module and opens no span.
 *
 * Like the OpenTelemetry API's own global tracer provider, the installed tracing is one per
 * process: the stages that open spans (token, policy load, decide, execute, upstream call)
 * call `traced` where they are, instead of every constructor on the way taking a tracer.
 */
import type { TracingConfig } from "../config/tracing.ts";
import type { SpanName, SpanOutcome, Tracing, TracingDependencies } from "./tracing-types.ts";

export type {
  OpenSpan,
  SpanName,
  SpanOutcome,
  TraceCarrier,
  Tracing,
  TracingDependencies,
  TracingFetch,
} from "./tracing-types.ts";

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

let installed: Tracing | undefined;

/** Makes `tracing` the process's (the composition root's call); undefined turns it off. */
export function installTracing(tracing: Tracing | undefined): void {
  installed = tracing;
}

/** The process's tracing, if on. */
export function activeTracing(): Tracing | undefined {
  return installed;
}

/** `run` in a child span named `name` when tracing is on; else `run()` alone. */
export function traced<T>(name: SpanName, run: () => T, outcome?: (result: Awaited<T>) => SpanOutcome): T {
  return installed === undefined ? run() : installed.span(name, run, outcome);
}

/** The trace headers an outbound request carries when tracing is on; else none. */
export function traceHeaders(): Readonly<Record<string, string>> | undefined {
  return installed?.headers();
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
