/**
 * The composition root of `authority serve`: from its validated configuration it builds the
 * process's infrastructure — store, bearer verifier, policy protector (the upstream crypto
 * service in `crypto` mode — no policy key in this process — or, in the one-process
 * `embedded` mode, key rings kept in the store under the KEK), key rings, egress policy,
 * policy-change publisher, audit recorder — then every service on top of them
 * (services.ts), the HTTP app with health endpoints, listen and an orderly close. Tests,
 * benchmarks and `authority dev` call it too, with overrides for what they supply.
 */

import type { AddressInfo } from "node:net";
import type { FastifyInstance } from "fastify";
import type { Registry } from "prom-client";
import { listLogOnly } from "../../admin/log-only.ts";
import type { PlatformEndpoints } from "../../admin/platform-diagnostics.ts";
import type { SecretKeys } from "../../admin/secret-box.ts";
import { migrateSubjectIdentities } from "../../admin/subject-identity-migration.ts";
import { adminStreamOf, createAdminChain } from "../../audit/admin-chain.ts";
import { createChainLinker, isChainedLog } from "../../audit/chain.ts";
import {
  type AuditSeal,
  type Checkpointer,
  type CheckpointSigner,
  recoverChainHeads,
  startCheckpoints,
} from "../../audit/checkpoints.ts";
import { configuredExporter } from "../../audit/export/configured.ts";
import { exportingRecorder } from "../../audit/export/recorder-tap.ts";
import { type AuditRecorder, createAuditRecorder } from "../../audit/recorder.ts";
import { notingRecorder } from "../../audit/recorder-notes.ts";
import { type RetentionWorker, retentionIsEmpty, startRetention } from "../../audit/retention.ts";
import { openStoreWriteAhead, readingAfterRecords, type WriteAhead } from "../../audit/write-ahead.ts";
import { watchBindingRecordWrites } from "../../bindings/binding-records.ts";
import type { BindingRuntimeOptions } from "../../bindings/runtime.ts";
import type { AuthorityConfig } from "../../config/authority.ts";
import { loadKek } from "../../crypto/index.ts";
import { AuthorityError } from "../../errors.ts";
import { createEgressPolicy, type EgressPolicy, endpointOfUrl } from "../../execute/egress.ts";
import type { Executor } from "../../execute/executor.ts";
import { createTrustedIssuersVerifier } from "../../identity/trusted-issuers.ts";
import { createVerifiedTokenCache } from "../../identity/verified-token-cache.ts";
import { mcpResourceUrl } from "../../mcp/resource-metadata.ts";
import { decisionNoteMetrics, logOnlyModeGauge } from "../../observability/decision-notes.ts";
import { createLogger, type Logger } from "../../observability/logger.ts";
import { counter, createMetricsRegistry } from "../../observability/metrics.ts";
import { exportErrorLogger, startTracing, tracingMetrics } from "../../observability/tracing.ts";
import { createPolicyChangePublisher } from "../../policy/cache/publisher.ts";
import { createSidecarLeases } from "../../policy/change-log.ts";
import type { KeyRingSource } from "../../policy/local-protector.ts";
import type { PolicyProtector } from "../../policy/protector.ts";
import type { DecisionRuntime } from "../../policy/runtime.ts";
import { createStoredKeyRings } from "../../policy/stored-key-rings.ts";
import { openStore } from "../../store/index.ts";
import type { Store } from "../../store/store.ts";
import { traceRequests } from "../http/tracing.ts";
import { createAuthorityApp } from "./app.ts";
import { keyRingCheckpointSigner } from "./checkpoint-signers.ts";
import type { AuthorityContext, BearerVerifier } from "./context.ts";
import { configuredKeyCustody } from "./key-custody.ts";
import { type AuthorityServices, composeAuthorityServices } from "./services.ts";

/** Longest time a verified token is reused without checking its signature again. */
const TOKEN_CACHE_MAX_AGE_MS = 60_000;

/**
 * Remembers successful verifications (identity/verified-token-cache.ts: keyed by the token's
 * SHA-256, never the token) so a client repeating its token is not re-verified on every
 * request. An entry lives at most 60 s and never past the token's own expiry; failures are
 * never cached.
 */
