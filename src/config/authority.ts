/**
 * The configuration of `authority serve` (names in docs/configuration.md), resolved from
 * flags > environment > config file > defaults and validated once at start.
 */

import { join, resolve } from "node:path";
import type { TrustedIssuer } from "../identity/trusted-issuers.ts";
import { ConfigError } from "./errors.ts";
import { readConfigFile } from "./file.ts";
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
  type SettingSource,
  type SettingSpec,
  storeUrl,
  text,
  unknownFileKeys,
} from "./settings.ts";
import { configuredIssuers, trustedIssuersSetting } from "./trusted-issuers.ts";

export const logLevels = ["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const;
export type LogLevel = (typeof logLevels)[number];

import type { EgressAllowEntry } from "../core/egress-address.ts";
import type { McpConfig } from "../mcp/config.ts";

export interface AuthorityConfig {
  readonly logLevel: LogLevel;
  readonly stateDir: string;
  readonly storeUrl: string;
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
    | { readonly mode: "crypto"; readonly credentialsFile: string; readonly tokenUrl: string };
  readonly redisUrl?: string;
  readonly serviceIdentity: string;
  readonly bodyLimitBytes: number;
  readonly policyCache: { readonly max: number; readonly ttlMs: number };
  readonly tokenCache: { readonly max: number };
  /** How long subject and capability records are reused by the decision path (0: never). */
  readonly recordCacheMs: number;
  readonly auditBuffer: number;
  readonly shutdownTimeoutMs: number;
  readonly parameterScoping: { readonly enabled: boolean; readonly partnerAllowlist: readonly string[] };
  readonly mcp: McpConfig;
  /**
   * The binding runtime's upstream deadline (default 10 s) and workload-token lifetime
   * (default 300 s); the service builder passes them on.
   */
  readonly bindings: { readonly upstreamTimeoutMs?: number; readonly workloadTokenLifetimeSec?: number };
  /** The platform admin's egress allow list (upstream destinations beyond public addresses). */
  readonly egress: { readonly allow: readonly EgressAllowEntry[] };
  /** Where each setting came from (for the start-up log; values are not repeated). */
  readonly sources: Readonly<Record<string, SettingSource>>;
}

const spec = <T>(s: SettingSpec<T>): SettingSpec<T> => s;

/** Every setting of `authority serve`, in the order the help lists them. */
export const authoritySettings = {
  config: spec({
    key: "config",
    env: "AUTHORITY_CONFIG_FILE",
    description: "JSON or YAML file of settings (keys are the flag names)",
    notInFile: true,
    parse: text(),
  }),
  logLevel: spec({
    key: "log-level",
    env: "AUTHORITY_LOG_LEVEL",
    description: "log level (default info)",
    parse: oneOf(logLevels),
  }),
  stateDir: spec({
    key: "state-dir",
    env: "AUTHORITY_STATE_DIR",
    description: "embedded state directory (default ./.authority)",
    parse: text(),
  }),
  store: spec({
    key: "store",
    env: "AUTHORITY_STORE_URL",
    description: "sqlite:<file> or redis://host:port/db (default sqlite:<state-dir>/authority.db)",
    secret: true,
    parse: storeUrl,
  }),
  kekFile: spec({
    key: "kek-file",
    env: "AUTHORITY_KEK_FILE",
    description: "key-encryption key file (default <state-dir>/kek)",
    parse: text(),
  }),
  kek: spec({
    key: "kek",
    env: "AUTHORITY_KEK",
    description: "the key-encryption key itself (base64; environment only)",
    secret: true,
    notInFile: true,
    noFlag: true,
    parse: text({ secret: true }),
  }),
  initKek: spec({
    key: "init-kek",
    env: "AUTHORITY_INIT_KEK",
    description:
      "create the KEK file if it does not exist (first start of an embedded SQLite install; default false)",
    parse: boolean,
  }),
  listen: spec({
    key: "listen",
    env: "AUTHORITY_LISTEN",
    description: "address to listen on (default 127.0.0.1:8080)",
    parse: listenAddress,
  }),
  publicUrl: spec({
    key: "public-url",
    env: "AUTHORITY_PUBLIC_URL",
    description: "public base URL (default http://127.0.0.1:8080)",
    parse: httpUrl,
  }),
  ...bearerTokenSettings,
  trustedIssuers: trustedIssuersSetting,
  managedUrl: spec({
    key: "managed-url",
    env: "AUTHORITY_MANAGED_URL",
    description: "managed crypto API (default https://127.0.0.1:8081)",
    parse: httpUrl,
  }),
  cryptoUrl: spec({
    key: "crypto-url",
    env: "AUTHORITY_CRYPTO_URL",
    description: "upstream crypto service (default http://127.0.0.1:8082)",
    parse: httpUrl,
  }),
  policyProtection: spec({
    key: "policy-protection",
    env: "AUTHORITY_POLICY_PROTECTION",
    description:
      "crypto: policies protected and opened by the crypto service (--crypto-url); embedded: key rings in this process under its KEK (default: crypto when --crypto-credentials-file is set, else embedded)",
    parse: oneOf(["crypto", "embedded"] as const),
  }),
  cryptoCredentialsFile: spec({
    key: "crypto-credentials-file",
    env: "AUTHORITY_CRYPTO_CREDENTIALS_FILE",
    description:
      "mounted secret (JSON): username, password, api_key, access_key, secret_key of the service identity (required in crypto mode)",
    parse: text(),
  }),
  cryptoTokenUrl: spec({
    key: "crypto-token-url",
    env: "AUTHORITY_CRYPTO_TOKEN_URL",
    description:
      "token endpoint of the password grant for the crypto service (default <issuer>/oauth2/token)",
    parse: httpUrl,
  }),
  redisUrl: spec({
    key: "redis-url",
    env: "AUTHORITY_REDIS_URL",
    description: "Redis for policy-change pub/sub and sidecar caches (optional)",
    secret: true,
    parse: redisUrl,
  }),
  serviceIdentity: spec({
    key: "service-identity",
    env: "AUTHORITY_SERVICE_IDENTITY",
    description: "service identity protecting platform_service_v2 policies (default authority)",
    parse: text(),
  }),
  bodyLimit: spec({
    key: "body-limit",
    env: "AUTHORITY_BODY_LIMIT",
    description: "largest request body in bytes (default 1048576)",
    parse: integer(1024, 64 * 1024 * 1024),
  }),
  policyCacheSize: spec({
    key: "policy-cache-size",
    env: "AUTHORITY_POLICY_CACHE_SIZE",
    description: "verified policies kept in memory (default 10000)",
    parse: integer(1, 10_000_000),
  }),
  policyCacheTtl: spec({
    key: "policy-cache-ttl",
    env: "AUTHORITY_POLICY_CACHE_TTL",
    description: "seconds a verified policy stays cached (default 300; freshness comes from the record)",
    parse: integer(1, 86_400),
  }),
  recordCache: spec({
    key: "record-cache-ms",
    env: "AUTHORITY_RECORD_CACHE_MS",
    description:
      "milliseconds subject and capability records are reused on the decision path, 0 to read every time (default 1000; policy records are always read)",
    parse: integer(0, 60_000),
  }),
  tokenCacheSize: spec({
    key: "token-cache-size",
    env: "AUTHORITY_TOKEN_CACHE_SIZE",
    description: "verified bearer tokens kept in memory, 0 to verify every time (default 10000)",
    parse: integer(0, 10_000_000),
  }),
  auditBuffer: spec({
    key: "audit-buffer",
    env: "AUTHORITY_AUDIT_BUFFER",
    description: "audit records held while the store is unavailable (default 100000)",
    parse: integer(1, 10_000_000),
  }),
  shutdownTimeout: spec({
    key: "shutdown-timeout",
    env: "AUTHORITY_SHUTDOWN_TIMEOUT",
    description: "seconds to drain requests and flush audit on shutdown (default 10)",
    parse: integer(1, 3600),
  }),
  parameterScoping: spec({
    key: "parameter-scoping",
    env: "AUTHORITY_PARAMETER_SCOPING",
    description: "enforce signed parameter constraints (default false)",
    parse: boolean,
  }),
  parameterScopingPartners: spec({
    key: "parameter-scoping-partners",
    env: "AUTHORITY_PARAMETER_SCOPING_PARTNERS",
    description: "comma-separated partners allowed to use parameter constraints",
    parse: list,
  }),
  mcpAllowedOrigins: spec({
    key: "mcp-allowed-origins",
    env: "AUTHORITY_MCP_ALLOWED_ORIGINS",
    description: "comma-separated browser origins allowed to call /mcp (default: the public URL's origin)",
    parse: list,
  }),
  mcpUpstreamTimeout: spec({
    key: "mcp-upstream-timeout-ms",
    env: "AUTHORITY_MCP_UPSTREAM_TIMEOUT_MS",
    description: "deadline of one upstream call in MCP tools/call (default 10000)",
    parse: integer(1, 600_000),
  }),
  bindingUpstreamTimeout: spec({
    key: "binding-upstream-timeout-ms",
    env: "AUTHORITY_BINDING_UPSTREAM_TIMEOUT_MS",
    description: "deadline of one upstream call of binding invoke and broker execute (default 10000)",
    parse: integer(1, 600_000),
  }),
  workloadTokenLifetime: spec({
    key: "workload-token-lifetime",
    env: "AUTHORITY_WORKLOAD_TOKEN_LIFETIME",
    description: "seconds a workload access token is valid (default 300)",
    parse: integer(30, 86_400),
  }),
  egressAllow: spec(egressAllowSetting),
} as const;

type Settings = typeof authoritySettings;
type SettingName = keyof Settings;
type ValueOf<N extends SettingName> = Settings[N] extends SettingSpec<infer T> ? T : never;

export interface AuthorityConfigInputs {
  readonly flags?: Readonly<Record<string, string | undefined>>;
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** Working directory relative paths resolve against (default process.cwd()). */
  readonly cwd?: string;
}

/** Resolves from already-parsed inputs (no file I/O): what tests call. */
export function resolveAuthorityConfig(inputs: SettingInputs & { readonly cwd?: string }): AuthorityConfig {
  if (inputs.file !== undefined) {
    const unknown = unknownFileKeys(inputs.file, Object.values(authoritySettings) as SettingSpec<unknown>[]);
    if (unknown.length > 0) {
      throw new ConfigError(
        `${inputs.fileName ?? "the config file"} has unknown settings: ${unknown.join(", ")}`,
      );
    }
  }
  const sources: Record<string, SettingSource> = {};
  const get = <N extends SettingName>(name: N): ValueOf<N> | undefined => {
    const setting = authoritySettings[name] as SettingSpec<ValueOf<N>>;
    const resolved = resolveSetting(setting, inputs);
    sources[setting.key] = resolved.source;
    return resolved.value;
  };
  const cwd = inputs.cwd ?? process.cwd();
  const stateDir = resolve(cwd, get("stateDir") ?? "./.authority");
  const store = get("store") ?? `sqlite:${join(stateDir, "authority.db")}`;
  const trustedIssuers = configuredIssuers(
    get("issuer"),
    get("jwksUrl"),
    get("audience"),
    get("trustedIssuers"),
  );
  const primary = trustedIssuers[0] as TrustedIssuer;
  const issuer = primary.issuer;
  const kekValue = get("kek");
  const initKek = get("initKek") ?? false;
  if (initKek && !store.toLowerCase().startsWith("sqlite:")) {
    throw new ConfigError(
      "--init-kek is only for the embedded SQLite store: replicas sharing a store must share one KEK (AUTHORITY_KEK_FILE from a secret)",
    );
  }
  const redis = get("redisUrl");
  const cryptoUrl = get("cryptoUrl");
  const credentialsFile = get("cryptoCredentialsFile");
  const protectionMode = get("policyProtection") ?? (credentialsFile === undefined ? "embedded" : "crypto");
  if (protectionMode === "crypto" && credentialsFile === undefined) {
    throw new ConfigError(
      "--policy-protection crypto needs --crypto-credentials-file (AUTHORITY_CRYPTO_CREDENTIALS_FILE): the service identity's credentials",
    );
  }
  const tokenUrl = get("cryptoTokenUrl") ?? `${issuer}/oauth2/token`;
  const config: AuthorityConfig = {
    logLevel: get("logLevel") ?? "info",
    stateDir,
    storeUrl: store,
    kek: {
      ...(kekValue === undefined ? {} : { value: kekValue }),
      file: resolve(cwd, get("kekFile") ?? join(stateDir, "kek")),
      createIfMissing: initKek,
    },
    listen: get("listen") ?? { host: "127.0.0.1", port: 8080 },
    publicUrl: get("publicUrl") ?? "http://127.0.0.1:8080",
    issuer,
    jwksUrl: primary.jwksUrl,
    audience: primary.audience[0] ?? "authority",
    trustedIssuers,
    managedUrl: get("managedUrl") ?? "https://127.0.0.1:8081",
    cryptoUrl: cryptoUrl ?? "http://127.0.0.1:8082",
    policyProtection:
      protectionMode === "crypto" && credentialsFile !== undefined
        ? { mode: "crypto", credentialsFile: resolve(cwd, credentialsFile), tokenUrl }
        : { mode: "embedded" },
    ...(redis === undefined ? {} : { redisUrl: redis }),
    serviceIdentity: get("serviceIdentity") ?? "authority",
    bodyLimitBytes: get("bodyLimit") ?? 1024 * 1024,
    policyCache: { max: get("policyCacheSize") ?? 10_000, ttlMs: (get("policyCacheTtl") ?? 300) * 1000 },
    tokenCache: { max: get("tokenCacheSize") ?? 10_000 },
    recordCacheMs: get("recordCache") ?? 1000,
    auditBuffer: get("auditBuffer") ?? 100_000,
    shutdownTimeoutMs: (get("shutdownTimeout") ?? 10) * 1000,
    parameterScoping: {
      enabled: get("parameterScoping") ?? false,
      partnerAllowlist: get("parameterScopingPartners") ?? [],
    },
    mcp: {
      ...(get("mcpAllowedOrigins") === undefined ? {} : { allowedOrigins: get("mcpAllowedOrigins") }),
      ...(get("mcpUpstreamTimeout") === undefined ? {} : { upstreamTimeoutMs: get("mcpUpstreamTimeout") }),
    },
    bindings: {
      ...(get("bindingUpstreamTimeout") === undefined
        ? {}
        : { upstreamTimeoutMs: get("bindingUpstreamTimeout") }),
      ...(get("workloadTokenLifetime") === undefined
        ? {}
        : { workloadTokenLifetimeSec: get("workloadTokenLifetime") }),
    },
    egress: { allow: get("egressAllow") ?? [] },
    sources,
  };
  return config;
}

/** Reads the config file named by `--config` / AUTHORITY_CONFIG_FILE (if any), then resolves. */
export async function loadAuthorityConfig(inputs: AuthorityConfigInputs): Promise<AuthorityConfig> {
  const fileName = resolveSetting(authoritySettings.config, inputs).value;
  const cwd = inputs.cwd ?? process.cwd();
  if (fileName === undefined) return resolveAuthorityConfig({ ...inputs, cwd });
  const path = resolve(cwd, fileName);
  return resolveAuthorityConfig({ ...inputs, cwd, file: await readConfigFile(path), fileName: path });
}

/** A flag name's commander attribute name (`public-url` → `publicUrl`). */
export function flagAttribute(key: string): string {
  return key.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}
