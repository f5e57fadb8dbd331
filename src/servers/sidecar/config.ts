/**
 * The configuration of `authority sidecar`: its settings (one definition each;
 * docs/configuration.md is generated from them) and the typed configuration it starts from,
 * resolved by the shared mechanism (src/config/schema.ts) and validated once at start.
 */

import { join, resolve } from "node:path";
import {
  type DecisionExportConfig,
  decisionExportConfig,
  decisionExportSettings,
  optionalExport,
} from "../../config/decision-export.ts";
import {
  DEFAULT_SIDECAR_PROXY_PORT,
  isIstioReservedPort,
  istioPortMessage,
} from "../../config/istio-ports.ts";
import { defineProcess, type ProcessInputs, resolveProcessConfig } from "../../config/schema.ts";
import {
  bearerTokenSettings,
  boolean,
  duration,
  egressAllowSetting,
  httpUrl,
  integer,
  type ListenAddress,
  type LogLevel,
  list,
  listenAddress,
  logLevelSetting,
  path,
  redisUrl,
  setting as spec,
  text,
} from "../../config/settings.ts";
import { optionalTracing, type TracingConfig, tracingSettings } from "../../config/tracing.ts";
import { issuerConfig, trustedIssuersSetting } from "../../config/trusted-issuers.ts";
import { ConfigError } from "../../core/config-error.ts";
import type { EgressAllowEntry } from "../../core/egress-address.ts";
import type { TrustedIssuer } from "../../identity/trusted-issuers.ts";
import { JOURNAL_MAX_BYTES_DEFAULT } from "./decision-journal.ts";
import type { PolicyCacheBounds } from "./sidecar.ts";

