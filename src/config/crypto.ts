/**
 * The configuration of `authority crypto`, the upstream post-quantum crypto service: its
 * settings (docs/configuration.md is generated from them) and the typed configuration it
 * starts from.
 */
import { join, resolve } from "node:path";
import { ConfigError } from "../core/config-error.ts";
import { defineProcess, type ProcessInputs, resolveProcessConfig } from "./schema.ts";
import {
  bearerTokenSettings,
  DEFAULT_ISSUER,
  embeddedStateSettings,
  kekSettings,
  type LogLevel,
  list,
  listenAddress,
  logLevelSetting,
  path,
  refuseKekInitOnSharedStore,
  setting,
  text,
} from "./settings.ts";

/** A service owner kept as the operator's files say at every start (decision 2601). */
export interface ServiceOwnerBootstrap {
  readonly id: string;
  /** JSON file or directory with `api_key`, `access_key`, `secret_key`. */
  readonly credentialsPath: string;
  readonly allowedSubjects: readonly string[];
}

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
  readonly serviceOwner?: ServiceOwnerBootstrap;
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
  serviceOwner: setting({
    key: "service-owner",
    env: "AUTHORITY_CRYPTO_SERVICE_OWNER",
    description:
      "a service owner (`service:<identity>`, the authority's) provisioned at start from --service-owner-credentials, or brought up to date with them (new credentials replace the old; its keys stay): the Helm chart's way, no admin call by hand",
    parse: text(),
  }),
  serviceOwnerCredentials: setting({
    key: "service-owner-credentials",
    env: "AUTHORITY_CRYPTO_SERVICE_OWNER_CREDENTIALS",
    description:
      "mounted secret of that owner: a JSON file with `api_key`, `access_key`, `secret_key` (16-256 visible ASCII characters each), or a directory with one file per field",
    parse: path,
  }),
  serviceOwnerSubjects: setting({
    key: "service-owner-subjects",
    env: "AUTHORITY_CRYPTO_SERVICE_OWNER_SUBJECTS",
    description:
      "token subjects allowed to use that owner's credentials (the `sub` of the authority's IdP service account)",
    defaultText: "any subject the issuer vouches for",
    parse: list,
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
    const serviceOwnerId = read.optional("serviceOwner");
    const serviceOwnerCredentials = read.optional("serviceOwnerCredentials");
    if ((serviceOwnerId === undefined) !== (serviceOwnerCredentials === undefined)) {
      throw new ConfigError(
        "--service-owner (AUTHORITY_CRYPTO_SERVICE_OWNER) and --service-owner-credentials (AUTHORITY_CRYPTO_SERVICE_OWNER_CREDENTIALS) go together",
      );
    }
    if (
      serviceOwnerId !== undefined &&
      !/^service:[A-Za-z0-9][A-Za-z0-9._@~-]{0,119}$/.test(serviceOwnerId)
    ) {
      throw new ConfigError("--service-owner must be service:<identity>, e.g. service:authority");
    }
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
      ...(serviceOwnerId === undefined || serviceOwnerCredentials === undefined
        ? {}
        : {
            serviceOwner: {
              id: serviceOwnerId,
              credentialsPath: resolve(read.cwd, serviceOwnerCredentials),
              allowedSubjects: read.optional("serviceOwnerSubjects") ?? [],
            },
          }),
    };
  },
});

export function resolveCryptoConfig(inputs: ProcessInputs): CryptoCommandConfig {
  return resolveProcessConfig(cryptoSchema, inputs);
}