export function createCachingVerifier(
  verifier: BearerVerifier,
  options: { max: number; now?: () => number },
): BearerVerifier {
  if (options.max === 0) return verifier;
  const cache = createVerifiedTokenCache({
    verify: (token) => verifier.verify(token),
    expiresAtMs: (verified) => {
      const exp = verified.claims.exp;
      return typeof exp === "number" ? exp * 1000 : undefined;
    },
    maxAgeMs: TOKEN_CACHE_MAX_AGE_MS,
    maxEntries: options.max,
    ...(options.now === undefined ? {} : { now: options.now }),
  });
  const inner = verifier.jwksStatus?.bind(verifier);
  return {
    ...(inner === undefined ? {} : { jwksStatus: inner }),
    verify: (token) => cache.verify(token),
  };
}

/** Pieces a caller (tests, `authority dev`) may supply instead of building them from config. */
export interface AuthorityServiceOverrides {
  /** Used as is and not closed by close(). */
  readonly store?: Store;
  readonly verifier?: BearerVerifier;
  /** The verifier of /mcp (default: the trusted issuers, each also accepting the MCP resource URL as audience; `verifier` when only that is given). */
  readonly mcpVerifier?: BearerVerifier;
  readonly protector?: PolicyProtector;
  /** Key rings for secrets, envelopes and workload tokens (default: in the store under the KEK). */
  readonly keyRings?: KeyRingSource;
  /**
   * null: no key rings for auth-profile secrets and envelopes (those routes answer 503;
   * workload tokens need `bindings.tokenKeyRings` then). Tests of that refusal only.
   */
  readonly secretKeyRings?: null;
  readonly logger?: Logger;
  readonly now?: () => Date;
  /** Used instead of the policy built from `config.egress` and the configured service URLs. */
  readonly egress?: EgressPolicy;
  /** Told after every stored policy change, instead of the Redis publisher of `config.redisUrl`. */
  readonly onPolicyChange?: (subjectId: string, head: number) => void | Promise<void>;
  /** Platform services the diagnostics probe, instead of the configured URLs (null: none). */
  readonly platform?: PlatformEndpoints | null;
  /** Binding-runtime pieces (a ready executor, key rings, idempotency) over the configured ones. */
  readonly bindings?: BindingRuntimeOptions;
  /** A ready MCP executor (tests, benchmarks). */
  readonly mcpExecutor?: Executor;
  /** Signs the decision chains' checkpoints (default: the key custody's, or the key rings'). */
  readonly checkpointSigner?: CheckpointSigner;
}

/**
 * The egress policy of `authority serve`: the admin's allow list, and every service of the
 * platform this process knows of refused as an upstream (its own port is added once bound).
 */
export function authorityEgressPolicy(config: AuthorityConfig): EgressPolicy {
  return createEgressPolicy({
    allow: config.egress.allow,
    // A binding may name the operator's own issuer's key set: nothing the process does not fetch already.
    // … and the decision export endpoint the operator configured.
    operatorUrls: [
      ...config.trustedIssuers.map((trusted) => trusted.jwksUrl),
      ...(config.decisionExport === undefined ? [] : [config.decisionExport.url]),
      // … and the traces endpoint.
      ...(config.tracing === undefined ? [] : [config.tracing.url]),
    ],
    platformEndpoints: [
      config.listen.port === 0 ? undefined : config.listen,
      endpointOfUrl(config.publicUrl),
      ...config.trustedIssuers.flatMap((trusted) => [
        endpointOfUrl(trusted.issuer),
        endpointOfUrl(trusted.jwksUrl),
      ]),
      endpointOfUrl(config.managedUrl),
      endpointOfUrl(config.cryptoUrl),
      endpointOfUrl(config.redisUrl),
      endpointOfUrl(config.storeUrl),
      endpointOfUrl(config.decisionExport?.url),
      endpointOfUrl(config.tracing?.url),
    ].filter((endpoint) => endpoint !== undefined),
  });
}

/**
 * The background retention of the configured logs and usage rollups (none when nothing is
 * configured), counting what it removes in `authority_retention_removed_total{record}`.
 */
