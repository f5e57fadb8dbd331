import type { Registry } from "prom-client";
import type { DecisionExporter } from "../../audit/export/exporter.ts";
import type { Capability } from "../../core/capability.ts";
import type { PublicKeyRingJson } from "../../crypto/index.ts";
import type { EgressPolicy } from "../../execute/egress.ts";
import { type DecisionNoteMetrics, decisionNoteMetrics } from "../../observability/decision-notes.ts";
import type { Logger } from "../../observability/logger.ts";
import type { Tracing } from "../../observability/tracing.ts";
import type { CapabilityMap } from "../../pipeline/capability-map.ts";
import { createSidecarEngine, type InjectedCredentials, type SidecarEngine } from "../../pipeline/check.ts";
import { auditedEngine } from "../../pipeline/check-record.ts";
import { createFetchCache } from "../../pipeline/fetch-cache.ts";
import { createSidecarShadowPolicies, type SidecarShadowPolicies } from "../../pipeline/shadow-policies.ts";
import { createVerifiedTokenCache, type TokenVerifier } from "../../pipeline/token-cache.ts";
import {
  type AuthorityLease,
  type CacheLayer,
  createAuthorityLease,
  createRedisPolicyStore,
  createVerifiedPolicyCache,
  deriveCacheKeys,
  PolicyCacheError,
  type RedisPolicyStore,
  type VerifiedPolicyCache,
} from "../../policy/cache/index.ts";
import type { PolicyOpener } from "../../policy/protector.ts";
import { createSignedPolicyVerifier } from "../../policy/signed-policy.ts";
import type { AuthorityClient } from "./authority-client.ts";
import { exportingJournal, exportingShipper } from "./decision-export.ts";
import { JournalFullError, openDecisionJournal } from "./decision-journal.ts";
import { createDecisionShipper, type DecisionShipper } from "./decision-log.ts";
import { errorSummary, positiveIntOption, SidecarConfigError } from "./errors.ts";
import { createExtAuthzCheck } from "./ext-authz.ts";
import { type CheckServer, createCheckServer } from "./grpc/check-server.ts";
import type { DecisionEvent } from "./grpc/types.ts";
import { probeOwnGrpcPort } from "./grpc-self-probe.ts";
import { createHealthServer, type HealthServer } from "./health-server.ts";
import { createSidecarMetrics, type SidecarMetrics } from "./metrics.ts";
import { createForwardProxy, type ForwardProxy } from "./proxy.ts";
import { tracedCheck } from "./tracing.ts";
import { collectStartUpGarbage, warmCapabilityCatalogs, warmDecisionPath } from "./warm-decision.ts";
import { afterRequestsInFlight, createWarmUp, type WarmUpStep } from "./warm-up.ts";

/**
 * One sidecar process: the ext_authz gRPC server, the forward proxy and the metrics/health
 * port around one engine, one verified-policy cache and one Redis connection pair.
 */

export interface ListenAddress {
  readonly host: string;
  readonly port: number;
}

/** What bounds the verified-policy cache (its settings: config.ts). */
export interface PolicyCacheBounds {
  readonly maxEntries: number;
  readonly maxBytes: number;
  readonly loadConcurrency: number;
}

