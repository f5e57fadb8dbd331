import { Counter, type Registry } from "prom-client";
import { errorCodes } from "../../errors.ts";
import { createMetricsRegistry, gauge, upstreamBucketsSeconds } from "../../observability/metrics.ts";
import type { Transport } from "../../pipeline/check.ts";
import type { CacheLayer } from "../../policy/cache/index.ts";

/**
 * The sidecar's Prometheus series (docs/sidecar.md, "Metrics"). Every label value comes
 * from a closed set — outcomes, error-table reason codes, layers — so cardinality is
 * bounded; subject ids, hosts and paths never become labels.
 *
 * Counting is on every request's path, so it is plain arithmetic: each label set has a
 * slot (a number, or bucket counts for histograms), found through nested maps of label
 * values; prom-client reads the slots when /metrics is scraped. A scrape sees totals as of
 * that moment, exactly as with prom-client's own counters.
 */

export type DecisionOutcome = "allow" | "deny" | "error";
export type GrpcRejection = "malformed" | "incomplete" | "overloaded" | "receive_timeout";

export interface SidecarMetrics {
  readonly registry: Registry;
  decision(transport: Transport, outcome: DecisionOutcome, reason: string | null, seconds: number): void;
  cache(kind: "policy" | "capability" | "credentials", layer: CacheLayer, hit: boolean): void;
  verificationFailure(layer: "redis" | "authority"): void;
  headRead(result: "view" | "ok" | "error" | "stale_used"): void;
  /** A sealed policy entry written back to Redis after its Check, dropped (queue full), or failed. */
  policyWriteBack(result: "written" | "dropped" | "failed"): void;
  tokenCheck(result: "cached" | "verified" | "rejected" | "unavailable"): void;
  /** A gRPC request refused before any decision (malformed, incomplete, overloaded, receive_timeout). */
  grpcRejected(reason: GrpcRejection): void;
  upstream(outcome: "response" | "timeout" | "error", seconds: number): void;
  proxyResponse(kind: "redacted" | "passed" | "too_large" | "refused" | "failed"): void;
  /** Decision records the authority took (`delivered`) or refused and the sidecar set aside (`refused`). */
  auditRecords(result: "delivered" | "refused", count: number): void;
  redactions(events: ReadonlyArray<{ readonly source: string; readonly mode: string }>): void;
  /** Reports `read()` as the redis_up gauge at scrape time. */
  trackRedisUp(read: () => boolean): void;
  /** A renewal of the freshness lease (the authority's policy change log read to its end) or its failure. */
  freshnessRenewal(result: "ok" | "error"): void;
  /** Reports `read()` (the lease is current) as the freshness gauge at scrape time. */
  trackFreshnessLease(read: () => boolean): void;
  /** Reports `read()` as the in-flight gauge of `transport` at scrape time. */
  trackInFlight(transport: Transport, read: () => number): void;
  /** Reports `read()` as the gauge of decision records not yet taken by the authority. */
  trackAuditPending(read: () => number): void;
  /** Reports `read()` as the gauge of the decision journal's bytes on disk. */
  trackJournalBytes(read: () => number): void;
  /** A decision record that could not be written ahead (its allow was answered 503): the journal at its cap, or a write that failed. */
  journalUnwritten(reason: "full" | "error"): void;
}

/**
 * Latency buckets of the decision histogram, in seconds: fine below 1 ms, where the sidecar's
 * decisions fall (the Check target is p99 ≤ 1 ms), up to 2.5 s.
 */
export const checkBucketsSeconds: readonly number[] = [
  0.000025, 0.00005, 0.0001, 0.00015, 0.0002, 0.0003, 0.0004, 0.0005, 0.00075, 0.001, 0.0025, 0.005, 0.01,
  0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
];

const reasons: ReadonlySet<string> = new Set(Object.keys(errorCodes));

/** A reason label from the closed set: the error table's codes, "none", or "other". */
function reasonLabel(reason: string | null): string {
  if (reason === null) return "none";
  return reasons.has(reason) ? reason : "other";
}

const sources: ReadonlySet<string> = new Set(["operation", "default", "header", "secret"]);
const modes: ReadonlySet<string> = new Set(["remove", "mask"]);

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;

/** Label values → slot, one nested Map per label (one to three labels); a slot is made on first use. */
class Slots<S> {
  private readonly root = new Map<string, unknown>();
  readonly all: Array<{ readonly labels: Readonly<Record<string, string>>; readonly slot: S }> = [];