function startConfiguredRetention(
  config: AuthorityConfig,
  store: Store,
  metrics: Registry,
  logger: Logger,
  checkpoints: Checkpointer,
): RetentionWorker | undefined {
  if (retentionIsEmpty(config.retention)) return undefined;
  const removed = counter(
    metrics,
    "authority_retention_removed_total",
    "Records the background retention removed, by record type (audit, mcp_audit, evidence, usage_hour, usage_day).",
    ["record"],
  );
  return startRetention({
    store,
    settings: config.retention,
    intervalMs: config.retention.intervalMs,
    // Each chain's new start is sealed before its older records go (docs/decisions/2681).
    beforeTrim: (log, entries) =>
      isChainedLog(log) ? checkpoints.sealTrimmed(log, entries) : Promise.resolve(),
    onRemoved: (record, count) => removed.inc({ record }, count),
    onError: (err) => logger.warn({ err }, "retention pass failed; the next pass retries"),
  });
}

export interface AuthorityService {
  readonly app: FastifyInstance;
  /** Every service of the process (the route groups' argument). */
  readonly context: AuthorityServices;
  readonly runtime: DecisionRuntime;
  readonly recorder: AuditRecorder;
  /** Starts serving on the configured address; resolves to the base URL bound. */
  listen(): Promise<string>;
  /**
   * Not ready at once; serves on for `drainMs` (default 0) while the endpoints are withdrawn;
   * then stops accepting, drains requests in flight, flushes the audit buffer, closes the store.
   */
  close(options?: { drainMs?: number }): Promise<{ auditFlushed: boolean; auditLost: number }>;
}

const livenessSchema = {
  type: "object",
  required: ["status"],
  properties: { status: { type: "string", const: "ok" } },
} as const;

const readinessSchema = {
  type: "object",
  required: ["status", "store", "audit"],
  properties: {
    status: { type: "string", enum: ["ready", "unavailable"] },
    store: { type: "string", enum: ["ok", "unavailable"] },
    /** Present with --redis-url. */
    redis: { type: "string", enum: ["ok", "unavailable"] },
    audit: {
      type: "object",
      required: ["state", "pending"],
      properties: { state: { type: "string" }, pending: { type: "integer" } },
    },
    subject_keys: {
      type: "object",
      description:
        "Custody modes: subjects whose owner at the crypto service was missing or refused on last use (their decisions fail; the service stays ready).",
      required: ["unusable"],
      properties: { unusable: { type: "integer" } },
    },
  },
} as const;

/** What a Redis connection error may say in a log: its kind, never an address with credentials. */
function redisErrorSummary(error: unknown): { name?: string; code?: string } | undefined {
  if (typeof error !== "object" || error === null) return undefined;
  const { name, code } = error as { name?: unknown; code?: unknown };
  return {
    ...(typeof name === "string" ? { name } : {}),
    ...(typeof code === "string" ? { code } : {}),
  };
}

const readinessResponses = { 200: readinessSchema, 503: readinessSchema } as const;

