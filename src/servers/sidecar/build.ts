/**
 * The composition root of `authority sidecar`: from its validated configuration it builds
 * the sidecar's collaborators — the authority client with the sidecar's own credentials, the
 * callers' token verifier, the pinned policy keys, the Redis cache key, the egress policy of
 * the forward proxy — and the sidecar around them (sidecar.ts). The CLI, `authority dev` and
 * tests call it; tests override what they supply themselves.
 */
import { readFile } from "node:fs/promises";
import type { Registry } from "prom-client";
import { startDecisionExport } from "../../audit/export/start.ts";
import { ConfigError } from "../../core/config-error.ts";
import type { JsonFetch } from "../../core/json-fetch.ts";
import type { PublicKeyRingJson } from "../../crypto/index.ts";
import { createEgressPolicy, type EgressPolicy, endpointOfUrl } from "../../execute/egress.ts";
import { createTrustedIssuersVerifier } from "../../identity/trusted-issuers.ts";
import { createLogger, type Logger } from "../../observability/logger.ts";
import { createMetricsRegistry } from "../../observability/metrics.ts";
import {
  exportErrorLogger,
  startTracing,
  type Tracing,
  tracingMetrics,
} from "../../observability/tracing.ts";
import { parseCapabilityMap } from "../../pipeline/capability-map.ts";
import type { TokenVerifier } from "../../pipeline/token-cache.ts";
import { parseCacheKey } from "../../policy/cache/index.ts";
import { parsePinnedPolicyKeys } from "../../policy/signed-policy.ts";
import { type AuthorityClient, createAuthorityClient } from "./authority-client.ts";
import type { SidecarConfig } from "./config.ts";
import { createNodeJsonFetch } from "./node-json-fetch.ts";
import { clientCredentialsTokenSource, fileTokenSource, type ServiceTokenSource } from "./service-token.ts";
import { createSidecar, type Sidecar } from "./sidecar.ts";

/** What a caller (tests, `authority dev`) supplies instead of building it from the configuration. */
export interface SidecarOverrides {
  readonly logger?: Logger;
  readonly registry?: Registry;
  /** The sidecar's own credentials toward the authority (default: token file or client credentials). */
  readonly token?: ServiceTokenSource;
  /** A ready authority client (then `token` is not used). */
  readonly authority?: AuthorityClient;
  /** Verifies the callers' bearer tokens (default: the configured trusted issuers). */
  readonly verifier?: TokenVerifier;
  /** Where the forward proxy may connect (default: the allow list, the platform's services refused). */
  readonly egress?: EgressPolicy;
  /** Pinned policy signer keys (default: read from `policyKeysFile`). */
  readonly pinnedPolicyKeys?: readonly PublicKeyRingJson[];
  /** Redis and the MAC key of its cache entries, instead of the configured URL and key file. */
  readonly redis?: { readonly url: string; readonly cacheKey: Uint8Array };
}

function tokenSource(config: SidecarConfig, fetch: JsonFetch): ServiceTokenSource {
  const credentials = config.credentials;
  return credentials.kind === "token_file"
    ? fileTokenSource(credentials.path)
    : clientCredentialsTokenSource({
        tokenUrl: credentials.tokenUrl,
        clientId: credentials.clientId,
        clientSecret: credentials.clientSecret,
        fetch,
      });
}

/** The pinned policy keys; a file that is missing or malformed stops the start, naming the path. */
export async function readPinnedKeys(path: string): Promise<PublicKeyRingJson[]> {
  let json: unknown;
  try {
    json = JSON.parse(await readFile(path, "utf8"));
  } catch (error) {
    const reason =
      (error as { code?: unknown }).code === "ENOENT" ? "does not exist" : "is not readable JSON";
    throw new ConfigError(`the policy keys file ${path} ${reason}`);
  }
  try {
    parsePinnedPolicyKeys(json);
  } catch (error) {
    throw new ConfigError(
      `the policy keys file ${path} is not a public key ring or a list of them (${error instanceof Error ? error.message : "invalid"})`,
    );
  }
  return (Array.isArray(json) ? json : [json]) as PublicKeyRingJson[];
}

/**
 * Resolution of the event-loop lag metric (`nodejs_eventloop_lag_seconds`): prom-client's
 * default, 10 ms, woke an idle sidecar a hundred times a second — about 4 ms of CPU per second
 * in every pod. A stall still shows in the metric when it delays one of the samples.
 */
const EVENT_LOOP_SAMPLE_MS = 100;

/**
 * Largest answer the sidecar reads from the authority or an issuer's JWKS: a signed policy of
 * hundreds of operations fits many times over.
 */
