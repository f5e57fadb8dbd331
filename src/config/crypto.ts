/**
 * The configuration of `authority crypto`, the upstream post-quantum crypto service: its
 * settings (docs/configuration.md is generated from them) and the typed configuration it
 * starts from.
 */
import { join, resolve } from "node:path";
import { defineProcess, type ProcessInputs, resolveProcessConfig } from "./schema.ts";
import {
  bearerTokenSettings,
  DEFAULT_ISSUER,
  embeddedStateSettings,
  kekSettings,
  type LogLevel,
  listenAddress,
  logLevelSetting,
  refuseKekInitOnSharedStore,
  setting,
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
  ...embeddedStateSettings,
  ...kekSettings,
  ...bearerTokenSettings,
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
    const issuer = read.optional("issuer") ?? DEFAULT_ISSUER;
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
      audience: read.optional("audience") ?? "authority",
      adminRole: read.value("adminRole"),
      logLevel: read.value("logLevel"),
    };
  },
});

export function resolveCryptoConfig(inputs: ProcessInputs): CryptoCommandConfig {
  return resolveProcessConfig(cryptoSchema, inputs);
}
