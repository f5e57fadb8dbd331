/**
 * The configuration of `authority managed`, the managed crypto API: its settings
 * (docs/configuration.md is generated from them) and the typed configuration it starts from.
 */
import { ConfigError } from "../core/config-error.ts";
import { defineProcess, type ProcessInputs, resolveProcessConfig } from "./schema.ts";
import {
  duration,
  existingFile,
  httpUrl,
  type LogLevel,
  listenAddress,
  logLevelSetting,
  path,
  positiveInteger,
  setting,
  text,
} from "./settings.ts";

export interface ManagedCommandConfig {
  readonly host: string;
  readonly port: number;
  readonly tls: { readonly certFile: string; readonly keyFile: string } | undefined;
  readonly stateDir: string;
  readonly logLevel: LogLevel;
  readonly server: {
    readonly idpTokenUrl: string;
    readonly cryptoUrl: string;
    readonly upstreamTimeoutMs: number;
    readonly rateLimit: { readonly perUserPerMinute: number; readonly burst: number };
    readonly idp: {
      readonly clientId?: string;
      readonly clientSecret?: string;
      readonly scope?: string;
      readonly audience?: string;
    };
  };
}

export const managedSettings = {
  listen: setting({
    key: "listen",
    env: "AUTHORITY_MANAGED_LISTEN",
    description: "address to listen on",
    default: "127.0.0.1:8081",
    parse: listenAddress,
  }),
  tlsCert: setting({
    key: "tls-cert",
    env: "AUTHORITY_TLS_CERT_FILE",
    description: "PEM certificate (chain); with --tls-key",
    defaultText: "a development certificate kept in the state dir",
    parse: existingFile,
  }),
  tlsKey: setting({
    key: "tls-key",
    env: "AUTHORITY_TLS_KEY_FILE",
    description: "PEM private key of --tls-cert",
    parse: existingFile,
  }),
  stateDir: setting({
    key: "state-dir",
    env: "AUTHORITY_STATE_DIR",
    description: "where a development certificate is kept when no TLS files are given",
    default: "./.authority",
    parse: path,
  }),
  idpTokenUrl: setting({
    key: "idp-token-url",
    env: "AUTHORITY_IDP_TOKEN_URL",
    description: "identity provider token endpoint (password grant)",
    default: "http://127.0.0.1:8083/oauth2/token",
    parse: httpUrl,
  }),
  idpClientId: setting({
    key: "idp-client-id",
    env: "AUTHORITY_MANAGED_IDP_CLIENT_ID",
    description: "client id for the password grant (optional client authentication; with its secret)",
    parse: text(),
  }),
  idpClientSecret: setting({
    key: "idp-client-secret",
    env: "AUTHORITY_MANAGED_IDP_CLIENT_SECRET",
    description: "client secret for the password grant (environment only)",
    secret: true,
    noFlag: true,
    notInFile: true,
    parse: text({ secret: true }),
  }),
  idpScope: setting({
    key: "idp-scope",
    env: "AUTHORITY_MANAGED_IDP_SCOPE",
    description: "scopes to request",
    parse: text(),
  }),
  idpAudience: setting({
    key: "idp-audience",
    env: "AUTHORITY_MANAGED_IDP_AUDIENCE",
    description: "audience to request",
    parse: text(),
  }),
  cryptoUrl: setting({
    key: "crypto-url",
    env: "AUTHORITY_CRYPTO_URL",
    description: "upstream crypto service",
    default: "http://127.0.0.1:8082",
    parse: httpUrl,
  }),
  rateLimit: setting({
    key: "rate-limit",
    env: "AUTHORITY_MANAGED_RATE_LIMIT",
    description: "requests per user per minute",
    default: 600,
    parse: positiveInteger(1_000_000),
  }),
  rateBurst: setting({
    key: "rate-burst",
    env: "AUTHORITY_MANAGED_RATE_BURST",
    description: "requests a user may send at once, above the steady rate",
    default: 60,
    parse: positiveInteger(1_000_000),
  }),
  upstreamTimeout: setting({
    key: "upstream-timeout-ms",
    flagAliases: ["upstream-timeout"],
    env: "AUTHORITY_MANAGED_UPSTREAM_TIMEOUT_MS",
    description: "deadline of one crypto-service call in ms",
    default: 5000,
    parse: duration("ms", 1, 600_000),
  }),
  logLevel: logLevelSetting(),
} as const;

export const managedSchema = defineProcess({
  command: "managed",
  title: "Managed crypto API (`authority managed`)",
  settings: managedSettings,
  build(read): ManagedCommandConfig {
    const { host, port } = read.value("listen");
    const certFile = read.optional("tlsCert");
    const keyFile = read.optional("tlsKey");
    if ((certFile === undefined) !== (keyFile === undefined)) {
      throw new ConfigError("--tls-cert and --tls-key go together");
    }
    const clientId = read.optional("idpClientId");
    const clientSecret = read.optional("idpClientSecret");
    if ((clientId === undefined) !== (clientSecret === undefined)) {
      throw new ConfigError("--idp-client-id needs AUTHORITY_MANAGED_IDP_CLIENT_SECRET, and the reverse");
    }
    const scope = read.optional("idpScope");
    const audience = read.optional("idpAudience");
    return {
      host,
      port,
      tls: certFile === undefined || keyFile === undefined ? undefined : { certFile, keyFile },
      stateDir: read.value("stateDir"),
      logLevel: read.value("logLevel"),
      server: {
        idpTokenUrl: read.value("idpTokenUrl"),
        cryptoUrl: read.value("cryptoUrl"),
        upstreamTimeoutMs: read.value("upstreamTimeout"),
        rateLimit: { perUserPerMinute: read.value("rateLimit"), burst: read.value("rateBurst") },
        idp: {
          ...(clientId === undefined || clientSecret === undefined ? {} : { clientId, clientSecret }),
          ...(scope === undefined ? {} : { scope }),
          ...(audience === undefined ? {} : { audience }),
        },
      },
    };
  },
});

export function resolveManagedConfig(inputs: ProcessInputs): ManagedCommandConfig {
  return resolveProcessConfig(managedSchema, inputs);
}