const MAX_PLATFORM_ANSWER_BYTES = 32 * 1024 * 1024;

/** The platform's services this sidecar knows of are never an upstream; its own ports are added on start. */
export function sidecarEgressPolicy(config: SidecarConfig): EgressPolicy {
  return createEgressPolicy({
    allow: config.egressAllow,
    // The traces and decision-export endpoints the operator configured: sent to as configured, never an upstream.
    operatorUrls: [config.tracing?.url, config.decisionExport?.url].filter((url) => url !== undefined),
    platformEndpoints: [
      config.authorityUrl,
      config.tracing?.url,
      config.decisionExport?.url,
      ...config.trustedIssuers.flatMap((trusted) => [trusted.issuer, trusted.jwksUrl]),
      config.credentials.kind === "client_credentials" ? config.credentials.tokenUrl : undefined,
      config.redis?.url,
    ]
      .map(endpointOfUrl)
      .filter((endpoint) => endpoint !== undefined),
  });
}

/** The sidecar's tracing when `--tracing-url` is set (the SDK loaded only then). */
function startSidecarTracing(
  config: SidecarConfig,
  egress: EgressPolicy,
  logger: Logger,
  registry: Registry,
): Promise<Tracing | undefined> {
  return startTracing(config.tracing, {
    fetch: egress.fetch,
    serviceName: "authority-sidecar",
    onExportError: exportErrorLogger(logger),
    metrics: tracingMetrics(registry, "authority_sidecar"),
  });
}

export async function buildSidecar(
  config: SidecarConfig,
  overrides: SidecarOverrides = {},
): Promise<Sidecar> {
  // No key that opens or signs a policy: signed policies are verified with public keys
  // (pinned here, or fetched from the authority; docs/sidecar.md "Policy keys").
  const pinned =
    overrides.pinnedPolicyKeys ??
    (config.policyKeysFile === undefined ? undefined : await readPinnedKeys(config.policyKeysFile));
  const redis =
    overrides.redis ??
    (config.redis === undefined
      ? undefined
      : {
          url: config.redis.url,
          cacheKey: parseCacheKey(await readFile(config.redis.cacheKeyFile, "utf8")),
        });
  const logger = overrides.logger ?? createLogger("sidecar", config.logLevel);
  const egress = overrides.egress ?? sidecarEgressPolicy(config);
  const registry =
    overrides.registry ?? createMetricsRegistry({ eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
  const tracing = await startSidecarTracing(config, egress, logger, registry);
  // The sidecar's own decision-log export (decision 2797): its modules load only when it is on.
  const decisionExport = await startDecisionExport(config.decisionExport, {
    fetch: egress.fetch,
    registry,
    metricPrefix: "authority_sidecar",
    serviceName: "authority-sidecar",
    logger,
  });
  // The authority's, the token endpoint's and the issuers' requests over node:http, not fetch: no
  // undici at start (decision 3081).
  const platformFetch = createNodeJsonFetch({ maxAnswerBytes: MAX_PLATFORM_ANSWER_BYTES });
  return createSidecar({
    ...(tracing === undefined ? {} : { tracing }),
    ...(decisionExport === undefined ? {} : { decisionExport }),
    authority:
      overrides.authority ??
      createAuthorityClient({
        baseUrl: config.authorityUrl,
        token: overrides.token ?? tokenSource(config, platformFetch),
        fetch: platformFetch,
      }),
    verifier:
      overrides.verifier ?? createTrustedIssuersVerifier(config.trustedIssuers, { fetch: platformFetch }),
    policyKeys: {
      serviceIdentity: config.serviceIdentity,
      ...(pinned === undefined ? {} : { pinned }),
    },
    capabilityMap: parseCapabilityMap(config.capabilityMap),
    ...(redis === undefined ? {} : { redis }),
    listen: config.listen,
    decisionTimeoutMs: config.decisionTimeoutMs,
    proxyDecisionTimeoutMs: config.proxyDecisionTimeoutMs,
    upstreamTimeoutMs: config.upstreamTimeoutMs,
    maxResponseBytes: config.maxResponseBytes,
    maxRequestBytes: config.maxRequestBytes,
    constraintsRollout: config.parameterScoping,
    auditMaxPending: config.auditMaxPending,
    journalDir: config.journalDir,
    journalMaxBytes: config.journalMaxBytes,
    stalenessMs: config.stalenessMs,
    policyTtlMs: config.policyTtlMs,
    policyMaxAgeMs: config.policyMaxAgeMs,
    policyCache: config.policyCache,
    logger,
    registry,
    egress,
  });
}