export async function buildAuthorityService(
  config: AuthorityConfig,
  overrides: AuthorityServiceOverrides = {},
): Promise<AuthorityService> {
  const logger = overrides.logger ?? createLogger("authority", config.logLevel);
  const ownsStore = overrides.store === undefined;
  const store =
    overrides.store ??
    (await openStore(config.storeUrl, {
      postgres: { poolSize: config.storePool.size, statementTimeoutMs: config.storePool.statementTimeoutMs },
    }));
  /** Started checkpointers: a start that fails stops their timers. */
  const started: Checkpointer[] = [];
  let writeAhead: WriteAhead | undefined;
  try {
    // Decision records written ahead beside a SQLite store (decision 2931): what an earlier
    // process of this replica left there is stored before anything else reads the logs.
    writeAhead = await openStoreWriteAhead(store, config.auditChain.replicaId);
    /** Stores what the audit writer holds (set once it exists): log reads come after it. */
    let storeHeldRecords: () => Promise<unknown> = async () => true;
    const readStore = writeAhead === undefined ? store : readingAfterRecords(store, () => storeHeldRecords());
    /** Forgets the binding records invoke reuses (set once they exist): a change made here counts here at once. */
    let forgetBindingRecords = (): void => {};
    const contextStore = watchBindingRecordWrites(readStore, () => forgetBindingRecords());
    // Records written before subjects carried their identity kind get one (idempotent).
    const migration = await migrateSubjectIdentities(store);
    if (migration.migrated > 0) logger.info(migration, "subject records migrated to an identity kind");
    // Key rings kept in the store, wrapped under the KEK: they seal auth-profile secrets,
    // sign binding envelopes and workload tokens, and (unless overridden) protect policies.
    // Key rings kept in the store, wrapped under the KEK — only in the embedded mode (or when
    // a caller supplies them): in crypto and managed modes the crypto service holds every key.
    let storedRings: KeyRingSource | undefined = overrides.keyRings;
    const keyRings = async (): Promise<KeyRingSource> => {
      storedRings ??= createStoredKeyRings({
        store,
        kek: await loadKek({
          ...(config.kek.value === undefined ? {} : { kek: config.kek.value }),
          kekFile: config.kek.file,
          createIfMissing: config.kek.createIfMissing,
        }),
      });
      return storedRings;
    };
    const custody =
      overrides.protector === undefined
        ? await configuredKeyCustody(config, keyRings, logger)
        : {
            protector: overrides.protector,
            envelopes: undefined,
            secrets: undefined,
            checkpoints: keyRingCheckpointSigner(async () =>
              (await keyRings()).keyRing(`service:${config.serviceIdentity}`),
            ),
          };
    // Auth-profile secrets and the workload-token key: the crypto service's secret box, or
    // the key rings (loading the KEK now if nothing above did).
    const secretKeys: SecretKeys = overrides.keyRings ?? custody.secrets ?? (await keyRings());
    const protector = custody.protector;
    const verifier =
      overrides.verifier ??
      createCachingVerifier(
        // Each trusted issuer with its own keys, audiences and claim mapping; only access
        // tokens act as bearer credentials (RFC 9068 / token_use) unless an issuer says how.
        createTrustedIssuersVerifier(config.trustedIssuers),
        { max: config.tokenCache.max },
      );
    const mcpResource = mcpResourceUrl(config.publicUrl);
    const mcpVerifier =
      overrides.mcpVerifier ??
      overrides.verifier ??
      createCachingVerifier(
        createTrustedIssuersVerifier(
          config.trustedIssuers.map((trusted) => ({
            ...trusted,
            audience: trusted.audience.includes(mcpResource)
              ? trusted.audience
              : [...trusted.audience, mcpResource],
          })),
        ),
        { max: config.tokenCache.max },
      );
    // With Redis configured, every policy write sets the subject's head and is published,
    // so sidecars drop cached policies within their freshness bound.
    const publisher =
      overrides.onPolicyChange !== undefined || config.redisUrl === undefined
        ? undefined
        : createPolicyChangePublisher({
            url: config.redisUrl,
            // Without Redis, policy changes reach sidecars only through their revalidation:
            // said once per change, and /readyz waits for a first connection.
            onReachability: (reachable, error) => {
              if (reachable) logger.info("Redis (--redis-url) reachable; policy changes are published");
              else
                logger.error(
                  { err: redisErrorSummary(error) },
                  "Redis (--redis-url) unreachable: policy changes are not published to sidecars; retrying",
                );
            },
          });
    const onPolicyChange =
      overrides.onPolicyChange ??
      (publisher === undefined
        ? undefined
        : async (subjectId: string, head: number) => void (await publisher.publish(subjectId, head)));
    const egress = overrides.egress ?? authorityEgressPolicy(config);
    const sidecarLeases = createSidecarLeases({ store, leaseMs: config.sidecarLeaseMs });
    const context: AuthorityContext = {
      egress,
      config: {
        publicUrl: config.publicUrl,
        issuer: config.issuer,
        audience: config.audience,
        bodyLimitBytes: config.bodyLimitBytes,
        serviceIdentity: config.serviceIdentity,
        parameterScoping: config.parameterScoping,
        mcp: config.mcp,
        policyProtection: { mode: config.policyProtection.mode },
      },
      store: contextStore,
      verifier,
      mcpVerifier,
      protector,
      ...(overrides.secretKeyRings === null ? {} : { secretKeyRings: secretKeys }),
      ...(overrides.platform === null
        ? {}
        : {
            platform: overrides.platform ?? {
              jwksUrl: config.jwksUrl,
              cryptoUrl: config.cryptoUrl,
              cryptoInUse: config.policyProtection.mode !== "embedded",
              managedUrl: config.managedUrl,
              ...(config.redisUrl === undefined ? {} : { redisUrl: config.redisUrl }),
            },
          }),
      ...(onPolicyChange === undefined ? {} : { onPolicyChange }),
      // Sidecars follow the policy change log here; a change that takes access away waits out their leases.
      sidecarLeases,
      logger,
      now: overrides.now ?? (() => new Date()),
    };
    const metrics = createMetricsRegistry();
    const exporter = configuredExporter(config.decisionExport, {
      fetch: egress.fetch,
      registry: metrics,
      metricPrefix: "authority",
      serviceName: "authority",
      logger,
    });
    const tracing = await startTracing(config.tracing, {
      fetch: egress.fetch,
      serviceName: "authority",
      onExportError: exportErrorLogger(logger),
      metrics: tracingMetrics(metrics, "authority"),
    });
    // This replica's decision chains continue from their heads in the store.
    const chain = createChainLinker({
      stream: config.auditChain.replicaId,
      heads: await recoverChainHeads(store, config.auditChain.replicaId, context.now()),
    });
    // Policy and binding changes: a stream of their own, written in the admin API's transactions.
    const adminStream = adminStreamOf(config.auditChain.replicaId);
    const adminLinker = createChainLinker({
      stream: adminStream,
      heads: await recoverChainHeads(store, adminStream, context.now()),
    });
    const audit = createAuditRecorder({
      store,
      chain,
      ...(writeAhead === undefined ? {} : { writeAhead }),
      maxPending: config.auditBuffer,
      onStateChange: (event) => {
        if (event.state === "failing") {
          logger.warn({ pending: event.pending, err: event.error }, "audit writes failing; buffering");
        } else logger.info({ pending: event.pending }, "audit writes recovered");
      },
    });
    // Not while the store fails: those records wait for it anyway, and a read should fail fast.
    storeHeldRecords = () =>
      audit.pending() > 0 && audit.stats().state === "ok"
        ? audit.flush(config.shutdownTimeoutMs)
        : Promise.resolve();
    const noted = notingRecorder(audit, decisionNoteMetrics(metrics, "authority", logger));
    logOnlyModeGauge(
      metrics,
      "authority",
      async () => (await listLogOnly({ store })).length,
      (err) => logger.warn({ err }, "log-only capabilities could not be counted"),
    );
    const recorder = exporter === undefined ? noted : exportingRecorder(noted, exporter);
    const checkpointsOf = (linker: typeof chain): Checkpointer => {
      const checkpointer = startCheckpoints({
        store,
        linker,
        signer: overrides.checkpointSigner ?? custody.checkpoints,
        intervalMs: config.auditChain.checkpointIntervalMs,
        now: context.now,
        onError: (err) => logger.warn({ err }, "decision-chain checkpoint failed; the next one retries"),
      });
      started.push(checkpointer);
      return checkpointer;
    };
    const sealer = checkpointsOf(chain);
    const adminSealer = checkpointsOf(adminLinker);
    const auditSeal: AuditSeal = {
      async sealNow() {
        // A checkpoint seals stored heads: the queued records are stored first.
        if (!(await recorder.flush(config.shutdownTimeoutMs)))
          throw new AuthorityError("upstream_unavailable", "Queued audit records could not be stored.");
        const [payload] = await Promise.all([sealer.checkpoint("demand"), adminSealer.checkpoint("demand")]);
        if (payload === undefined) throw new AuthorityError("internal");
        return payload;
      },
    };
    const services = composeAuthorityServices(context, {
      auditSeal,
      adminChain: createAdminChain(store, adminLinker),
      decisions: {
        recordCacheMs: config.recordCacheMs,
        policyCache: config.policyCache,
        recorder,
        onInvalidCatalog: (info) =>
          logger.error(info, "stored catalog version is invalid; capability denied"),
      },
      bindings: {
        recordCacheMs: config.recordCacheMs,
        ...config.bindings,
        ...(custody.envelopes === undefined ? {} : { envelopes: custody.envelopes }),
        ...overrides.bindings,
      },
      ...(overrides.mcpExecutor === undefined ? {} : { mcpExecutor: overrides.mcpExecutor }),
    });
    const runtime = services.decisions;
    forgetBindingRecords = () => services.bindings.records.forget();

    const app = await createAuthorityApp(services, metrics);
    traceRequests(app, tracing);
    const retention = startConfiguredRetention(config, store, metrics, logger, sealer);
    const subjectKeys = custody.protector.subjectKeys;
    let draining = false;
    app.get("/healthz", { schema: { security: [], response: { 200: livenessSchema } } }, async () => ({
      status: "ok",
    }));
    app.get(
      "/readyz",
      { schema: { security: [], response: readinessResponses } },
      async (_request, reply) => {
        const health = await store.health();
        // Ready once Redis answered at least once (a wrong --redis-url never is); a later outage
        // shows here and in the log without taking every replica out (sidecars fall back to
        // the authority within their staleness bound).
        const redisReady = publisher === undefined || publisher.reachedOnce;
        const ready = !draining && health.ok && recorder.accepting() && redisReady;
        return reply.code(ready ? 200 : 503).send({
          status: ready ? "ready" : "unavailable",
          store: health.ok ? "ok" : "unavailable",
          ...(publisher === undefined ? {} : { redis: publisher.reachable ? "ok" : "unavailable" }),
          audit: { state: recorder.stats().state, pending: recorder.pending() },
          ...(subjectKeys === undefined ? {} : { subject_keys: { unusable: subjectKeys.unusable().length } }),
        });
      },
    );

    let closed: Promise<{ auditFlushed: boolean; auditLost: number }> | undefined;
    return {
      app,
      context: services,
      runtime,
      recorder,
      async listen() {
        await app.listen({ host: config.listen.host, port: config.listen.port });
        const address = app.server.address() as AddressInfo;
        egress.addPlatformEndpoints({ host: address.address, port: address.port });
        const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
        return `http://${host}:${address.port}`;
      },
      close({ drainMs = 0 } = {}) {
        closed ??= (async () => {
          draining = true;
          if (drainMs > 0) await new Promise((resolve) => setTimeout(resolve, drainMs));
          // Sidecars' reads held for a change are answered now, not after their hold.
          sidecarLeases.close();
          // fastify stops accepting, answers new requests on kept-alive sockets with 503,
          // and waits for requests in flight — each of which records its decision.
          await app.close();
          await retention?.stop();
          const { flushed, lost } = await recorder.close(config.shutdownTimeoutMs);
          if (!flushed) logger.error({ lost }, "audit records could not be written before shutdown");
          // Records not stored stay in the write-ahead file for the next start.
          writeAhead?.close();
          if (exporter !== undefined && !(await exporter.close(config.shutdownTimeoutMs)).flushed)
            logger.warn({ dropped: exporter.stats().dropped }, "decision export not flushed before shutdown");
          await tracing?.shutdown(config.shutdownTimeoutMs);
          // The last stored record of each chain is sealed before the store closes.
          for (const each of started) {
            each.stop();
            await each
              .checkpoint("shutdown")
              .catch((err: unknown) => logger.error({ err }, "the shutdown checkpoint could not be written"));
          }
          await publisher?.close();
          if (overrides.egress === undefined) await egress.close();
          if (ownsStore) await store.close();
          return { auditFlushed: flushed, auditLost: lost };
        })();
        return closed;
      },
    };
  } catch (error) {
    // Its timer must not outlive a start that failed.
    for (const checkpointer of started) checkpointer.stop();
    writeAhead?.close();
    if (ownsStore) await store.close();
    throw error;
  }
}
