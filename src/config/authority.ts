/**
 * The configuration of `authority serve` and `authority reprotect`: its settings (one
 * definition each; docs/configuration.md is generated from them) and the typed
 * configuration the service's builder takes, validated once at start.
 */

import { hostname } from "node:os";
import { join, resolve } from "node:path";
import type { LogRetention, RetentionSettings } from "../audit/retention.ts";
import { MAX_WORKLOAD_TOKEN_LIFETIME_SEC } from "../bindings/workload-tokens.ts";
import { ConfigError } from "../core/config-error.ts";
import type { EgressAllowEntry } from "../core/egress-address.ts";
import type { TrustedIssuer } from "../identity/trusted-issuers.ts";
import type { McpConfig } from "../mcp/config.ts";
import { logs } from "../store/model.ts";
import {
  type DecisionExportConfig,
  decisionExportConfig,
  decisionExportSettings,
  optionalExport,
} from "./decision-export.ts";
import {
  defineProcess,
  type LoadInputs,
  loadProcessConfig,
  type ProcessInputs,
  resolveProcessConfig,
} from "./schema.ts";
import {
  bearerTokenSettings,
  boolean,
  duration,
  egressAllowSetting,
  embeddedStateSettings,
  httpUrl,
  integer,
  kekSettings,
  type ListenAddress,
  type LogLevel,
  list,
  listenAddress,
  logLevelSetting,
  oneOf,
  path,
  positiveInteger,
  redisUrl,
  refuseKekInitOnSharedStore,
  type SettingSource,
  setting,
  storePoolSettings,
  text,
} from "./settings.ts";
import { optionalTracing, type TracingConfig, tracingSettings } from "./tracing.ts";
import { issuerConfig, trustedIssuersSetting } from "./trusted-issuers.ts";

export { type LogLevel, logLevels } from "./validators.ts";

export interface AuthorityConfig {
  readonly logLevel: LogLevel;
  readonly stateDir: string;
  readonly storeUrl: string;
  /** The connection pool of a PostgreSQL store. */
  readonly storePool: { readonly size: number; readonly statementTimeoutMs: number };
  readonly kek: {
    /** The KEK itself (AUTHORITY_KEK), when given. */
    readonly value?: string;
    readonly file: string;
    /**
     * A missing file is created: only with `--init-kek` (the explicit init of an embedded,
     * SQLite install), never for a shared store. Otherwise a missing file is an error naming it.
     */
    readonly createIfMissing: boolean;
  };
  readonly listen: ListenAddress;
  readonly publicUrl: string;
  /** The primary issuer (first of `trustedIssuers`): the platform's own. */
  readonly issuer: string;
  readonly jwksUrl: string;
  readonly audience: string;
  /** Every issuer whose bearer tokens are accepted, the primary first. */
  readonly trustedIssuers: readonly TrustedIssuer[];
  readonly managedUrl: string;
  readonly cryptoUrl: string;
  /**
   * Who protects and opens policies. `crypto`: the upstream crypto service at `cryptoUrl`,
   * with the credentials of `credentialsFile` (no policy key in this process). `embedded`:
   * key rings in this process's store under its KEK — the one-process mode, said at start.
   */
  readonly policyProtection:
    | { readonly mode: "embedded" }
    | { readonly mode: "crypto"; readonly credentialsFile: string; readonly tokenUrl: string }
    | {
        /** Through the managed crypto API at `managedUrl` (its five credential headers). */
        readonly mode: "managed";
        readonly credentialsFile: string;
        /** For the crypto service's public-key route (sidecars' verification keys). */
        readonly tokenUrl: string;
        /** PEM CA of the managed API's certificate (default: the system store). */
        readonly managedCaFile?: string;
      };
  readonly redisUrl?: string;
  /** Sidecars' freshness lease, and how long a change that takes access away waits before it answers. */
  readonly sidecarLeaseMs: number;
  readonly serviceIdentity: string;
  readonly bodyLimitBytes: number;
  readonly policyCache: { readonly max: number; readonly ttlMs: number };
  readonly tokenCache: { readonly max: number };
  /** How long subject and capability records are reused by the decision path (0: never). */
  readonly recordCacheMs: number;
  readonly auditBuffer: number;
  /** What the background retention removes (audit/retention.ts), and how often it runs. */
  readonly retention: RetentionSettings & { readonly intervalMs: number };
  readonly shutdownTimeoutMs: number;
  /** The decision chains (audit/chain.ts): this replica's stream and the checkpoint interval. */
  readonly auditChain: { readonly replicaId: string; readonly checkpointIntervalMs: number };
  /** On SIGTERM: not ready but serving for this long, before the drain. */
  readonly shutdownWaitMs: number;
  readonly parameterScoping: { readonly enabled: boolean; readonly partnerAllowlist: readonly string[] };
  readonly mcp: McpConfig;
  /**
   * The binding runtime's upstream deadline and workload-token lifetime; the service builder
   * passes them on.
   */
  readonly bindings: { readonly upstreamTimeoutMs?: number; readonly workloadTokenLifetimeSec?: number };
  /** The platform admin's egress allow list (upstream destinations beyond public addresses). */
  readonly egress: { readonly allow: readonly EgressAllowEntry[] };
  /** Where decision records are shipped besides the audit log (absent: nowhere). */
  readonly decisionExport?: DecisionExportConfig;
  /** OpenTelemetry tracing; absent: off. */
  readonly tracing?: TracingConfig;
  /** Where each setting came from (for the start-up log; values are not repeated). */
  readonly sources: Readonly<Record<string, SettingSource>>;
}