  private readonly labelNames: readonly string[];
  private readonly make: () => S;

  constructor(labelNames: readonly string[], make: () => S) {
    if (labelNames.length < 1 || labelNames.length > 3) throw new Error("one to three labels");
    this.labelNames = labelNames;
    this.make = make;
  }

  private level(parent: Map<string, unknown>, key: string): Map<string, unknown> {
    let next = parent.get(key) as Map<string, unknown> | undefined;
    if (next === undefined) {
      next = new Map();
      parent.set(key, next);
    }
    return next;
  }

  get(a: string, b = "", c = ""): S {
    const depth = this.labelNames.length;
    let level = this.root;
    if (depth > 1) level = this.level(level, a);
    if (depth > 2) level = this.level(level, b);
    const last = depth === 1 ? a : depth === 2 ? b : c;
    const slot = level.get(last) as S | undefined;
    return slot === undefined ? this.create(level, last, [a, b, c]) : slot;
  }

  private create(level: Map<string, unknown>, key: string, values: readonly string[]): S {
    const slot = this.make();
    level.set(key, slot);
    const labels: Record<string, string> = {};
    this.labelNames.forEach((name, i) => {
      labels[name] = values[i] ?? "";
    });
    this.all.push({ labels, slot });
    return slot;
  }
}

/** A counter slot. */
interface Count {
  value: number;
}

function countingCounter(
  registry: Registry,
  name: string,
  help: string,
  labelNames: readonly string[],
): Slots<Count> {
  if (!METRIC_NAME.test(name) || !name.endsWith("_total")) throw new Error(`bad counter name ${name}`);
  const slots = new Slots<Count>(labelNames, () => ({ value: 0 }));
  new Counter({
    name,
    help,
    labelNames: [...labelNames],
    registers: [registry],
    collect() {
      this.reset();
      for (const { labels, slot } of slots.all) {
        if (slot.value > 0) this.inc(labels, slot.value);
      }
    },
  });
  return slots;
}

/** A histogram slot: per-bucket counts (non-cumulative, last = +Inf), sum and count. */
interface Observations {
  readonly buckets: Float64Array;
  sum: number;
  count: number;
}

/** The value records prom-client's registry formats (as its own Histogram.getForPromString returns). */
interface ExportedValue {
  readonly labels: Readonly<Record<string, string | number>>;
  readonly sharedLabels: Readonly<Record<string, string>>;
  readonly value: number;
  readonly metricName: string;
  readonly exemplar: undefined;
}

/**
 * A histogram with one label, counted in typed arrays. It is registered with the registry as
 * a metric object of prom-client's shape (name, help, type, aggregator, get,
 * getForPromString), so /metrics prints it exactly as a prom-client Histogram:
 * `<name>_bucket{le="…",<label>="…"}`, `<name>_sum{…}`, `<name>_count{…}`.
 */
class CountingHistogram {
  readonly type = "histogram";
  readonly aggregator = "sum";
  readonly labelNames: string[];
  private readonly slots: Slots<Observations>;
  private readonly bounds: readonly number[];

  readonly name: string;
  readonly help: string;

  constructor(registry: Registry, name: string, help: string, labelName: string, buckets: readonly number[]) {
    if (!METRIC_NAME.test(name)) throw new Error(`bad histogram name ${name}`);
    this.name = name;
    this.help = help;
    this.bounds = [...buckets].sort((x, y) => x - y);
    this.labelNames = [labelName];
    const size = this.bounds.length + 1;
    this.slots = new Slots<Observations>([labelName], () => ({
      buckets: new Float64Array(size),
      sum: 0,
      count: 0,
    }));
    registry.registerMetric(this as unknown as Parameters<Registry["registerMetric"]>[0]);
  }

  /** The slot of one label value: `observe` on it costs a bucket search and three additions. */
  child(labelValue: string): { observe(seconds: number): void } {
    const slot = this.slots.get(labelValue);
    const bounds = this.bounds;
    return {
      observe(seconds: number): void {
        if (!Number.isFinite(seconds)) return;
        let i = 0;
        while (i < bounds.length && seconds > (bounds[i] as number)) i++;
        (slot.buckets as Float64Array)[i] = ((slot.buckets as Float64Array)[i] ?? 0) + 1;
        slot.sum += seconds;
        slot.count += 1;
      },
    };
  }