export const sidecarSettings = {
  logLevel: logLevelSetting(),
  authorityUrl: spec({
    key: "authority-url",
    env: "AUTHORITY_URL",
    description: "the authority service",
    default: "http://127.0.0.1:8080",
    parse: httpUrl,
  }),
  grpcListen: spec({
    key: "grpc-listen",
    env: "AUTHORITY_SIDECAR_GRPC_LISTEN",
    description: "ext_authz gRPC address",
    default: "127.0.0.1:9191",
    parse: listenAddress,
  }),
  proxyListen: spec({
    key: "proxy-listen",
    env: "AUTHORITY_SIDECAR_PROXY_LISTEN",
    description: "forward proxy address",
    default: `127.0.0.1:${DEFAULT_SIDECAR_PROXY_PORT}`,
    parse: listenAddress,
  }),
  metricsListen: spec({
    key: "metrics-listen",
    env: "AUTHORITY_SIDECAR_METRICS_LISTEN",
    description: "metrics and health address",
    default: "127.0.0.1:9464",
    parse: listenAddress,
  }),
  redisUrl: spec({
    key: "redis-url",
    env: "AUTHORITY_REDIS_URL",
    description:
      "Redis for policy heads, change events and the sealed policy cache (without it: a local cache and authority revalidation every --policy-ttl-ms)",
    secret: true,
    parse: redisUrl,
  }),
  cacheKeyFile: spec({
    key: "cache-key-file",
    env: "AUTHORITY_SIDECAR_CACHE_KEY_FILE",
    description:
      "file holding the MAC key of sealed Redis entries (base64 text of 32 random bytes); required with Redis",
    parse: path,
  }),
  capabilityMap: spec({
    key: "capability-map",
    env: "AUTHORITY_SIDECAR_CAPABILITY_MAP",
    description:
      'JSON object: `host`, `host/prefix` or `/prefix` → capability id (e.g. `{"orders.internal":"orders"}`; docs/sidecar.md)',
    type: "JSON object",
    parse: text(),
  }),
  ...bearerTokenSettings,
  trustedIssuers: trustedIssuersSetting,
  tokenFile: spec({
    key: "token-file",
    env: "AUTHORITY_SIDECAR_TOKEN_FILE",
    description: "file with the sidecar's own bearer token for the authority service (re-read every minute)",
    parse: path,
  }),
  idpTokenUrl: spec({
    key: "idp-token-url",
    env: "AUTHORITY_IDP_TOKEN_URL",
    description: "token endpoint for the sidecar's client credentials",
    defaultText: "<issuer>/oauth2/token",
    parse: httpUrl,
  }),
  clientId: spec({
    key: "client-id",
    env: "AUTHORITY_CLIENT_ID",
    description:
      "the sidecar's OAuth client id, instead of a token file (a client with role `sidecar` or scope `authority/sidecar`)",
    parse: text(),
  }),
  clientSecret: spec({
    key: "client-secret",
    env: "AUTHORITY_CLIENT_SECRET",
    description: "the sidecar's OAuth client secret (environment only)",
    secret: true,
    noFlag: true,
    notInFile: true,
    parse: text({ secret: true }),
  }),
  serviceIdentity: spec({
    key: "service-identity",
    env: "AUTHORITY_SERVICE_IDENTITY",
    description:
      "service identity whose key signs `platform_service_v2` policies (signer `service:<identity>`)",
    default: "authority",
    parse: text(),
  }),
  policyKeysFile: spec({
    key: "policy-keys-file",
    env: "AUTHORITY_SIDECAR_POLICY_KEYS_FILE",
    description:
      'pinned public keys of policy signers (JSON: the crypto service\'s public key ring, or an array of them); for a pinned signer only these count. Without it, signer keys come from the authority (docs/sidecar.md "Policy keys")',
    parse: path,
  }),
  decisionTimeout: spec({
    key: "decision-timeout-ms",
    env: "AUTHORITY_SIDECAR_DECISION_TIMEOUT_MS",
    description: "ext_authz decision deadline in ms (past it: 503 deny)",
    default: 200,
    parse: duration("ms", 1, 60_000),
  }),
  proxyDecisionTimeout: spec({
    key: "proxy-decision-timeout-ms",
    env: "AUTHORITY_SIDECAR_PROXY_DECISION_TIMEOUT_MS",
    description: "forward proxy decision deadline in ms",
    default: 1000,
    parse: duration("ms", 1, 60_000),
  }),
  upstreamTimeout: spec({
    key: "upstream-timeout-ms",
    env: "AUTHORITY_SIDECAR_UPSTREAM_TIMEOUT_MS",
    description:
      "forward proxy: deadline in ms of the upstream's response headers and whole body (past it: 504)",
    default: 10_000,
    parse: duration("ms", 1, 600_000),
  }),
  maxResponseBytes: spec({
    key: "max-response-bytes",
    env: "AUTHORITY_SIDECAR_MAX_RESPONSE_BYTES",
    description:
      "forward proxy: largest response body (decoded), read whole for scrubbing and redaction (over it: 502, nothing of the body)",
    default: 1024 * 1024,
    parse: integer(1024, 256 * 1024 * 1024),
  }),
  maxRequestBytes: spec({
    key: "max-request-bytes",
    env: "AUTHORITY_SIDECAR_MAX_REQUEST_BYTES",
    description: "forward proxy: largest request body read for validation (over it: 413 `payload_too_large`)",
    default: 1024 * 1024,
    parse: integer(1024, 256 * 1024 * 1024),
  }),
  parameterScoping: spec({
    key: "parameter-scoping",
    env: "AUTHORITY_PARAMETER_SCOPING",
    description:
      "enforce signed parameter constraints: set it and the partners as on the authority service, or constrained operations are denied on one path and allowed on the other",
    default: false,
    parse: boolean,
  }),
  parameterScopingPartners: spec({
    key: "parameter-scoping-partners",
    env: "AUTHORITY_PARAMETER_SCOPING_PARTNERS",
    description: "partner ids allowed to use parameter constraints",
    parse: list,
  }),
  staleness: spec({
    key: "staleness-ms",
    env: "AUTHORITY_SIDECAR_STALENESS_MS",
    description: "with Redis: how long a confirmed policy head counts while Redis cannot be read (then 503)",
    default: 1000,
    parse: duration("ms", 1, 60_000),
  }),
  policyTtl: spec({
    key: "policy-ttl-ms",
    env: "AUTHORITY_SIDECAR_POLICY_TTL_MS",
    description: "without Redis: how long an authority answer is used before asking again",
    default: 1000,
    parse: duration("ms", 1, 3_600_000),
  }),
  policyMaxAge: spec({
    key: "policy-max-age-ms",
    env: "AUTHORITY_SIDECAR_POLICY_MAX_AGE_MS",
    description: "every policy is revalidated with the authority at least this often (ms)",
    default: 60_000,
    parse: duration("ms", 1000, 3_600_000),
  }),
  policyCacheMaxEntries: spec({
    key: "policy-cache-max-entries",
    env: "AUTHORITY_SIDECAR_POLICY_CACHE_MAX_ENTRIES",
    description:
      "subjects whose verified policy is kept in memory (past it, the least used ones are reloaded)",
    default: 20_000,
    parse: integer(10, 10_000_000),
  }),
  policyCacheMaxMib: spec({
    key: "policy-cache-max-mib",
    env: "AUTHORITY_SIDECAR_POLICY_CACHE_MAX_MIB",
    description:
      "heap the verified policies in memory may take (MiB, estimated; a policy entry shared by several subjects counts once)",
    default: 48,
    parse: integer(1, 65_536),
  }),
  policyLoadConcurrency: spec({
    key: "policy-load-concurrency",
    env: "AUTHORITY_SIDECAR_POLICY_LOAD_CONCURRENCY",
    description: "policy loads (fetch and verification) run at once; more wait in order of arrival",
    default: 8,
    parse: integer(1, 1024),
  }),
  auditMaxPending: spec({
    key: "audit-max-pending",
    env: "AUTHORITY_SIDECAR_AUDIT_MAX_PENDING",
    description: "decision records queued for the authority's audit log (beyond: 503)",
    default: 10_000,
    parse: integer(100, 10_000_000),
  }),
  stateDir: spec({
    key: "state-dir",
    env: "AUTHORITY_STATE_DIR",
    description: "state directory (the decision journal, unless `--journal-dir`)",
    default: "./.authority",
    parse: path,
  }),
  journalDir: spec({
    key: "journal-dir",
    env: "AUTHORITY_SIDECAR_JOURNAL_DIR",
    description:
      "directory of the decision journal: every decision record is written there before its decision is answered, and records not yet delivered to the authority are shipped from it on the next start (docs/sidecar.md, *Decision records outlive the process*)",
    defaultText: "<state-dir>/sidecar-journal",
    parse: path,
  }),
  journalMaxBytes: spec({
    key: "journal-max-bytes",
    env: "AUTHORITY_SIDECAR_JOURNAL_MAX_BYTES",
    description:
      "most bytes the decision journal takes on disk (records the authority has not taken yet, in segments of at most 4 MiB); at the cap an allow is answered 503 `upstream_unavailable` until records are delivered, a deny is still answered. A start replays the journal in memory (up to this many bytes, outside the JS heap)",
    default: JOURNAL_MAX_BYTES_DEFAULT,
    parse: integer(64 * 1024, 1024 * 1024 * 1024),
  }),
  shutdownWait: spec({
    key: "shutdown-wait-ms",
    env: "AUTHORITY_SIDECAR_SHUTDOWN_WAIT_MS",
    description:
      "on SIGTERM, how long the sidecar stays not ready but keeps answering Checks and proxy requests before it stops accepting (ms; like OPA's --shutdown-wait-period)",
    default: 5000,
    parse: duration("ms", 0, 600_000),
  }),
  shutdownGrace: spec({
    key: "shutdown-grace-ms",
    env: "AUTHORITY_SIDECAR_SHUTDOWN_GRACE_MS",
    description: "how long in-flight requests may finish on shutdown (ms)",
    default: 10_000,
    parse: duration("ms", 0, 600_000),
  }),
  egressAllow: spec(egressAllowSetting),
  ...tracingSettings("AUTHORITY_SIDECAR"),
  ...decisionExportSettings("AUTHORITY_SIDECAR"),
} as const;

