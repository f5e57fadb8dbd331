/**
 * The configuration of `authority idp`, the development identity provider: its settings
 * (docs/configuration.md is generated from them) and the typed configuration it starts from.
 */
import { defineProcess, type ProcessInputs, resolveProcessConfig } from "./schema.ts";
import {
  duration,
  existingFile,
  httpUrl,
  type LogLevel,
  listenAddress,
  logLevelSetting,
  path,
  setting,
  text,
} from "./settings.ts";

export interface IdpCommandConfig {
  readonly host: string;
  readonly port: number;
  readonly server: {
    readonly issuer?: string;
    readonly accountsFile?: string;
    readonly keysDir?: string;
    readonly audience: string;
    readonly tenantClaim: string;
    readonly tokenLifetimeSec: number;
    readonly rotationGraceSec: number;
  };
  readonly logLevel: LogLevel;
}

export const idpSettings = {
  listen: setting({
    key: "listen",
    env: "AUTHORITY_IDP_LISTEN",
    description: "address to listen on",
    default: "127.0.0.1:8083",
    parse: listenAddress,
  }),
  issuer: setting({
    key: "issuer",
    env: "AUTHORITY_IDP_ISSUER",
    description: "public issuer URL",
    defaultText: "http://<listen>",
    parse: httpUrl,
  }),
  accountsFile: setting({
    key: "accounts-file",
    env: "AUTHORITY_IDP_ACCOUNTS_FILE",
    description: "JSON file of service accounts and clients",
    parse: existingFile,
  }),
  keysDir: setting({
    key: "keys-dir",
    env: "AUTHORITY_IDP_KEYS_DIR",
    description: "persist signing keys here (mode 0700/0600); in memory when unset",
    parse: path,
  }),
  audience: setting({
    key: "audience",
    env: "AUTHORITY_IDP_AUDIENCE",
    description: "default token audience",
    default: "authority",
    parse: text(),
  }),
  tokenLifetime: setting({
    key: "token-lifetime",
    env: "AUTHORITY_IDP_TOKEN_LIFETIME",
    description: "access-token lifetime in seconds",
    default: 900,
    parse: duration("s", 1, 86_400),
  }),
  tenantClaim: setting({
    key: "tenant-claim",
    env: "AUTHORITY_IDP_TENANT_CLAIM",
    description: "name of the tenant claim",
    default: "tenant",
    parse: text(),
  }),
  rotationGrace: setting({
    key: "rotation-grace",
    env: "AUTHORITY_IDP_ROTATION_GRACE",
    description: "seconds a rotated-out signing key stays published in the JWKS",
    default: 3600,
    parse: duration("s", 1, 30 * 86_400),
  }),
  logLevel: logLevelSetting(),
} as const;

export const idpSchema = defineProcess({
  command: "idp",
  title: "Development identity provider (`authority idp`)",
  settings: idpSettings,
  build(read): IdpCommandConfig {
    const { host, port } = read.value("listen");
    const issuer = read.optional("issuer");
    const accountsFile = read.optional("accountsFile");
    const keysDir = read.optional("keysDir");
    return {
      host,
      port,
      logLevel: read.value("logLevel"),
      server: {
        ...(issuer === undefined ? {} : { issuer }),
        ...(accountsFile === undefined ? {} : { accountsFile }),
        ...(keysDir === undefined ? {} : { keysDir }),
        audience: read.value("audience"),
        tenantClaim: read.value("tenantClaim"),
        tokenLifetimeSec: read.value("tokenLifetime"),
        rotationGraceSec: read.value("rotationGrace"),
      },
    };
  },
});

export function resolveIdpConfig(inputs: ProcessInputs): IdpCommandConfig {
  return resolveProcessConfig(idpSchema, inputs);
}