  getForPromString(): {
    name: string;
    help: string;
    type: string;
    values: ExportedValue[];
    aggregator: string;
  } {
    const values: ExportedValue[] = [];
    const bucketName = `${this.name}_bucket`;
    for (const { labels, slot } of this.slots.all) {
      let cumulative = 0;
      this.bounds.forEach((bound, i) => {
        cumulative += slot.buckets[i] ?? 0;
        values.push({
          labels: { le: bound },
          sharedLabels: labels,
          value: cumulative,
          metricName: bucketName,
          exemplar: undefined,
        });
      });
      values.push(
        {
          labels: { le: "+Inf" },
          sharedLabels: labels,
          value: slot.count,
          metricName: bucketName,
          exemplar: undefined,
        },
        {
          labels: {},
          sharedLabels: labels,
          value: slot.sum,
          metricName: `${this.name}_sum`,
          exemplar: undefined,
        },
        {
          labels: {},
          sharedLabels: labels,
          value: slot.count,
          metricName: `${this.name}_count`,
          exemplar: undefined,
        },
      );
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  get(): { name: string; help: string; type: string; values: ExportedValue[]; aggregator: string } {
    const data = this.getForPromString();
    return {
      ...data,
      values: data.values.map((value) => ({ ...value, labels: { ...value.sharedLabels, ...value.labels } })),
    };
  }

  reset(): void {
    for (const { slot } of this.slots.all) {
      slot.buckets.fill(0);
      slot.sum = 0;
      slot.count = 0;
    }
  }
}

export function createSidecarMetrics(registry: Registry = createMetricsRegistry()): SidecarMetrics {
  const decisions = countingCounter(
    registry,
    "authority_sidecar_decisions_total",
    "Authorization decisions by transport, outcome and reason.",
    ["transport", "outcome", "reason"],
  );
  const checkSeconds = new CountingHistogram(
    registry,
    "authority_sidecar_check_duration_seconds",
    "Time to decide one request (token, freshness, policy, catalog, decide()), by transport.",
    "transport",
    checkBucketsSeconds,
  );
  const cacheHits = countingCounter(
    registry,
    "authority_sidecar_cache_hits_total",
    "Cache hits by kind and layer.",
    ["kind", "layer"],
  );
  const cacheMisses = countingCounter(
    registry,
    "authority_sidecar_cache_misses_total",
    "Cache misses by kind and layer (authority: the record does not exist).",
    ["kind", "layer"],
  );
  const verificationFailures = countingCounter(
    registry,
    "authority_sidecar_policy_verification_failures_total",
    "Policies refused: a sealed Redis entry that did not verify (layer redis) or an artifact that failed decrypt-verify (layer authority).",
    ["layer"],
  );
  const headReads = countingCounter(
    registry,
    "authority_sidecar_policy_head_reads_total",
    "Policy head checks: view (the synced head view answered), ok (read from Redis), error, or stale_used (Redis failed, a head confirmed within the staleness bound was used).",
    ["result"],
  );
  const policyWriteBacks = countingCounter(
    registry,
    "authority_sidecar_policy_write_backs_total",
    "Sealed policy entries written to Redis after their Check was answered (written), dropped because the write-back queue was full (dropped), or not written (failed).",
    ["result"],
  );
  const freshnessRenewals = countingCounter(
    registry,
    "authority_sidecar_freshness_renewals_total",
    "Reads of the authority's policy change log that renewed the freshness lease (ok) or failed (error).",
    ["result"],
  );
  const tokenChecks = countingCounter(
    registry,
    "authority_sidecar_token_checks_total",
    "Bearer token checks: cached (verified earlier), verified, rejected, unavailable (JWKS unreachable).",
    ["result"],
  );
  const grpcRejections = countingCounter(
    registry,
    "authority_sidecar_grpc_rejected_total",
    "gRPC requests refused before a decision: malformed (undecodable CheckRequest), incomplete (no HTTP method or path; denied 400), overloaded (too many requests arriving at once; RESOURCE_EXHAUSTED), receive_timeout (a request not finished in time; its connection cut). Their log lines are rate-limited; this counts every one.",
    ["reason"],
  );
  const upstreamSeconds = new CountingHistogram(
    registry,
    "authority_sidecar_upstream_duration_seconds",
    "Forward proxy: time from sending the request upstream to its response headers (or failure).",
    "outcome",
    upstreamBucketsSeconds,
  );
  const auditRecords = countingCounter(
    registry,
    "authority_sidecar_audit_records_total",
    "Decision records sent to the authority's audit log: delivered, or refused by it and set aside.",
    ["result"],
  );
  const proxyResponses = countingCounter(
    registry,
    "authority_sidecar_proxy_responses_total",
    "Forward proxy responses: redacted (JSON), passed (not JSON; scrubbed), too_large (502), refused (502: not scrubbable or not redactable), failed.",
    ["kind"],
  );
  const redactionEvents = countingCounter(
    registry,
    "authority_sidecar_redaction_events_total",
    "Redaction events applied to proxied responses, by source and mode.",
    ["source", "mode"],
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

  let journalBytes: (() => number) | undefined;
  gauge(
    registry,
    "authority_sidecar_journal_bytes",
    "Bytes the decision journal takes on disk (records not yet delivered to the authority, in segments).",
    [],
    (set) => {
      if (journalBytes !== undefined) set({}, journalBytes());
    },
  );
  const journalUnwritten = countingCounter(
    registry,
    "authority_sidecar_journal_unwritten_total",
    "Decision records that could not be written ahead (an allow among them was answered 503): full (the journal at its cap), error (the write failed).",
    ["reason"],
  );

  let auditPending: (() => number) | undefined;
  gauge(
    registry,
    "authority_sidecar_audit_pending_records",
    "Decision records queued for the authority's audit log.",
    [],
    (set) => {
      if (auditPending !== undefined) set({}, auditPending());
    },
  );

  const checkSecondsOf = new Map<string, { observe(seconds: number): void }>();
  const upstreamOf = new Map<string, { observe(seconds: number): void }>();
  const observer = (
    children: Map<string, { observe(seconds: number): void }>,
    metric: CountingHistogram,
    value: string,
  ) => {
    let child = children.get(value);
    if (child === undefined) {
      child = metric.child(value);
      children.set(value, child);
    }
    return child;
  };

  return {
    registry,
    decision(transport, outcome, reason, seconds) {
      decisions.get(transport, outcome, reasonLabel(reason)).value++;
      observer(checkSecondsOf, checkSeconds, transport).observe(seconds);
    },
    cache(kind, layer, hit) {
      (hit ? cacheHits : cacheMisses).get(kind, layer).value++;
    },
    verificationFailure(layer) {
      verificationFailures.get(layer).value++;
    },
    headRead(result) {
      headReads.get(result).value++;
    },
    policyWriteBack(result) {
      policyWriteBacks.get(result).value++;
    },
    tokenCheck(result) {
      tokenChecks.get(result).value++;
    },
    grpcRejected(reason) {
      grpcRejections.get(reason).value++;
    },
    upstream(outcome, seconds) {
      observer(upstreamOf, upstreamSeconds, outcome).observe(seconds);
    },
    proxyResponse(kind) {
      proxyResponses.get(kind).value++;
    },
    auditRecords(result, count) {
      auditRecords.get(result).value += count;
    },
    redactions(events) {
      for (const event of events) {
        const source = sources.has(event.source) ? event.source : "other";
        const mode = modes.has(event.mode) ? event.mode : "other";
        redactionEvents.get(source, mode).value++;
      }
    },
    // Registered only when a Redis is configured: a Redis-less sidecar has no such series
    // (a 0 would fire the RedisDown alert on every sidecar that never had a Redis).
    trackRedisUp(read) {
      if (registry.getSingleMetric("authority_sidecar_redis_up") !== undefined) return;
      gauge(
        registry,
        "authority_sidecar_redis_up",
        "1 while the Redis command connection is ready.",
        [],
        (set) => set({}, read() ? 1 : 0),
      );
    },
    freshnessRenewal(result) {
      freshnessRenewals.get(result).value++;
    },
    trackFreshnessLease(read) {
      if (registry.getSingleMetric("authority_sidecar_freshness_lease_current") !== undefined) return;
      gauge(
        registry,
        "authority_sidecar_freshness_lease_current",
        "1 while the freshness lease is current (the authority's policy change log confirmed within the staleness bound); 0: every decision is 503.",
        [],
        (set) => set({}, read() ? 1 : 0),
      );
    },
    trackInFlight(transport, read) {
      inFlightReaders.set(transport, read);
    },
    trackAuditPending(read) {
      auditPending = read;
    },
    trackJournalBytes(read) {
      journalBytes = read;
    },
    journalUnwritten(reason) {
      journalUnwritten.get(reason).value++;
    },
  };
}
