import type { FastifyInstance } from "fastify";
import type { Registry } from "prom-client";
import { counter, histogram, upstreamBucketsSeconds } from "../../observability/metrics.ts";

export interface HttpMetricsOptions {
  /** Series prefix, e.g. `authority` → `authority_http_requests_total`. */
  readonly namespace: string;
  /** The process's registry (built by its composition root). */
  readonly registry: Registry;
}

/** Requests that matched no route share one label value, so a scan of random URLs adds no series. */
const UNMATCHED_ROUTE = "unmatched";

/**
 * Request counts and durations per route template (never the raw URL: bounded cardinality),
 * method and status, plus the process defaults, served at `GET /metrics` for Prometheus.
 */
export function installHttpMetrics(app: FastifyInstance, options: HttpMetricsOptions): Registry {
  const { registry } = options;
  const requests = counter(
    registry,
    `${options.namespace}_http_requests_total`,
    "HTTP requests answered, by route template, method and status.",
    ["route", "method", "status"],
  );
  const durations = histogram(
    registry,
    `${options.namespace}_http_request_duration_seconds`,
    "Time to answer an HTTP request, by route template and method.",
    ["route", "method"],
    upstreamBucketsSeconds,
  );
  app.addHook("onResponse", async (request, reply) => {
    const route = request.routeOptions.url ?? UNMATCHED_ROUTE;
    requests.inc({ route, method: request.method, status: String(reply.statusCode) });
    durations.observe({ route, method: request.method }, reply.elapsedTime / 1000);
  });
  const exposition = { content: { "text/plain": { schema: { type: "string" } } } };
  app.get(
    "/metrics",
    { logLevel: "warn", schema: { response: { 200: exposition } } },
    async (_request, reply) => {
      const body = await registry.metrics();
      return reply
        .header("content-type", registry.contentType)
        .header("cache-control", "no-store")
        .send(body);
    },
  );
  return registry;
}
