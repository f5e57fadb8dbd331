import type { Counter, Gauge, Histogram, Registry } from "prom-client";
import { errorCodes } from "../../errors.ts";
import {
  counter,
  createMetricsRegistry,
  gauge,
  histogram,
  latencyBucketsSeconds,
  upstreamBucketsSeconds,
} from "../../observability/metrics.ts";
import type { CacheLayer } from "../../policy/cache/index.ts";
import type { Transport } from "./engine.ts";

/**
 * The sidecar's Prometheus series (docs/sidecar.md, "Metrics"). Every label value comes
 * from a closed set — outcomes, error-table reason codes, layers — so cardinality is
 * bounded; subject ids, hosts and paths never become labels. Label children are cached so
 * the per-request cost is a map lookup and an add.
 */

export type DecisionOutcome = "allow" | "deny" | "error";

export interface SidecarMetrics {
  readonly registry: Registry;
  decision(transport: Transport, outcome: DecisionOutcome, reason: string | null, seconds: number): void;
  cache(kind: "policy" | "capability" | "credentials", layer: CacheLayer, hit: boolean): void;
  verificationFailure(layer: "redis" | "authority"): void;
  headRead(result: "ok" | "error" | "stale_used"): void;
  tokenCheck(result: "cached" | "verified" | "rejected" | "unavailable"): void;
  upstream(outcome: "response" | "timeout" | "error", seconds: number): void;
  proxyResponse(kind: "streamed" | "redacted" | "passed" | "too_large" | "failed"): void;
  redactions(events: ReadonlyArray<{ readonly source: string; readonly mode: string }>): void;
  setRedisUp(up: boolean): void;
  /** Reports `read()` as the in-flight gauge of `transport` at scrape time. */
  trackInFlight(transport: Transport, read: () => number): void;
}

const reasons: ReadonlySet<string> = new Set(Object.keys(errorCodes));

/** A reason label from the closed set: the error table's codes, "none", or "other". */
function reasonLabel(reason: string | null): string {
  if (reason === null) return "none";
  return reasons.has(reason) ? reason : "other";
}

const sources: ReadonlySet<string> = new Set(["operation", "default", "header"]);
const modes: ReadonlySet<string> = new Set(["remove", "mask"]);

