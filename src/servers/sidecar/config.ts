/**
 * The configuration of `authority sidecar` (names in docs/configuration.md), resolved from
 * flags > environment > defaults with the shared settings parsers, validated once at start.
 */

import { ConfigError } from "../../config/errors.ts";
import {
  DEFAULT_SIDECAR_PROXY_PORT,
  isIstioReservedPort,
  istioPortMessage,
} from "../../config/istio-ports.ts";
import {
  bearerTokenSettings,
  boolean,
  egressAllowSetting,
  httpUrl,
  integer,
  type ListenAddress,
  list,
  listenAddress,
  oneOf,
  redisUrl,
  resolveSetting,
  type SettingInputs,
  type SettingSpec,
  text,
} from "../../config/settings.ts";
import { configuredIssuers, trustedIssuersSetting } from "../../config/trusted-issuers.ts";
import type { EgressAllowEntry } from "../../core/egress-address.ts";
import type { TrustedIssuer } from "../../identity/trusted-issuers.ts";

export const sidecarLogLevels = ["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const;

const spec = <T>(s: SettingSpec<T>): SettingSpec<T> => s;

export const sidecarSettings = {
  logLevel: spec({
    key: "log-level",
    env: "AUTHORITY_LOG_LEVEL",
    description: "log level (default info)",
    parse: oneOf(sidecarLogLevels),
  }),
  authorityUrl: spec({
    key: "authority-url",
    env: "AUTHORITY_URL",
    description: "the authority service (default http://127.0.0.1:8080)",
    parse: httpUrl,
  }),
  grpcListen: spec({
    key: "grpc-listen",
    env: "AUTHORITY_SIDECAR_GRPC_LISTEN",
    description: "ext_authz gRPC address (default 127.0.0.1:9191)",
    parse: listenAddress,
  }),
  proxyListen: spec({
    key: "proxy-listen",
    env: "AUTHORITY_SIDECAR_PROXY_LISTEN",
    description: "forward proxy address (default 127.0.0.1:15101)",
    parse: listenAddress,
  }),
  metricsListen: spec({
    key: "metrics-listen",
    env: "AUTHORITY_SIDECAR_METRICS_LISTEN",
    description: "metrics and health address (default 127.0.0.1:9464)",
    parse: listenAddress,
  }),
  redisUrl: spec({
    key: "redis-url",
    env: "AUTHORITY_REDIS_URL",
    description: "Redis for policy heads, change events and the sealed policy cache (optional)",
    secret: true,
    parse: redisUrl,
  }),
  cacheKeyFile: spec({
    key: "cache-key-file",
    env: "AUTHORITY_SIDECAR_CACHE_KEY_FILE",
    description: "file holding the cache MAC key (32 bytes, base64); required with Redis",
    parse: text(),
  }),
  capabilityMap: spec({
    key: "capability-map",
    env: "AUTHORITY_SIDECAR_CAPABILITY_MAP",
    description:
      'JSON object: host, host/prefix or /prefix → capability id (e.g. {"orders.internal":"orders"})',
    parse: text(),
  }),
  ...bearerTokenSettings,
  trustedIssuers: trustedIssuersSetting,
  tokenFile: spec({
    key: "token-file",
    env: "AUTHORITY_SIDECAR_TOKEN_FILE",
    description: "file with the sidecar's own bearer token for the authority service (re-read every minute)",
    parse: text(),
  }),
  idpTokenUrl: spec({
    key: "idp-token-url",
    env: "AUTHORITY_IDP_TOKEN_URL",
    description:
      "token endpoint for the sidecar's client credentials (default http://127.0.0.1:8083/oauth2/token)",
    parse: httpUrl,
  }),
  clientId: spec({
    key: "client-id",
    env: "AUTHORITY_CLIENT_ID",
    description: "the sidecar's OAuth client id (role sidecar or scope authority/sidecar)",
    parse: text(),
  }),
  clientSecret: spec({
    key: "client-secret",
    env: "AUTHORITY_CLIENT_SECRET",
    description: "the sidecar's OAuth client secret (environment only)",
    secret: true,
    noFlag: true,
    parse: text({ secret: true }),
  }),
  serviceIdentity: spec({
    key: "service-identity",
    env: "AUTHORITY_SERVICE_IDENTITY",
    description:
      "service identity whose key signs platform_service_v2 policies (signer service:<identity>; default authority)",
    parse: text(),
  }),
  policyKeysFile: spec({
    key: "policy-keys-file",
    env: "AUTHORITY_SIDECAR_POLICY_KEYS_FILE",
    description:
      "pinned public keys of policy signers (JSON: the crypto service's public key ring, or an array of them); pinned signers use only these",
    parse: text(),
  }),
  decisionTimeout: spec({
    key: "decision-timeout-ms",
    env: "AUTHORITY_SIDECAR_DECISION_TIMEOUT_MS",
    description: "ext_authz decision deadline in ms (default 200)",
    parse: integer(1, 60_000),
  }),
  proxyDecisionTimeout: spec({
    key: "proxy-decision-timeout-ms",
    env: "AUTHORITY_SIDECAR_PROXY_DECISION_TIMEOUT_MS",
    description: "forward proxy decision deadline in ms (default 1000)",
    parse: integer(1, 60_000),
  }),
  upstreamTimeout: spec({
    key: "upstream-timeout-ms",
    env: "AUTHORITY_SIDECAR_UPSTREAM_TIMEOUT_MS",
    description: "forward proxy: upstream response deadline in ms (default 10000)",
    parse: integer(1, 600_000),
  }),
  maxResponseBytes: spec({
    key: "max-response-bytes",
    env: "AUTHORITY_SIDECAR_MAX_RESPONSE_BYTES",
    description: "forward proxy: largest response buffered for redaction (default 1048576; over it: 502)",
    parse: integer(1024, 256 * 1024 * 1024),
  }),
  maxRequestBytes: spec({
    key: "max-request-bytes",
    env: "AUTHORITY_SIDECAR_MAX_REQUEST_BYTES",
    description: "forward proxy: largest request body read for validation (default 1048576; over it: 413)",
    parse: integer(1024, 256 * 1024 * 1024),
  }),
  parameterScoping: spec({
    key: "parameter-scoping",
    env: "AUTHORITY_PARAMETER_SCOPING",
    description: "enforce signed parameter constraints, as the authority service does (default false)",
    parse: boolean,
  }),
  parameterScopingPartners: spec({
    key: "parameter-scoping-partners",
    env: "AUTHORITY_PARAMETER_SCOPING_PARTNERS",
    description: "comma-separated partners allowed to use parameter constraints",
    parse: list,
  }),
  staleness: spec({
    key: "staleness-ms",
    env: "AUTHORITY_SIDECAR_STALENESS_MS",
    description:
      "with Redis: how long a confirmed policy head counts while Redis is unreachable (default 1000)",
    parse: integer(1, 60_000),
  }),
  policyTtl: spec({
    key: "policy-ttl-ms",
    env: "AUTHORITY_SIDECAR_POLICY_TTL_MS",
    description: "without Redis: how long a policy is used before asking the authority again (default 1000)",
    parse: integer(1, 3_600_000),
  }),
  policyMaxAge: spec({
    key: "policy-max-age-ms",
    env: "AUTHORITY_SIDECAR_POLICY_MAX_AGE_MS",
    description: "revalidate every policy with the authority at least this often (default 60000)",
    parse: integer(1000, 3_600_000),
  }),
  auditMaxPending: spec({
    key: "audit-max-pending",
    env: "AUTHORITY_SIDECAR_AUDIT_MAX_PENDING",
    description: "decision records held while the authority does not take them (default 10000; beyond: 503)",
    parse: integer(100, 10_000_000),
  }),
  shutdownGrace: spec({
    key: "shutdown-grace-ms",
    env: "AUTHORITY_SIDECAR_SHUTDOWN_GRACE_MS",
    description: "how long in-flight requests may finish on shutdown (default 10000)",
    parse: integer(0, 600_000),
  }),
  egressAllow: spec(egressAllowSetting),
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
  readonly logLevel: (typeof sidecarLogLevels)[number];
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
  readonly shutdownGraceMs: number;
  readonly auditMaxPending: number;
  /** The platform admin's egress allow list for the forward proxy's upstreams. */
  readonly egressAllow: readonly EgressAllowEntry[];
}

type Settings = typeof sidecarSettings;
type ValueOf<N extends keyof Settings> = Settings[N] extends SettingSpec<infer T> ? T : never;

export function resolveSidecarConfig(inputs: SettingInputs): SidecarConfig {
  const get = <N extends keyof Settings>(name: N): ValueOf<N> | undefined =>
    resolveSetting(sidecarSettings[name] as SettingSpec<ValueOf<N>>, inputs).value;
  const trustedIssuers = configuredIssuers(
    get("issuer"),
    get("jwksUrl"),
    get("audience"),
    get("trustedIssuers"),
  );
  const primary = trustedIssuers[0] as TrustedIssuer;
  const issuer = primary.issuer;
  const redis = get("redisUrl");
  const cacheKeyFile = get("cacheKeyFile");
  if (redis !== undefined && cacheKeyFile === undefined) {
    throw new ConfigError("--cache-key-file (AUTHORITY_SIDECAR_CACHE_KEY_FILE) is required with --redis-url");
  }
  const tokenFile = get("tokenFile");
  const clientId = get("clientId");
  const clientSecret = get("clientSecret");
  let credentials: SidecarCredentialsConfig;
  if (tokenFile !== undefined) {
    credentials = { kind: "token_file", path: tokenFile };
  } else if (clientId !== undefined && clientSecret !== undefined) {
    credentials = {
      kind: "client_credentials",
      tokenUrl: get("idpTokenUrl") ?? `${issuer}/oauth2/token`,
      clientId,
      clientSecret,
    };
  } else {
    throw new ConfigError(
      "the sidecar needs its own credentials: --token-file, or --client-id with AUTHORITY_CLIENT_SECRET",
    );
  }
  const policyKeysFile = get("policyKeysFile");
  const capabilityMap = get("capabilityMap");
  const listen = {
    grpc: get("grpcListen") ?? { host: "127.0.0.1", port: 9191 },
    proxy: get("proxyListen") ?? { host: "127.0.0.1", port: DEFAULT_SIDECAR_PROXY_PORT },
    metrics: get("metricsListen") ?? { host: "127.0.0.1", port: 9464 },
  };
  for (const name of ["grpc", "proxy", "metrics"] as const) {
    if (isIstioReservedPort(listen[name].port)) {
      throw new ConfigError(istioPortMessage(`--${name}-listen`, listen[name].port));
    }
  }
  return {
    logLevel: get("logLevel") ?? "info",
    authorityUrl: get("authorityUrl") ?? "http://127.0.0.1:8080",
    listen,
    ...(redis === undefined || cacheKeyFile === undefined ? {} : { redis: { url: redis, cacheKeyFile } }),
    ...(capabilityMap === undefined ? {} : { capabilityMap }),
    issuer,
    jwksUrl: primary.jwksUrl,
    audience: primary.audience[0] ?? "authority",
    trustedIssuers,
    credentials,
    serviceIdentity: get("serviceIdentity") ?? "authority",
    ...(policyKeysFile === undefined ? {} : { policyKeysFile }),
    decisionTimeoutMs: get("decisionTimeout") ?? 200,
    proxyDecisionTimeoutMs: get("proxyDecisionTimeout") ?? 1000,
    upstreamTimeoutMs: get("upstreamTimeout") ?? 10_000,
    maxResponseBytes: get("maxResponseBytes") ?? 1024 * 1024,
    maxRequestBytes: get("maxRequestBytes") ?? 1024 * 1024,
    parameterScoping: {
      enabled: get("parameterScoping") ?? false,
      partnerAllowlist: get("parameterScopingPartners") ?? [],
    },
    stalenessMs: get("staleness") ?? 1000,
    policyTtlMs: get("policyTtl") ?? 1000,
    policyMaxAgeMs: get("policyMaxAge") ?? 60_000,
    shutdownGraceMs: get("shutdownGrace") ?? 10_000,
    auditMaxPending: get("auditMaxPending") ?? 10_000,
    egressAllow: get("egressAllow") ?? [],
  };
}