const DAY_MS = 86_400_000;
const MAX_RETENTION_DAYS = 36_500;

/** An age and a count limit per log (0 = none); the usage rollups by age per granularity. */
const retentionSettings = {
  auditRetentionDays: retentionDays("audit", "audit records (decisions, policy and binding changes)"),
  auditRetentionCount: retentionCount("audit", "audit records"),
  mcpAuditRetentionDays: retentionDays("mcp-audit", "MCP audit records"),
  mcpAuditRetentionCount: retentionCount("mcp-audit", "MCP audit records"),
  evidenceRetentionDays: retentionDays("evidence", "evidence records (log and binding documents)"),
  evidenceRetentionCount: retentionCount("evidence", "evidence log records"),
  usageHourlyRetentionDays: retentionDays("usage-hourly", "hourly usage rollups (daily ones stay)"),
  usageDailyRetentionDays: retentionDays("usage-daily", "daily usage rollups"),
  retentionInterval: setting({
    key: "retention-interval",
    env: "AUTHORITY_RETENTION_INTERVAL",
    description: "seconds between two background retention passes (each removes in batches of 500)",
    default: 300,
    parse: duration("s", 1, 86_400),
  }),
};

function retentionDays(name: string, what: string) {
  return setting({
    key: `${name}-retention-days`,
    env: `AUTHORITY_${name.toUpperCase().replaceAll("-", "_")}_RETENTION_DAYS`,
    description: `days ${what} are kept, 0 to keep them forever`,
    default: 0,
    parse: integer(0, MAX_RETENTION_DAYS),
  });
}

function retentionCount(name: string, what: string) {
  return setting({
    key: `${name}-retention-count`,
    env: `AUTHORITY_${name.toUpperCase().replaceAll("-", "_")}_RETENTION_COUNT`,
    description: `most ${what} kept (the oldest go first), 0 for no limit`,
    default: 0,
    parse: integer(0, Number.MAX_SAFE_INTEGER),
  });
}

/** A log's rule from its two settings (0 = no limit). */
const logRule = (days: number, count: number): LogRetention => ({
  ...(days === 0 ? {} : { maxAgeMs: days * DAY_MS }),
  ...(count === 0 ? {} : { maxCount: count }),
});