export type SidecarCredentialsConfig =
  | { readonly kind: "token_file"; readonly path: string }
  | {
      readonly kind: "client_credentials";
      readonly tokenUrl: string;
      readonly clientId: string;
      readonly clientSecret: string;
    };

export interface SidecarConfig {
  readonly logLevel: LogLevel;
  readonly authorityUrl: string;
  readonly listen: {
    readonly grpc: ListenAddress;
    readonly proxy: ListenAddress;
    readonly metrics: ListenAddress;
  };
  readonly redis?: { readonly url: string; readonly cacheKeyFile: string };
  readonly capabilityMap?: string;
  /** The primary issuer (first of `trustedIssuers`): the platform's own. */
  readonly issuer: string;
  readonly jwksUrl: string;
  readonly audience: string;
  /** Every issuer whose bearer tokens are accepted, the primary first. */
  readonly trustedIssuers: readonly TrustedIssuer[];
  readonly credentials: SidecarCredentialsConfig;
  readonly serviceIdentity: string;
  readonly policyKeysFile?: string;
  readonly decisionTimeoutMs: number;
  readonly proxyDecisionTimeoutMs: number;
  readonly upstreamTimeoutMs: number;
  readonly maxResponseBytes: number;
  readonly maxRequestBytes: number;
  readonly parameterScoping: { readonly enabled: boolean; readonly partnerAllowlist: readonly string[] };
  readonly stalenessMs: number;
  readonly policyTtlMs: number;
  readonly policyMaxAgeMs: number;
  readonly policyCache: PolicyCacheBounds;
  readonly shutdownGraceMs: number;
  /** The drain before the grace period: not ready, still serving. */
  readonly shutdownWaitMs: number;
  readonly auditMaxPending: number;
  /** Where decision records are written ahead (absolute). */
  readonly journalDir: string;
  /** The most the journal takes on disk. */
  readonly journalMaxBytes: number;
  /** The platform admin's egress allow list for the forward proxy's upstreams. */
  readonly egressAllow: readonly EgressAllowEntry[];
  /** OpenTelemetry tracing; absent: off. */
  readonly tracing?: TracingConfig;
  /** The sidecar's own decision-log export (decision 2797); absent: its records are exported by the authority's. */
  readonly decisionExport?: DecisionExportConfig;
}