export function createSidecarMetrics(registry: Registry = createMetricsRegistry()): SidecarMetrics {
  const decisions = counter(
    registry,
    "authority_sidecar_decisions_total",
    "Authorization decisions by transport, outcome and reason.",
    ["transport", "outcome", "reason"],
  );
  const checkSeconds = histogram(
    registry,
    "authority_sidecar_check_duration_seconds",
    "Time to decide one request (token, freshness, policy, catalog, decide()), by transport.",
    ["transport"],
    latencyBucketsSeconds,
  );
  const cacheHits = counter(registry, "authority_sidecar_cache_hits_total", "Cache hits by kind and layer.", [
    "kind",
    "layer",
  ]);
  const cacheMisses = counter(
    registry,
    "authority_sidecar_cache_misses_total",
    "Cache misses by kind and layer (authority: the record does not exist).",
    ["kind", "layer"],
  );
  const verificationFailures = counter(
    registry,
    "authority_sidecar_policy_verification_failures_total",
    "Policies refused: a sealed Redis entry that did not verify (layer redis) or an artifact that failed decrypt-verify (layer authority).",
    ["layer"],
  );
  const headReads = counter(
    registry,
    "authority_sidecar_policy_head_reads_total",
    "Policy head reads from Redis: ok, error, or stale_used (Redis failed, a head confirmed within the staleness bound was used).",
    ["result"],
  );
  const tokenChecks = counter(
    registry,
    "authority_sidecar_token_checks_total",
    "Bearer token checks: cached (verified earlier), verified, rejected, unavailable (JWKS unreachable).",
    ["result"],
  );
  const upstreamSeconds = histogram(
    registry,
    "authority_sidecar_upstream_duration_seconds",
    "Forward proxy: time from sending the request upstream to its response headers (or failure).",
    ["outcome"],
    upstreamBucketsSeconds,
  );
  const proxyResponses = counter(
    registry,
    "authority_sidecar_proxy_responses_total",
    "Forward proxy responses: streamed (no redaction needed), redacted, passed (buffered, not JSON), too_large (502), failed.",
    ["kind"],
  );
  const redactionEvents = counter(
    registry,
    "authority_sidecar_redaction_events_total",
    "Redaction events applied to proxied responses, by source and mode.",
    ["source", "mode"],
  );
  const redisUp: Gauge = gauge(
    registry,
    "authority_sidecar_redis_up",
    "1 while the Redis command connection is ready.",
  );
  const inFlightReaders = new Map<Transport, () => number>();
  gauge(
    registry,
    "authority_sidecar_in_flight_requests",
    "Requests being decided or proxied.",
    ["transport"],
    (set) => {
      for (const [transport, read] of inFlightReaders) set({ transport }, read());
    },
  );

  /**
   * Label children per metric, keyed by the label values joined: the per-request cost is
   * one string concatenation and one map lookup (no label objects, no hashing in prom-client).
   */
  const counterChildren = <L extends string>(metric: Counter<L>, labelNames: readonly L[]) => {
    const cache = new Map<string, { inc(value?: number): void }>();
    return (...values: string[]): { inc(value?: number): void } => {
      const key = values.length === 1 ? (values[0] ?? "") : values.join("\u0000");
      let found = cache.get(key);
      if (found === undefined) {
        const labels = Object.fromEntries(labelNames.map((name, i) => [name, values[i] ?? ""])) as Record<
          L,
          string
        >;
        found = metric.labels(labels);
        cache.set(key, found);
      }
      return found;
    };
  };
  const histogramChildren = <L extends string>(metric: Histogram<L>, labelName: L) => {
    const cache = new Map<string, { observe(value: number): void }>();
    return (value: string): { observe(value: number): void } => {
      let found = cache.get(value);
      if (found === undefined) {
        found = metric.labels({ [labelName]: value } as Record<L, string>);
        cache.set(value, found);
      }
      return found;
    };
  };
  const decisionsOf = counterChildren(decisions, ["transport", "outcome", "reason"]);
  const checkSecondsOf = histogramChildren(checkSeconds, "transport");
  const hitsOf = counterChildren(cacheHits, ["kind", "layer"]);
  const missesOf = counterChildren(cacheMisses, ["kind", "layer"]);
  const verificationOf = counterChildren(verificationFailures, ["layer"]);
  const headReadsOf = counterChildren(headReads, ["result"]);
  const tokenChecksOf = counterChildren(tokenChecks, ["result"]);
  const upstreamOf = histogramChildren(upstreamSeconds, "outcome");
  const proxyResponsesOf = counterChildren(proxyResponses, ["kind"]);
  const redactionsOf = counterChildren(redactionEvents, ["source", "mode"]);

  return {
    registry,
    decision(transport, outcome, reason, seconds) {
      decisionsOf(transport, outcome, reasonLabel(reason)).inc();
      checkSecondsOf(transport).observe(seconds);
    },
    cache(kind, layer, hit) {
      (hit ? hitsOf : missesOf)(kind, layer).inc();
    },
    verificationFailure(layer) {
      verificationOf(layer).inc();
    },
    headRead(result) {
      headReadsOf(result).inc();
    },
    tokenCheck(result) {
      tokenChecksOf(result).inc();
    },
    upstream(outcome, seconds) {
      upstreamOf(outcome).observe(seconds);
    },
    proxyResponse(kind) {
      proxyResponsesOf(kind).inc();
    },
    redactions(events) {
      for (const event of events) {
        const source = sources.has(event.source) ? event.source : "other";
        const mode = modes.has(event.mode) ? event.mode : "other";
        redactionsOf(source, mode).inc();
      }
    },
    setRedisUp(up) {
      redisUp.set(up ? 1 : 0);
    },
    trackInFlight(transport, read) {
      inFlightReaders.set(transport, read);
    },
  };
}