/** Every setting of `authority serve`, in the order the help lists them. */
export const authoritySettings = {
  logLevel: logLevelSetting(),
  ...embeddedStateSettings,
  ...storePoolSettings,
  ...kekSettings,
  listen: setting({
    key: "listen",
    env: "AUTHORITY_LISTEN",
    description: "address to listen on",
    default: "127.0.0.1:8080",
    parse: listenAddress,
  }),
  publicUrl: setting({
    key: "public-url",
    env: "AUTHORITY_PUBLIC_URL",
    description: "public base URL",
    default: "http://127.0.0.1:8080",
    parse: httpUrl,
  }),
  ...bearerTokenSettings,
  trustedIssuers: trustedIssuersSetting,
  managedUrl: setting({
    key: "managed-url",
    env: "AUTHORITY_MANAGED_URL",
    description: "managed crypto API",
    default: "https://127.0.0.1:8081",
    parse: httpUrl,
  }),
  cryptoUrl: setting({
    key: "crypto-url",
    env: "AUTHORITY_CRYPTO_URL",
    description: "upstream crypto service",
    default: "http://127.0.0.1:8082",
    parse: httpUrl,
  }),
  policyProtection: setting({
    key: "policy-protection",
    env: "AUTHORITY_POLICY_PROTECTION",
    description:
      "who protects and opens policies, authority envelopes and secrets at rest. `crypto`: the crypto service at --crypto-url; `managed`: the same keys through the managed crypto API at --managed-url (five credential headers); in both no KEK and no key in this process. `embedded`, only when chosen: key rings in this process's store under its KEK (the one-process mode, for trials and tests; a warning at start and in diagnostics says so). Without --crypto-credentials-file the default `crypto` refuses to start and names the settings",
    default: "crypto",
    parse: oneOf(["crypto", "managed", "embedded"] as const),
  }),
  managedCaFile: setting({
    key: "managed-ca-file",
    env: "AUTHORITY_MANAGED_CA_FILE",
    description: "PEM CA the managed crypto API's certificate chains to (managed mode)",
    defaultText: "the system CAs",
    parse: path,
  }),
  cryptoCredentialsFile: setting({
    key: "crypto-credentials-file",
    env: "AUTHORITY_CRYPTO_CREDENTIALS_FILE",
    description:
      'mounted secret (JSON): `username`, `password` of the service account at the IdP, and `api_key`, `access_key`, `secret_key` of the service identity `service:<identity>`; optional `subjects: { "<subject id>": { api_key, access_key, secret_key } }` for `subject_credentials_v1` policies (without an entry such a policy fails closed, 503). Required in crypto and managed modes',
    parse: path,
  }),
  cryptoTokenUrl: setting({
    key: "crypto-token-url",
    env: "AUTHORITY_CRYPTO_TOKEN_URL",
    description:
      "token endpoint of the password grant of that service account (the token is cached until shortly before it expires)",
    defaultText: "<issuer>/oauth2/token",
    parse: httpUrl,
  }),
  redisUrl: setting({
    key: "redis-url",
    env: "AUTHORITY_REDIS_URL",
    description: "Redis for policy-change pub/sub and sidecar caches (optional)",
    secret: true,
    parse: redisUrl,
  }),
  sidecarLease: setting({
    key: "sidecar-lease-ms",
    env: "AUTHORITY_SIDECAR_LEASE_MS",
    description:
      "the staleness bound of every sidecar: how long one decides from its cache after it last confirmed the policy change log here (then 503); a change that takes access away answers only once this has passed since it was logged",
    default: 2000,
    parse: duration("ms", 200, 60_000),
  }),
  serviceIdentity: setting({
    key: "service-identity",
    env: "AUTHORITY_SERVICE_IDENTITY",
    description: "service identity protecting `platform_service_v2` policies (their key owner)",
    default: "authority",
    parse: text(),
  }),
  bodyLimit: setting({
    key: "body-limit",
    env: "AUTHORITY_BODY_LIMIT",
    description: "largest request body in bytes",
    default: 1024 * 1024,
    parse: integer(1024, 64 * 1024 * 1024),
  }),
  policyCacheSize: setting({
    key: "policy-cache-size",
    env: "AUTHORITY_POLICY_CACHE_SIZE",
    description: "verified policies kept in memory",
    default: 10_000,
    parse: positiveInteger(10_000_000),
  }),
  policyCacheTtl: setting({
    key: "policy-cache-ttl",
    env: "AUTHORITY_POLICY_CACHE_TTL",
    description:
      "seconds a verified policy stays cached (memory hygiene: freshness comes from the record, read on every call)",
    default: 300,
    parse: duration("s", 1, 86_400),
  }),
  recordCache: setting({
    key: "record-cache-ms",
    env: "AUTHORITY_RECORD_CACHE_MS",
    description:
      "milliseconds subject, capability, log-only, shadow-policy and binding records (binding, workload client, mapping, experience, auth profile) are reused on the decision path, 0 to read every time (enforced policy records are always read)",
    default: 1000,
    parse: duration("ms", 0, 60_000),
  }),
  tokenCacheSize: setting({
    key: "token-cache-size",
    env: "AUTHORITY_TOKEN_CACHE_SIZE",
    description:
      "verified bearer tokens kept in memory (each at most 60 s, never past `exp`), 0 to verify every time",
    default: 10_000,
    parse: integer(0, 10_000_000),
  }),
  auditBuffer: setting({
    key: "audit-buffer",
    env: "AUTHORITY_AUDIT_BUFFER",
    description: "audit records held while the store is unavailable (beyond: 503)",
    default: 100_000,
    parse: positiveInteger(10_000_000),
  }),
  ...retentionSettings,
  ...decisionExportSettings("AUTHORITY"),
  ...tracingSettings("AUTHORITY"),
  shutdownWait: setting({
    key: "shutdown-wait",
    env: "AUTHORITY_SHUTDOWN_WAIT",
    description:
      "seconds on SIGTERM during which /readyz is 503 but requests are still served, before the drain (endpoints are withdrawn meanwhile)",
    default: 5,
    parse: duration("s", 0, 600),
  }),
  replicaId: setting({
    key: "replica-id",
    env: "AUTHORITY_REPLICA_ID",
    description:
      "this replica's decision-chain stream (unique per replica, stable across its restarts; 1-128 characters)",
    defaultText: "the host name (a pod's name)",
    parse: text(),
  }),
  auditCheckpointInterval: setting({
    key: "audit-checkpoint-interval",
    env: "AUTHORITY_AUDIT_CHECKPOINT_INTERVAL",
    description: "seconds between two signed checkpoints of the decision chains (also one on shutdown)",
    default: 60,
    parse: duration("s", 1, 86_400),
  }),
  shutdownTimeout: setting({
    key: "shutdown-timeout",
    env: "AUTHORITY_SHUTDOWN_TIMEOUT",
    description: "seconds to drain requests and flush audit on shutdown",
    default: 10,
    parse: duration("s", 1, 3600),
  }),
  parameterScoping: setting({
    key: "parameter-scoping",
    env: "AUTHORITY_PARAMETER_SCOPING",
    description: "enforce signed parameter constraints",
    default: false,
    parse: boolean,
  }),
  parameterScopingPartners: setting({
    key: "parameter-scoping-partners",
    env: "AUTHORITY_PARAMETER_SCOPING_PARTNERS",
    description: "partner ids allowed to use parameter constraints",
    parse: list,
  }),
  mcpAllowedOrigins: setting({
    key: "mcp-allowed-origins",
    env: "AUTHORITY_MCP_ALLOWED_ORIGINS",
    description: "browser origins allowed to call /mcp",
    defaultText: "the public URL's origin",
    parse: list,
  }),
  mcpUpstreamTimeout: setting({
    key: "mcp-upstream-timeout-ms",
    env: "AUTHORITY_MCP_UPSTREAM_TIMEOUT_MS",
    description: "deadline of one upstream call in MCP tools/call",
    default: 10_000,
    parse: duration("ms", 1, 600_000),
  }),
  bindingUpstreamTimeout: setting({
    key: "binding-upstream-timeout-ms",
    env: "AUTHORITY_BINDING_UPSTREAM_TIMEOUT_MS",
    description: "deadline of one upstream call of binding invoke and broker execute",
    default: 10_000,
    parse: duration("ms", 1, 600_000),
  }),
  workloadTokenLifetime: setting({
    key: "workload-token-lifetime",
    env: "AUTHORITY_WORKLOAD_TOKEN_LIFETIME",
    description: "seconds a workload access token is valid",
    default: 300,
    parse: duration("s", 30, MAX_WORKLOAD_TOKEN_LIFETIME_SEC),
  }),
  mcpScopes: setting({
    key: "mcp-scopes",
    env: "AUTHORITY_MCP_SCOPES",
    description: "scopes advertised in the MCP protected-resource metadata",
    default: "authority/mcp",
    parse: list,
  }),
  egressAllow: egressAllowSetting,
} as const;

