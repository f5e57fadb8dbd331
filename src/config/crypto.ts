/**
 * The configuration of `authority crypto`, the upstream post-quantum crypto service: its
 * settings (docs/configuration.md is generated from them) and the typed configuration it
 * starts from.
 */
import { join, resolve } from "node:path";
import { defineProcess, type ProcessInputs, resolveProcessConfig } from "./schema.ts";
import {
  httpUrl,
  kekSettings,
  type LogLevel,
  listenAddress,
  logLevelSetting,
  path,
  refuseKekInitOnSharedStore,
  setting,
  storeUrl,
  text,
} from "./settings.ts";

export interface CryptoCommandConfig {
  readonly host: string;
  readonly port: number;
  readonly storeUrl: string;
  /** The KEK itself (AUTHORITY_KEK), when given: it wins over the file. */
  readonly kekValue?: string;
  readonly kekFile: string;
  /** Create the KEK file when it is absent (explicit init; embedded SQLite store only). */
  readonly initKek: boolean;
  readonly issuer: string;
  readonly jwksUrl: string;
  readonly audience: string;
  readonly adminRole: string;
  readonly logLevel: LogLevel;
}

export const cryptoSettings = {
  listen: setting({
    key: "listen",
    env: "AUTHORITY_CRYPTO_LISTEN",
    description: "address to listen on",
    default: "127.0.0.1:8082",
    parse: listenAddress,
  }),
  stateDir: setting({
    key: "state-dir",
    env: "AUTHORITY_STATE_DIR",
    description: "embedded state directory",
    default: "./.authority",
    parse: path,
  }),
  store: setting({
    key: "store",
    env: "AUTHORITY_STORE_URL",
    description: "the store: `sqlite:<file>` or `redis://host:port/db`",
    defaultText: "sqlite:<state-dir>/authority.db",
    secret: true,
    parse: storeUrl,
  }),
  ...kekSettings,
  issuer: setting({
    key: "issuer",
    env: "AUTHORITY_ISSUER",
    description: "issuer of accepted bearer tokens",
    default: "http://127.0.0.1:8083",
    parse: httpUrl,
  }),
  jwksUrl: setting({
    key: "jwks-url",
    env: "AUTHORITY_JWKS_URL",
    description: "JWKS of the issuer",
    defaultText: "<issuer>/.well-known/jwks.json",
    parse: httpUrl,
  }),
  audience: setting({
    key: "audience",
    env: "AUTHORITY_AUDIENCE",
    description: "required token audience",
    default: "authority",
    parse: text(),
  }),
  adminRole: setting({
    key: "admin-role",
    env: "AUTHORITY_CRYPTO_ADMIN_ROLE",
    description: "role that may provision and rotate owners (the admin routes)",
    default: "admin",
    parse: text(),
  }),
  logLevel: logLevelSetting(),
} as const;

export const cryptoSchema = defineProcess({
  command: "crypto",
  title: "Upstream crypto service (`authority crypto`)",
  settings: cryptoSettings,
  build(read): CryptoCommandConfig {
    const { host, port } = read.value("listen");
    const issuer = read.value("issuer");
    const stateDir = read.value("stateDir");
    const storeUrl = read.optional("store") ?? `sqlite:${join(stateDir, "authority.db")}`;
    const initKek = read.value("initKek");
    refuseKekInitOnSharedStore(initKek, storeUrl);
    const kek = read.optional("kek");
    return {
      host,
      port,
      storeUrl,
      ...(kek === undefined ? {} : { kekValue: kek }),
      kekFile: resolve(read.cwd, read.optional("kekFile") ?? join(stateDir, "kek")),
      initKek,
      issuer,
      jwksUrl: read.optional("jwksUrl") ?? `${issuer}/.well-known/jwks.json`,
      audience: read.value("audience"),
      adminRole: read.value("adminRole"),
      logLevel: read.value("logLevel"),
    };
  },
});

export function resolveCryptoConfig(inputs: ProcessInputs): CryptoCommandConfig {
  return resolveProcessConfig(cryptoSchema, inputs);
}