const SIDECAR_NOTES = `Either \`--token-file\` or \`--client-id\` with \`AUTHORITY_CLIENT_SECRET\` gives the sidecar its own
credentials; \`--cache-key-file\` is required with \`--redis-url\`. No listen address may use one of
Istio's ports. The issuer settings and the egress allow list are those of \`authority serve\`
(see *Trusted issuers* and *Egress allow list* above).

The injector also sets, in the sidecar container:

| env | value | why |
|---|---|---|
| \`NODE_OPTIONS\` | \`--max-semi-space-size=2 --max-old-space-size=128\` | a 2 MB young generation (scavenges of ≈ 1.4 ms instead of 5–6 ms at 1,000 Checks/s, ≈ 10 MB less RSS than 8 MB) and a bounded old generation (docs/sidecar.md, Memory) |
| \`MALLOC_ARENA_MAX\` | \`2\` | fewer glibc malloc arenas for the process's threads |
| \`GLIBC_TUNABLES\` | \`glibc.malloc.mmap_threshold=32768\` | allocations of 32 KiB and more (V8's compiler zone segments) are mapped and returned to the system when freed: ≈ 18 MB less RSS at 1,000 Checks/s |`;

export const sidecarSchema = defineProcess({
  command: "sidecar",
  title: "Sidecar (`authority sidecar`)",
  settings: sidecarSettings,
  notes: SIDECAR_NOTES,
  build(read): SidecarConfig {
    const issuers = issuerConfig(read);
    const { issuer } = issuers;
    const redis = read.optional("redisUrl");
    const cacheKeyFile = read.optional("cacheKeyFile");
    if (redis !== undefined && cacheKeyFile === undefined) {
      throw new ConfigError(
        "--cache-key-file (AUTHORITY_SIDECAR_CACHE_KEY_FILE) is required with --redis-url",
      );
    }
    const tokenFile = read.optional("tokenFile");
    const clientId = read.optional("clientId");
    const clientSecret = read.optional("clientSecret");
    let credentials: SidecarCredentialsConfig;
    if (tokenFile !== undefined) {
      credentials = { kind: "token_file", path: tokenFile };
    } else if (clientId !== undefined && clientSecret !== undefined) {
      credentials = {
        kind: "client_credentials",
        tokenUrl: read.optional("idpTokenUrl") ?? `${issuer}/oauth2/token`,
        clientId,
        clientSecret,
      };
    } else {
      throw new ConfigError(
        "the sidecar needs its own credentials: --token-file, or --client-id with AUTHORITY_CLIENT_SECRET",
      );
    }
    const policyKeysFile = read.optional("policyKeysFile");
    const capabilityMap = read.optional("capabilityMap");
    const listen = {
      grpc: read.value("grpcListen"),
      proxy: read.value("proxyListen"),
      metrics: read.value("metricsListen"),
    };
    for (const name of ["grpc", "proxy", "metrics"] as const) {
      if (isIstioReservedPort(listen[name].port)) {
        throw new ConfigError(istioPortMessage(`--${name}-listen`, listen[name].port));
      }
    }
    return {
      logLevel: read.value("logLevel"),
      authorityUrl: read.value("authorityUrl"),
      listen,
      ...(redis === undefined || cacheKeyFile === undefined ? {} : { redis: { url: redis, cacheKeyFile } }),
      ...(capabilityMap === undefined ? {} : { capabilityMap }),
      ...issuers,
      credentials,
      serviceIdentity: read.value("serviceIdentity"),
      ...(policyKeysFile === undefined ? {} : { policyKeysFile }),
      decisionTimeoutMs: read.value("decisionTimeout"),
      proxyDecisionTimeoutMs: read.value("proxyDecisionTimeout"),
      upstreamTimeoutMs: read.value("upstreamTimeout"),
      maxResponseBytes: read.value("maxResponseBytes"),
      maxRequestBytes: read.value("maxRequestBytes"),
      parameterScoping: {
        enabled: read.value("parameterScoping"),
        partnerAllowlist: read.optional("parameterScopingPartners") ?? [],
      },
      stalenessMs: read.value("staleness"),
      policyTtlMs: read.value("policyTtl"),
      policyMaxAgeMs: read.value("policyMaxAge"),
      policyCache: {
        maxEntries: read.value("policyCacheMaxEntries"),
        maxBytes: read.value("policyCacheMaxMib") * 1024 * 1024,
        loadConcurrency: read.value("policyLoadConcurrency"),
      },
      shutdownGraceMs: read.value("shutdownGrace"),
      shutdownWaitMs: read.value("shutdownWait"),
      auditMaxPending: read.value("auditMaxPending"),
      journalDir: resolve(
        read.cwd,
        read.optional("journalDir") ?? join(read.value("stateDir"), "sidecar-journal"),
      ),
      journalMaxBytes: read.value("journalMaxBytes"),
      egressAllow: read.optional("egressAllow") ?? [],
      ...optionalTracing(read),
      ...optionalExport(decisionExportConfig(read)),
    };
  },
});

/** Resolves from already-parsed inputs (no file I/O): what tests call. */
export function resolveSidecarConfig(inputs: ProcessInputs): SidecarConfig {
  return resolveProcessConfig(sidecarSchema, inputs);
}