/**
 * Custody is the default (decision 2601): without the crypto service's settings `serve` refuses
 * to start rather than fall back to holding every key itself, and the message names both ways out.
 */
function missingCustodyMessage(mode: "crypto" | "managed"): string {
  const chosen = mode === "crypto" ? "the default --policy-protection crypto" : "--policy-protection managed";
  const where =
    mode === "crypto" ? "--crypto-url (AUTHORITY_CRYPTO_URL)" : "--managed-url (AUTHORITY_MANAGED_URL)";
  return (
    `${chosen} needs the crypto service: --crypto-credentials-file (AUTHORITY_CRYPTO_CREDENTIALS_FILE), ` +
    `the service identity's credentials, and ${where}; ` +
    "for a single-process trial choose --policy-protection embedded (AUTHORITY_POLICY_PROTECTION=embedded): " +
    "every key then lives in this process under its KEK"
  );
}

const AUTHORITY_NOTES = `A missing KEK file is an error that names the path: a new KEK is created (mode 0600) only by
an explicit init — \`--init-kek\` (SQLite store only; \`authority crypto --init-kek\` likewise) or
the \`authority dev\` / \`demo\` quick start. With a shared store (PostgreSQL, Redis) the KEK must be
given (\`AUTHORITY_KEK\` or an existing \`AUTHORITY_KEK_FILE\`), so replicas share it.
See docs/authorize.md for what each cache may delay and the fail-closed behaviour.

### Trusted issuers

\`issuer\`, \`jwks-url\` and \`audience\` name the **primary** issuer: the platform's own (the
development IdP in \`make dev\`). \`trusted-issuers\` lists further issuers (a platform's own
OpenID provider beside it); with only the list, its first entry is the primary. The token's
\`iss\` selects the issuer before anything is verified: a token is checked only with the keys,
audiences and rules of the issuer it names, an \`iss\` not listed is refused (\`invalid_token\`),
and each issuer's JWKS is fetched and cached on its own (docs/identity.md).

\`\`\`yaml
issuer: http://127.0.0.1:8083            # primary (development IdP)
trusted-issuers:
  - issuer: https://login.platform.example          # exact \`iss\`
    jwks-url: https://login.platform.example/keys   # default <issuer>/.well-known/jwks.json
    audience: [api://authority]                     # string or list; default authority
    token-use: access                               # required token_use claim; false: none
    token-types: [at+jwt]                           # accepted \`typ\` headers; default any
    vouched-subjects: false                         # default: true for the primary only
    claims:                                         # which claim gives what (defaults shown)
      subject: sub
      roles: roles
      partner-id: partner_id
      scopes: scope                                 # \`scope\` also falls back to \`scp\`
\`\`\`

In the environment: \`AUTHORITY_TRUSTED_ISSUERS='[{"issuer":"https://login.platform.example","audience":"api://authority"}]'\`.
Unknown keys, a claim name that is not one, and an issuer listed twice are refused at start.
The sidecar reads the same setting. Every listed issuer is trusted for the claims it maps:
its roles are roles here (an \`admin\` from any listed issuer is a platform admin), its
partner claim names the partner its agents belong to; see docs/identity.md "Several issuers".

### Egress allow list

\`AUTHORITY_EGRESS_ALLOW\` (\`--egress-allow\`, key \`egress-allow\` in a config file) is the platform
admin's list of upstream destinations beyond public addresses, for \`authority serve\` (OpenAPI
import, invoke, broker, MCP, OAuth token endpoints of auth profiles, the JWKS of bindings) and
\`authority sidecar\` (the forward proxy). Comma-separated (in a config file also a YAML or JSON
list of entries); each entry is one of:

| entry | example | opens |
|---|---|---|
| CIDR block | \`10.0.0.0/8\`, \`fd00::/8\` | every address and port in it |
| one address | \`10.1.2.3\`, \`fd00::5\` | that address, every port (a \`/32\` or \`/128\`) |
| address and port | \`127.0.0.1:18080\`, \`[::1]:18080\` | exactly that address and port |
| host name, optional port | \`orders.shop.svc.cluster.local\`, \`orders.shop.svc.cluster.local:8080\` | a connection to exactly that name (that port): the addresses it resolves to then |

Entries are written canonically (dotted decimal IPv4, no host bits below the prefix, ports
1–65535, no wildcards). Every connection is checked on the address it really reaches: an address
entry matches that address whatever name led there; a name entry admits the addresses of that
name only, so list only names whose DNS you control (a cluster's service names).
An entry opens only the loopback, link-local, private (\`10/8\`, \`172.16/12\`,
\`192.168/16\`), shared (\`100.64/10\`), unique-local (\`fc00::/7\`) and reserved classes. Cloud
metadata addresses and names, the unspecified address, multicast and broadcast, and the
platform's own services (the service URLs and listen addresses the process is configured with)
stay refused whatever the list says. There is no per-partner setting and no admin API for it.
An import refused by it answers \`400\` with \`details.reason: "egress_denied"\` and, when an entry
could open the destination, \`details.setting: "egress-allow"\`.

\`authority demo\` sets it to exactly the sample API (\`127.0.0.1:18080\` with the default ports);
\`authority dev\` allows the sample API and what its own \`egress-allow\` lists, so an API on your
machine is \`AUTHORITY_EGRESS_ALLOW=127.0.0.1:19090 make dev\` (docs/protect-your-api.md). In the
Helm chart it is the value \`egress.allow\` (a list), given to the authority service and every
injected sidecar. The rules: docs/security.md, *Egress*.`;