export interface SidecarOptions {
  readonly authority: AuthorityClient;
  /** Verifies the callers' bearer tokens (createJwtVerifier, as elsewhere). */
  readonly verifier: TokenVerifier;
  /**
   * How signed policies are verified: the service identity names the v2 signer
   * (`service:<identity>`); pinned key rings are trusted by configuration, every other
   * signer's public keys come from the authority (docs/sidecar.md, "Policy keys"). The
   * sidecar holds no key that can open or sign a policy.
   */
  readonly policyKeys: {
    readonly serviceIdentity: string;
    readonly pinned?: readonly PublicKeyRingJson[];
  };
  /** Host and path → capability for requests whose route names none (built by the root from `--capability-map`). */
  readonly capabilityMap: CapabilityMap;
  /** Without it: local cache + authority fetch with `policyTtlMs` (docs/sidecar.md). */
  readonly redis?: {
    readonly url: string;
    readonly cacheKey: Uint8Array;
    readonly commandTimeoutMs?: number;
  };
  readonly listen: {
    readonly grpc: ListenAddress;
    readonly proxy: ListenAddress;
    readonly metrics: ListenAddress;
  };
  /** ext_authz decision deadline (`--decision-timeout-ms`). */
  readonly decisionTimeoutMs: number;
  /** Forward proxy decision deadline (`--proxy-decision-timeout-ms`). */
  readonly proxyDecisionTimeoutMs: number;
  readonly upstreamTimeoutMs: number;
  readonly maxResponseBytes: number;
  /** Forward proxy: largest request body read for validation (`--max-request-bytes`). */
  readonly maxRequestBytes: number;
  /** Parameter-scoping rollout, as the authority service's; default off (constrained operations are denied). */
  readonly constraintsRollout?: { readonly enabled: boolean; readonly partnerAllowlist: readonly string[] };
  /** With Redis: how long a confirmed policy head counts while Redis cannot be read (`--staleness-ms`). */
  readonly stalenessMs: number;
  /** Without Redis: how long an authority answer is used (`--policy-ttl-ms`). */
  readonly policyTtlMs: number;
  /** Revalidation with the authority whatever Redis says (`--policy-max-age-ms`). */
  readonly policyMaxAgeMs: number;
  /** The verified-policy cache's bounds and load concurrency (`--policy-cache-*`, `--policy-load-concurrency`). */
  readonly policyCache: PolicyCacheBounds;
  /** How long a capability catalog is kept (default 30000 ms; 5000 ms for one that does not resolve). */
  readonly catalogTtlMs?: number;
  /** Decision records held while the authority does not take them (`--audit-max-pending`); beyond, decisions are 503. */
  readonly auditMaxPending: number;
  /**
   * Where decision records are written before their decision is answered, and read back from
   * on the next start (decision-journal.ts). Without it a record queued when the process dies
   * is lost; `authority sidecar` always has one.
   */
  readonly journalDir?: string;
  /** The most the journal takes on disk (`--journal-max-bytes`); past it, allows are 503 until records are delivered. */
  readonly journalMaxBytes: number;
  readonly logger: Logger;
  /** The process's metrics registry (buildSidecar's samples the event loop every 100 ms). */
  readonly registry: Registry;
  /**
   * Where the forward proxy may connect (docs/security.md, "Egress"); the sidecar's own ports
   * are added to its platform endpoints once bound.
   */
  readonly egress: EgressPolicy;
  /** Spans of Checks and proxied requests (tracing.ts), shut down with the sidecar; absent: off. */
  readonly tracing?: Tracing;
  /**
   * Exports every decision record of this sidecar (decision-export.ts), closed with the sidecar;
   * absent: the authority's export, if any, exports them.
   */
  readonly decisionExport?: DecisionExporter;
}

export interface SidecarPorts {
  readonly grpc: number;
  readonly proxy: number;
  readonly metrics: number;
}

export interface Sidecar {
  start(): Promise<SidecarPorts>;
  /**
   * Not ready at once → keeps answering for drainMs (default 0: Envoy and the kubelet learn of
   * the termination at different moments, and Checks keep arriving meanwhile) → stops accepting
   * and drains gRPC and proxy (graceMs each, in parallel) → flushes decision records → closes
   * Redis → metrics port last.
   */
  close(options?: { graceMs?: number; drainMs?: number }): Promise<void>;
  readonly ready: boolean;
  readonly engine: SidecarEngine;
  readonly policies: VerifiedPolicyCache;
  readonly metrics: SidecarMetrics;
  readonly redis: RedisPolicyStore | undefined;
  /** The freshness lease over the authority's policy change log (decision 2507). */
  readonly freshness: AuthorityLease;
  /** Resolves true once `/readyz` would answer 200, false after `timeoutMs`. */
  whenReady(timeoutMs: number): Promise<boolean>;
  /** Sends the queued decision records now; false when some are still queued after `timeoutMs`. */
  flushAudit(timeoutMs: number): Promise<boolean>;
}

const UNRESOLVED_CATALOG_TTL_MS = 5000;

function outcomeOf(event: DecisionEvent): "allow" | "deny" | "error" {
  if (event.allowed) return "allow";
  return event.outcome === "deny" || event.outcome === "invalid_request" ? "deny" : "error";
}

