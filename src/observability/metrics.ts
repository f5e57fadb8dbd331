import type { IncomingMessage, ServerResponse } from "node:http";
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import { positiveIntegerOption } from "../core/positive-integer.ts";

/**
 * Prometheus metrics with prom-client. Every server builds its own Registry here (never the
 * global one), so two servers in one process — `authority dev`, the tests — do not collide,
 * and each `/metrics` shows only its own series plus the process defaults.
 *
 * Naming follows Prometheus conventions: `<namespace>_<subsystem>_<what>_<unit>`, counters
 * end in `_total`, durations are `_seconds`. Label values must come from bounded sets
 * (outcomes, reason codes, layers) — never subject ids, tokens, paths or hosts.
 */

export interface MetricsRegistryOptions {
  /** Collect the process defaults (CPU, RSS, heap, event-loop lag, GC); default true. */
  readonly collectDefaults?: boolean;
  /** Labels put on every series of this registry (e.g. `{ service: "sidecar" }`). */
  readonly defaultLabels?: Readonly<Record<string, string>>;
  /** Resolution of the event-loop lag default metric in ms (default 10). */
  readonly eventLoopMonitoringPrecision?: number;
}

export class MetricsConfigError extends Error {
  readonly code = "metrics_config_invalid";

  constructor(message: string) {
    super(message);
    this.name = "MetricsConfigError";
  }
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

const LINT_FAILING_DEFAULTS = [
  "nodejs_active_handles_total",
  "nodejs_active_requests_total",
  "nodejs_active_resources_total",
] as const;

export function createMetricsRegistry(options: MetricsRegistryOptions = {}): Registry {
  if (typeof options !== "object" || options === null)
    throw new MetricsConfigError("options must be an object");
  const registry = new Registry();
  const labels = options.defaultLabels ?? {};
  for (const [name, value] of Object.entries(labels)) {
    if (!LABEL_NAME.test(name) || name.startsWith("__"))
      throw new MetricsConfigError(`bad label name ${name}`);
    if (typeof value !== "string") throw new MetricsConfigError(`label ${name} must be a string`);
  }
  if (Object.keys(labels).length > 0) registry.setDefaultLabels({ ...labels });
  if (options.collectDefaults ?? true) {
    const precision = positiveIntegerOption(
      options.eventLoopMonitoringPrecision,
      10,
      "eventLoopMonitoringPrecision",
      (message) => {
        throw new MetricsConfigError(message);
      },
    );
    collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: precision });
    // prom-client names three gauges `*_total`, which Prometheus reserves for counters
    // (`promtool check metrics` refuses them); the per-type gauges beside them carry the same sums.
    for (const name of LINT_FAILING_DEFAULTS) registry.removeSingleMetric(name);
  }
  return registry;
}

/**
 * Latency buckets in seconds from 50 µs to 2.5 s: sub-millisecond resolution for in-process
 * decisions (the sidecar's Check targets p99 ≤ 1 ms) and enough range for upstream calls.
 */
export const latencyBucketsSeconds: readonly number[] = [
  0.00005, 0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
];

/** Buckets for calls to other services (upstream APIs, the authority service): 1 ms to 30 s. */
export const upstreamBucketsSeconds: readonly number[] = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
];

function checkName(name: string): void {
  if (!METRIC_NAME.test(name)) throw new MetricsConfigError(`bad metric name ${name}`);
}

export function counter<L extends string>(
  registry: Registry,
  name: string,
  help: string,
  labelNames: readonly L[] = [],
): Counter<L> {
  checkName(name);
  if (!name.endsWith("_total")) throw new MetricsConfigError(`counter ${name} must end in _total`);
  return new Counter({ name, help, labelNames: [...labelNames], registers: [registry] });
}

export function histogram<L extends string>(
  registry: Registry,
  name: string,
  help: string,
  labelNames: readonly L[] = [],
  buckets: readonly number[] = latencyBucketsSeconds,
): Histogram<L> {
  checkName(name);
  return new Histogram({
    name,
    help,
    labelNames: [...labelNames],
    buckets: [...buckets],
    registers: [registry],
  });
}

/** `collect` runs at scrape time: for values that are cheaper to read than to track. */
export function gauge<L extends string>(
  registry: Registry,
  name: string,
  help: string,
  labelNames: readonly L[] = [],
  collect?: (set: (labels: Partial<Record<L, string>>, value: number) => void) => void,
): Gauge<L> {
  checkName(name);
  if (collect === undefined)
    return new Gauge({ name, help, labelNames: [...labelNames], registers: [registry] });
  return new Gauge({
    name,
    help,
    labelNames: [...labelNames],
    registers: [registry],
    collect() {
      collect((labels, value) => this.set(labels, value));
    },
  });
}

/**
 * The registry's text, one metric per event-loop turn. `registry.metrics()` runs every
 * collector in one task (the process defaults read /proc: the open-fds count lists every
 * descriptor), 1–4 ms under load, a stall for the requests waiting behind it; here the longest
 * task is one metric's. Each metric is still read whole in its turn (a histogram's buckets, sum
 * and count agree). The OpenMetrics format is left to prom-client.
 */
export async function metricsText(registry: Registry): Promise<string> {
  if (registry.contentType !== Registry.PROMETHEUS_CONTENT_TYPE) return registry.metrics();
  const texts: string[] = [];
  for (const { name } of registry.getMetricsAsArray()) {
    await new Promise((resolve) => setImmediate(resolve));
    // Removed meanwhile: it is no longer the registry's.
    if (registry.getSingleMetric(name) === undefined) continue;
    texts.push(await registry.getSingleMetricAsString(name));
  }
  return `${texts.join("\n\n")}\n`;
}

/**
 * Answers a scrape: `GET /metrics` in the registry's text format. Errors are a bare 500
 * (a collector's message is internal).
 */
export async function serveMetrics(registry: Registry, _request: IncomingMessage, response: ServerResponse) {
  try {
    const body = await metricsText(registry);
    response.writeHead(200, { "content-type": registry.contentType, "cache-control": "no-store" });
    response.end(body);
  } catch {
    response.writeHead(500, { "content-type": "text/plain; charset=utf-8" });
    response.end("metrics collection failed\n");
  }
}