/** The schema of `authority serve` (and `authority reprotect`, which opens policies the same way). */
export const authoritySchema = defineProcess({
  command: "serve",
  title: "Authority service (`authority serve`, `authority reprotect`)",
  settings: authoritySettings,
  configEnv: "AUTHORITY_CONFIG_FILE",
  notes: AUTHORITY_NOTES,
  build(read): AuthorityConfig {
    const cwd = read.cwd;
    const stateDir = resolve(cwd, read.value("stateDir"));
    const store = read.optional("store") ?? `sqlite:${join(stateDir, "authority.db")}`;
    const issuers = issuerConfig(read);
    const { issuer } = issuers;
    const kekValue = read.optional("kek");
    const initKek = read.value("initKek");
    refuseKekInitOnSharedStore(initKek, store);
    const redis = read.optional("redisUrl");
    const credentialsFile = read.optional("cryptoCredentialsFile");
    const protectionMode = read.value("policyProtection");
    if (protectionMode !== "embedded" && credentialsFile === undefined) {
      throw new ConfigError(missingCustodyMessage(protectionMode));
    }
    if (protectionMode !== "embedded" && (initKek || kekValue !== undefined)) {
      throw new ConfigError(
        `--policy-protection ${protectionMode} holds no key-encryption key: drop --init-kek and AUTHORITY_KEK (the crypto service keeps every key)`,
      );
    }
    const managedCaFile = read.optional("managedCaFile");
    const tokenUrl = read.optional("cryptoTokenUrl") ?? `${issuer}/oauth2/token`;
    const allowedOrigins = read.optional("mcpAllowedOrigins");
    return {
      logLevel: read.value("logLevel"),
      stateDir,
      storeUrl: store,
      kek: {
        ...(kekValue === undefined ? {} : { value: kekValue }),
        file: resolve(cwd, read.optional("kekFile") ?? join(stateDir, "kek")),
        createIfMissing: initKek,
      },
      listen: read.value("listen"),
      publicUrl: read.value("publicUrl"),
      ...issuers,
      managedUrl: read.value("managedUrl"),
      cryptoUrl: read.value("cryptoUrl"),
      policyProtection:
        protectionMode === "embedded" || credentialsFile === undefined
          ? { mode: "embedded" }
          : protectionMode === "crypto"
            ? { mode: "crypto", credentialsFile: resolve(cwd, credentialsFile), tokenUrl }
            : {
                mode: "managed",
                credentialsFile: resolve(cwd, credentialsFile),
                tokenUrl,
                ...(managedCaFile === undefined ? {} : { managedCaFile: resolve(cwd, managedCaFile) }),
              },
      ...(redis === undefined ? {} : { redisUrl: redis }),
      sidecarLeaseMs: read.value("sidecarLease"),
      serviceIdentity: read.value("serviceIdentity"),
      bodyLimitBytes: read.value("bodyLimit"),
      policyCache: { max: read.value("policyCacheSize"), ttlMs: read.value("policyCacheTtl") * 1000 },
      tokenCache: { max: read.value("tokenCacheSize") },
      recordCacheMs: read.value("recordCache"),
      storePool: {
        size: read.value("storePoolSize"),
        statementTimeoutMs: read.value("storeStatementTimeout"),
      },
      auditBuffer: read.value("auditBuffer"),
      retention: {
        logs: {
          [logs.audit]: logRule(read.value("auditRetentionDays"), read.value("auditRetentionCount")),
          [logs.mcpAudit]: logRule(read.value("mcpAuditRetentionDays"), read.value("mcpAuditRetentionCount")),
          [logs.evidence]: logRule(read.value("evidenceRetentionDays"), read.value("evidenceRetentionCount")),
        },
        usage: {
          ...(read.value("usageHourlyRetentionDays") === 0
            ? {}
            : { hour: read.value("usageHourlyRetentionDays") * DAY_MS }),
          ...(read.value("usageDailyRetentionDays") === 0
            ? {}
            : { day: read.value("usageDailyRetentionDays") * DAY_MS }),
        },
        intervalMs: read.value("retentionInterval") * 1000,
      },
      shutdownTimeoutMs: read.value("shutdownTimeout") * 1000,
      auditChain: {
        replicaId: read.optional("replicaId") ?? hostname(),
        checkpointIntervalMs: read.value("auditCheckpointInterval") * 1000,
      },
      shutdownWaitMs: read.value("shutdownWait") * 1000,
      parameterScoping: {
        enabled: read.value("parameterScoping"),
        partnerAllowlist: read.optional("parameterScopingPartners") ?? [],
      },
      mcp: {
        ...(allowedOrigins === undefined ? {} : { allowedOrigins }),
        upstreamTimeoutMs: read.value("mcpUpstreamTimeout"),
        scopesSupported: read.value("mcpScopes"),
      },
      bindings: {
        upstreamTimeoutMs: read.value("bindingUpstreamTimeout"),
        workloadTokenLifetimeSec: read.value("workloadTokenLifetime"),
      },
      egress: { allow: read.optional("egressAllow") ?? [] },
      ...optionalExport(decisionExportConfig(read)),
      ...optionalTracing(read),
      sources: read.sources(),
    };
  },
});

/** Resolves from already-parsed inputs (no file I/O): what tests call. */
export function resolveAuthorityConfig(inputs: ProcessInputs): AuthorityConfig {
  return resolveProcessConfig(authoritySchema, inputs);
}

/** Reads the config file named by `--config` / AUTHORITY_CONFIG_FILE (if any), then resolves. */
export function loadAuthorityConfig(inputs: LoadInputs): Promise<AuthorityConfig> {
  return loadProcessConfig(authoritySchema, inputs);
}