/** The subjects' shadow policies, when the authority client can fetch them (decision 2761). */
function shadowPoliciesOf(
  authority: AuthorityClient,
  opener: PolicyOpener,
  logger: Logger,
): { shadows?: SidecarShadowPolicies } {
  const fetchShadowPolicy = authority.fetchShadowPolicy?.bind(authority);
  if (fetchShadowPolicy === undefined) return {};
  return {
    shadows: createSidecarShadowPolicies({
      source: { fetchShadowPolicy },
      opener,
      onError: (error) =>
        logger.debug({ err: errorSummary(error) }, "shadow policy not fetched; decisions go on without it"),
    }),
  };
}

/** The shipper with every record it queues counted by its notes (shadow agreement, log-only allows). */
function notedShipper(shipper: DecisionShipper, notes: DecisionNoteMetrics): DecisionShipper {
  return {
    ...shipper,
    push(record, lines) {
      notes.observe(record);
      shipper.push(record, lines);
    },
  };
}

export function createSidecar(options: SidecarOptions): Sidecar {
  if (typeof options !== "object" || options === null) throw new SidecarConfigError("options are required");
  const { logger, egress } = options;
  const metrics = createSidecarMetrics(options.registry);
  const catalogTtlMs = positiveIntOption(options.catalogTtlMs, 30_000, "catalogTtlMs");
  // Settings: their defaults live in the schema (config.ts) only; a root that forgot one fails here.
  const { stalenessMs, policyTtlMs, policyMaxAgeMs, auditMaxPending, journalMaxBytes } = options;
  const { maxEntries, maxBytes, loadConcurrency } = options.policyCache ?? {};
  for (const [name, value] of Object.entries({
    stalenessMs,
    policyTtlMs,
    policyMaxAgeMs,
    auditMaxPending,
    journalMaxBytes,
    "policyCache.maxEntries": maxEntries,
    "policyCache.maxBytes": maxBytes,
    "policyCache.loadConcurrency": loadConcurrency,
  }))
    positiveIntOption(value, undefined, name);

  const redis =
    options.redis === undefined
      ? undefined
      : createRedisPolicyStore({
          url: options.redis.url,
          ...(options.redis.commandTimeoutMs === undefined
            ? {}
            : { commandTimeoutMs: options.redis.commandTimeoutMs }),
        });
  // The staleness bound: decisions from the cache only while the authority's change log was
  // confirmed within the lease it grants (decision 2507).
  let leaseLapsed = false;
  const lease = createAuthorityLease({
    source: options.authority,
    onRenewal: (result, error) => {
      metrics.freshnessRenewal(result);
      // Logged when the lease lapses and when it is back, not on every failed renewal.
      if (result === "ok" && leaseLapsed) {
        leaseLapsed = false;
        logger.info("policy change log confirmed again; deciding from the cache");
      } else if (result === "error" && !leaseLapsed && !lease.held()) {
        leaseLapsed = true;
        logger.warn(
          { err: errorSummary(error) },
          "policy change log not confirmed within the staleness bound; every decision is 503 until it is",
        );
      }
    },
  });
  const opener = createSignedPolicyVerifier({
    serviceIdentity: options.policyKeys.serviceIdentity,
    source: options.authority,
    ...(options.policyKeys.pinned === undefined ? {} : { pinned: options.policyKeys.pinned }),
  });
  const policies = createVerifiedPolicyCache({
    source: options.authority,
    freshness: lease,
    opener,
    ...(redis === undefined || options.redis === undefined
      ? {}
      : { redis: { store: redis, keys: deriveCacheKeys(options.redis.cacheKey) } }),
    stalenessMs: options.stalenessMs,
    ttlWithoutRedisMs: options.policyTtlMs,
    maxAgeMs: options.policyMaxAgeMs,
    localMaxEntries: options.policyCache.maxEntries,
    localMaxBytes: options.policyCache.maxBytes,
    loadConcurrency: options.policyCache.loadConcurrency,
    events: {
      lookup: (layer: CacheLayer, hit: boolean) => metrics.cache("policy", layer, hit),
      verificationFailure: (layer) => metrics.verificationFailure(layer),
      headRead: (result) => metrics.headRead(result),
      writeBack: (result) => metrics.policyWriteBack(result),
    },
  });
  const catalogs = createFetchCache<Capability | undefined>({
    load: async (key) => {
      const [partnerId = "", capabilityId = ""] = key.split("\u0000");
      const value = await options.authority.fetchCapability(partnerId, capabilityId);
      return { value, ttlMs: value === undefined ? UNRESOLVED_CATALOG_TTL_MS : catalogTtlMs };
    },
  });
  const credentials = createFetchCache<InjectedCredentials>({
    load: async (key) => {
      const [partnerId = "", profileId = ""] = key.split("\u0000");
      const fetched = await options.authority.fetchCredentials(partnerId, profileId);
      return { value: { headers: fetched.headers, query: fetched.query }, ttlMs: fetched.ttlMs };
    },
  });
  const journal =
    options.journalDir === undefined
      ? undefined
      : openDecisionJournal({
          dir: options.journalDir,
          maxBytes: options.journalMaxBytes,
        });
  if (journal !== undefined && journal.recoveredCount > 0)
    logger.warn(
      { records: journal.recoveredCount },
      "decision records of an earlier process found in the journal; shipping them",
    );
  const exporter = options.decisionExport;
  const shippedJournal = exportingJournal(journal, exporter);
  const auditLog = createDecisionShipper({
    ...(shippedJournal === undefined ? {} : { journal: shippedJournal }),
    send: (records) => options.authority.sendDecisions(records, { exported: exporter !== undefined }),
    maxPending: options.auditMaxPending,
    onStateChange: (state, pending, error) => {
      // Unreachable, 5xx, 401/403: retried (a full queue then fails closed); the log says why.
      if (state === "failing")
        logger.warn(
          { pending, err: errorSummary(error) },
          "decision records not delivered to the authority; retrying",
        );
      else logger.info({ pending }, "decision records delivered again");
    },
    onRefused: (error) => {
      metrics.auditRecords("refused", 1);
      logger.error({ err: errorSummary(error) }, "a decision record was refused by the authority; set aside");
    },
    onDelivered: (count) => metrics.auditRecords("delivered", count),
  });
  const decisionEngine = createSidecarEngine({
    tokens: createVerifiedTokenCache({ verifier: options.verifier }),
    policies,
    catalogs: {
      async get(partnerId, capabilityId) {
        const { value, hit } = await catalogs.get(`${partnerId}\u0000${capabilityId}`);
        metrics.cache("capability", hit ? "local" : "authority", hit || value !== undefined);
        return value;
      },
      peek(partnerId, capabilityId) {
        const cached = catalogs.peek(`${partnerId}\u0000${capabilityId}`);
        if (cached !== undefined) metrics.cache("capability", "local", true);
        return cached;
      },
      prefetch(partnerId, capabilityId) {
        const key = `${partnerId}\u0000${capabilityId}`;
        // A failure is the later get's to report (failures are not cached: it asks again).
        if (catalogs.peek(key) === undefined) catalogs.get(key).catch(() => undefined);
      },
    },
    credentials: {
      async get(partnerId, profileId) {
        const { value, hit } = await credentials.get(`${partnerId}\u0000${profileId}`);
        metrics.cache("credentials", hit ? "local" : "authority", true);
        return value;
      },
      peek(partnerId, profileId) {
        const cached = credentials.peek(`${partnerId}\u0000${profileId}`);
        if (cached === undefined) return undefined;
        metrics.cache("credentials", "local", true);
        return cached.value;
      },
      prefetch(partnerId, profileId) {
        const key = `${partnerId}\u0000${profileId}`;
        // A failure is the later get's to report (failures are not cached: it asks again).
        if (credentials.peek(key) === undefined) credentials.get(key).catch(() => undefined);
      },
    },
    capabilityMap: options.capabilityMap,
    ...(options.constraintsRollout === undefined ? {} : { constraintsRollout: options.constraintsRollout }),
    onTokenCheck: (result) => metrics.tokenCheck(result),
    ...shadowPoliciesOf(options.authority, opener, logger),
    logOnly: (capability) => options.authority.inLogOnlyMode?.(capability) === true,
  });
  const engine = auditedEngine(
    decisionEngine,
    exportingShipper(
      notedShipper(auditLog, decisionNoteMetrics(metrics.registry, "authority_sidecar", logger)),
      exporter,
    ),
    undefined,
    journalErrorReporter(metrics, logger),
  );

  const checkServer: CheckServer = createCheckServer({
    check: tracedCheck(options.tracing, createExtAuthzCheck(engine)),
    deadlineMs: options.decisionTimeoutMs,
    logger,
    onDecision: (event) => metrics.decision("grpc", outcomeOf(event), event.reason, event.durationMs / 1000),
    onRejected: (reason) => metrics.grpcRejected(reason),
  });
  const proxy: ForwardProxy = createForwardProxy({
    engine,
    metrics,
    logger,
    egress,
    ...(options.tracing === undefined ? {} : { tracing: options.tracing }),
    decisionTimeoutMs: options.proxyDecisionTimeoutMs,
    upstreamTimeoutMs: options.upstreamTimeoutMs,
    maxResponseBytes: options.maxResponseBytes,
    maxRequestBytes: options.maxRequestBytes,
  });

  if (redis !== undefined) metrics.trackRedisUp(() => redis.up);
  metrics.trackFreshnessLease(() => lease.held());
  metrics.trackInFlight("grpc", () => checkServer.inFlight);
  metrics.trackInFlight("proxy", () => proxy.inFlight);
  metrics.trackAuditPending(() => auditLog.pending());
  if (journal !== undefined) metrics.trackJournalBytes(() => journal.bytes());
  // Ready means a first allowed decision can be made within Envoy's deadline: the callers' JWKS
  // is fetched, the sidecar's own credentials (token, connection) are proven against the
  // authority, the gRPC port answers an RPC, and the process-wide cold paths of a decision
  // have run once (warm-decision.ts).
  let ownPartnerId: string | undefined;
  const warmSteps: WarmUpStep[] = [
    {
      name: "credentials",
      failure: "the authority service did not accept the sidecar's own credentials",
      run: async () => {
        ownPartnerId = (await options.authority.proveCredentials()).partnerId;
      },
    },
    {
      // The mapped capabilities' catalogs, fetched before ready (warm-decision.ts); a failure
      // here is the first Check's to report, not readiness'.
      name: "catalogs",
      failure: "the configured capabilities' catalogs could not be prepared",
      after: ["credentials"],
      run: async () => {
        const partnerId = ownPartnerId;
        if (partnerId === undefined) return;
        await warmCapabilityCatalogs(options.capabilityMap.capabilityIds, async (capabilityId) => {
          await catalogs.get(`${partnerId}\u0000${capabilityId}`);
        });
      },
    },
  ];
  warmSteps.push({
    name: "policy_changes",
    failure: "the authority's policy change log could not be read",
    run: async () => {
      if (!(await lease.whenCurrent(5000))) {
        throw new PolicyCacheError("freshness_unavailable", "no freshness lease yet");
      }
    },
  });
  const warmVerifier = options.verifier.warm?.bind(options.verifier);
  if (warmVerifier !== undefined) {
    warmSteps.unshift({ name: "jwks", failure: "the callers' JWKS could not be fetched", run: warmVerifier });
  }
  // A Check that arrives while the process warms up is answered before the warm-up's CPU-bound
  // parts go on (decision 3141): they are for the first Check after ready, and a Check already
  // in flight pays for its own cold paths. Each wait is bounded by a decision's deadline.
  const checksFirst = () => afterRequestsInFlight(() => checkServer.inFlight > 0, options.decisionTimeoutMs);
  // The decision path's warm-up keeps the CPU busy while the network steps wait for their
  // answers: it starts once their requests are sent, and yields between its parts (none holds
  // the CPU for more than a few hundred milliseconds, far inside their deadlines); the gRPC
  // probe runs after it.
  warmSteps.push({
    name: "decision_path",
    failure: "the decision path's self-check failed",
    run: async () => {
      await checksFirst();
      await warmDecisionPath(checksFirst);
      collectStartUpGarbage();
    },
  });
  let grpcTarget: string | undefined;
  warmSteps.push({
    name: "grpc_serving",
    failure: "the ext_authz gRPC port did not answer a health check",
    after: ["decision_path"],
    run: async () => {
      if (grpcTarget === undefined) throw new Error("the gRPC port is not bound");
      await checksFirst();
      await probeOwnGrpcPort(grpcTarget);
    },
  });
  const warmUp = createWarmUp({ steps: warmSteps, logger });
  let grpcUp = false;
  let proxyUp = false;
  let closing = false;
  let closed: Promise<void> | undefined;
  const readiness = () => {
    const checks = {
      grpc: grpcUp,
      proxy: proxyUp,
      ...(redis === undefined ? {} : { redis: redis.reachedOnce }),
      audit: auditLog.accepting(),
      ...warmUp.checks(),
    };
    return { ready: !closing && Object.values(checks).every(Boolean), checks };
  };
  const health: HealthServer = createHealthServer({
    registry: metrics.registry,
    ready: readiness,
    live: () => closed === undefined,
  });

  return {
    engine,
    policies,
    metrics,
    redis,
    freshness: lease,
    get ready() {
      return readiness().ready;
    },
    flushAudit: (timeoutMs) => auditLog.flush(timeoutMs),
    async whenReady(timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      if (!(await warmUp.whenDone(timeoutMs))) return false;
      while (!readiness().ready) {
        if (closing || Date.now() >= deadline) return false;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      return true;
    },

    async start() {
      const { grpc, proxy: proxyAddress, metrics: metricsAddress } = options.listen;
      const { port: metricsPort } = await health.listen(metricsAddress);
      const grpcHost = grpc.host.includes(":") ? `[${grpc.host}]` : grpc.host;
      const { port: grpcPort } = await checkServer.listen(`${grpcHost}:${grpc.port}`);
      grpcUp = true;
      // the probe dials the bound address; a wildcard one is reached through loopback
      const probeHost = grpc.host === "0.0.0.0" ? "127.0.0.1" : grpc.host === "::" ? "[::1]" : grpcHost;
      grpcTarget = `${probeHost}:${grpcPort}`;
      const { port: proxyPort } = await proxy.listen(proxyAddress);
      proxyUp = true;
      egress.addPlatformEndpoints(
        { host: grpc.host, port: grpcPort },
        { host: proxyAddress.host, port: proxyPort },
        { host: metricsAddress.host, port: metricsPort },
      );
      lease.start();
      warmUp.start();
      logger.info({ grpcPort, proxyPort, metricsPort, redis: redis !== undefined }, "sidecar listening");
      return { grpc: grpcPort, proxy: proxyPort, metrics: metricsPort };
    },

    close({ graceMs = 10_000, drainMs = 0 } = {}) {
      closed ??= (async () => {
        closing = true;
        warmUp.stop();
        if (drainMs > 0) {
          // Still serving: gRPC health stays SERVING too, so an Envoy that health-checks the
          // ext_authz cluster keeps sending the Checks this period is for.
          logger.info({ drainMs }, "not ready; still answering until the drain period ends");
          await new Promise((resolve) => setTimeout(resolve, drainMs));
        }
        await Promise.all([checkServer.close({ graceMs }), proxy.close({ graceMs })]);
        grpcUp = false;
        proxyUp = false;
        const { lost } = await auditLog.close(graceMs);
        journal?.close();
        await exporter?.close(graceMs);
        if (lost > 0)
          logger.error(
            { lost, journaled: journal !== undefined },
            journal === undefined
              ? "decision records could not be delivered before shutdown"
              : "decision records not delivered before shutdown stay in the journal for the next start",
          );
        lease.close();
        policies.close();
        await redis?.close();
        await health.close();
        await options.tracing?.shutdown(graceMs);
        logger.info("sidecar stopped");
      })();
      return closed;
    },
  };
}

/** How often, at most, a run of records that could not be journaled is logged (each is counted). */
const JOURNAL_ERROR_LOG_MS = 10_000;

/**
 * Counts each record that could not be written ahead, and logs the first of a run and then at
 * most every 10 s with how many since: at the cap every decision fails alike.
 */
function journalErrorReporter(metrics: SidecarMetrics, logger: Logger): (error: Error) => void {
  let loggedAt = Number.NEGATIVE_INFINITY;
  let since = 0;
  return (error) => {
    const full = error instanceof JournalFullError;
    metrics.journalUnwritten(full ? "full" : "error");
    since++;
    const now = performance.now();
    if (now - loggedAt < JOURNAL_ERROR_LOG_MS) return;
    logger.error(
      { err: errorSummary(error), records: since },
      full
        ? "the decision journal is full (records not delivered to the authority); allows are answered 503"
        : "a decision record could not be journaled; the allow was denied",
    );
    loggedAt = now;
    since = 0;
  };
}
