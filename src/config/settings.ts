/**
 * The one configuration mechanism of every `authority` process. A setting is defined once —
 * its key (the flag without dashes, also its key in a config file), environment variable,
 * validator, default, description and whether it is a secret — and a process's schema lists
 * its settings and turns them into the typed configuration its builder takes. Values come
 * from flags, the environment and an optional JSON or YAML file (`--config`), in that order
 * of precedence, then defaults; they are validated once, at start. Messages name the setting
 * and where it came from, never the value of a secret one. docs/configuration.md is
 * generated from these definitions (scripts/gen-configuration-doc.ts).
 */

import { ConfigError } from "../core/config-error.ts";
import type { EgressAllowEntry } from "../core/egress-address.ts";
import {
  boolean,
  duration,
  egressAllowList,
  httpUrl,
  integer,
  type LogLevel,
  logLevel,
  path,
  type RawValue,
  storeUrl,
  text,
  type Validator,
} from "./validators.ts";

export * from "./validators.ts";

export type SettingSource = "flag" | "env" | "file" | "default";

export interface SettingSpec<T> {
  /** Flag name without dashes; also the key in a config file. */
  readonly key: string;
  readonly env?: string;
  readonly description: string;
  /** The value may be a credential or contain one (a URL with a password): never echoed. */
  readonly secret?: boolean;
  /** Not settable from a config file (it holds the file's own path, or a secret). */
  readonly notInFile?: boolean;
  /** Not offered as a flag (a secret on a command line shows in process listings). */
  readonly noFlag?: boolean;
  /**
   * The flag of a boolean setting whose default is true is `--no-<key>` (`--no-sidecar`); other
   * boolean flags take an optional value (`--init-kek` alone means true).
   */
  readonly negatedFlag?: boolean;
  /** Older flag names that keep working (`--upstream-timeout` for `--upstream-timeout-ms`). */
  readonly flagAliases?: readonly string[];
  /** The value when the setting is given nowhere, as a user would write it (validated like one). */
  readonly default?: RawValue;
  /** How the reference page states a default derived from other settings (`<state-dir>/kek`). */
  readonly defaultText?: string;
  /** The type as the reference page shows it, when the parser is not a named validator. */
  readonly type?: string;
  /** Parses a present value; `where` is for messages. */
  parse(raw: RawValue, where: string): T;
  /** Parses a list or mapping given in a config file (settings that accept one). */
  parseStructured?(value: unknown, where: string): T;
}

export type Settings = Readonly<Record<string, SettingSpec<unknown>>>;

/** Defines a setting, keeping its value type. */
export const setting = <T>(s: SettingSpec<T>): SettingSpec<T> => s;

export interface SettingInputs {
  /** Values given as flags, by setting key; undefined entries are absent. */
  readonly flags?: Readonly<Record<string, string | undefined>>;
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** Parsed config file contents. */
  readonly file?: Readonly<Record<string, unknown>>;
  /** For messages: the file's path. */
  readonly fileName?: string;
}

export interface ResolvedSetting<T> {
  readonly value: T | undefined;
  readonly source: SettingSource;
}

function isRaw(value: unknown): value is RawValue {
  return typeof value === "string" || typeof value === "number" || typeof value === "boolean";
}

/** The type of a setting as the reference page and the help show it. */
export function settingType(spec: SettingSpec<unknown>): string {
  return spec.type ?? (spec.parse as Partial<Validator<unknown>>).type ?? "text";
}

/**
 * Runs a parser. For a secret setting, a message that would repeat any part of the value is
 * replaced by one that names only the setting: validators are written not to echo, and this
 * holds even when one does.
 */
function parseWith<T>(spec: SettingSpec<T>, where: string, parse: () => T, raw: unknown): T {
  try {
    return parse();
  } catch (error) {
    if (spec.secret !== true || !(error instanceof ConfigError)) throw error;
    const value = typeof raw === "string" ? raw.trim() : JSON.stringify(raw);
    if (value === undefined || value.length === 0 || !leaks(error.message, value)) throw error;
    throw new ConfigError(`${where} is not valid (${settingType(spec)}; the value is secret and not shown)`);
  }
}

/** Whether a message holds the value or a run of 8 or more of its characters. */
function leaks(message: string, value: string): boolean {
  const run = 8;
  if (value.length < run) return message.includes(value);
  for (let i = 0; i + run <= value.length; i += 1) {
    if (message.includes(value.slice(i, i + run))) return true;
  }
  return false;
}

/** The value of one setting; its default (or undefined when it has none) when given nowhere. */
export function resolveSetting<T>(spec: SettingSpec<T>, inputs: SettingInputs): ResolvedSetting<T> {
  const flag = spec.noFlag === true ? undefined : inputs.flags?.[spec.key];
  if (flag !== undefined) {
    const where = `--${spec.key}`;
    return { value: parseWith(spec, where, () => spec.parse(flag, where), flag), source: "flag" };
  }
  const env = spec.env === undefined ? undefined : inputs.env?.[spec.env];
  if (env !== undefined && env !== "") {
    const where = spec.env ?? "";
    return { value: parseWith(spec, where, () => spec.parse(env, where), env), source: "env" };
  }
  if (spec.notInFile !== true && inputs.file !== undefined && Object.hasOwn(inputs.file, spec.key)) {
    const raw = inputs.file[spec.key];
    const where = `${spec.key} in ${inputs.fileName ?? "the config file"}`;
    if (raw !== null && raw !== undefined) {
      if (!isRaw(raw) && spec.parseStructured !== undefined) {
        const parseStructured = spec.parseStructured.bind(spec);
        return { value: parseWith(spec, where, () => parseStructured(raw, where), raw), source: "file" };
      }
      if (!isRaw(raw)) throw new ConfigError(`${where} must be a string, number or boolean`);
      return { value: parseWith(spec, where, () => spec.parse(raw, where), raw), source: "file" };
    }
  }
  const fallback = spec.default;
  if (fallback === undefined) return { value: undefined, source: "default" };
  return { value: spec.parse(fallback, `the default of ${spec.key}`), source: "default" };
}

/** Keys of a config file that no setting knows: a typo must not be silently ignored. */
export function unknownFileKeys(
  file: Readonly<Record<string, unknown>>,
  specs: readonly SettingSpec<unknown>[],
): string[] {
  const known = new Set(specs.filter((s) => s.notInFile !== true).map((s) => s.key));
  return Object.keys(file).filter((key) => !known.has(key));
}

// ---------------------------------------------------------------------------------------
// Settings several processes share: defined here once, listed by each process's schema.

/**
 * `--config`: every process reads its settings file from here. Only `authority serve` also
 * takes it from the environment (AUTHORITY_CONFIG_FILE): a variable exported for one process
 * must not hand its file, refused for unknown keys, to another started from the same shell.
 */
export const configFileSetting = (env?: string): SettingSpec<string> =>
  setting({
    key: "config",
    ...(env === undefined ? {} : { env }),
    description: "JSON or YAML file of settings (keys: the flag names without `--`)",
    notInFile: true,
    type: "path",
    parse: text(),
  });

/** `--log-level`; `withEnv: false` for a command whose log level AUTHORITY_LOG_LEVEL must not change. */
export const logLevelSetting = (fallback: LogLevel = "info", withEnv = true): SettingSpec<LogLevel> =>
  setting({
    key: "log-level",
    ...(withEnv ? { env: "AUTHORITY_LOG_LEVEL" } : {}),
    description: "log level (pino)",
    default: fallback,
    parse: logLevel,
  });

/**
 * The egress allow list setting, shared by every process that calls upstreams or starts one
 * that does (serve, sidecar, dev). In a config file it is a list or one comma-separated string.
 */
export const egressAllowSetting: SettingSpec<EgressAllowEntry[]> = {
  key: "egress-allow",
  env: "AUTHORITY_EGRESS_ALLOW",
  description:
    "CIDRs, address:port and host[:port] entries upstream calls may reach beyond public addresses (see *Egress allow list*)",
  parse: egressAllowList,
  parseStructured(value, where) {
    if (!Array.isArray(value) || value.length > 1024 || !value.every((item) => typeof item === "string")) {
      throw new ConfigError(
        `${where} must be a list of entries (CIDR, address:port, host[:port]) or one comma-separated string`,
      );
    }
    return value.flatMap((item, index) => egressAllowList(item, `${where}[${index}]`));
  },
};

/** The development IdP's issuer: the default wherever an issuer is not given. */
export const DEFAULT_ISSUER = "http://127.0.0.1:8083";

/** The bearer-token settings every server that verifies tokens shares (serve, sidecar, crypto). */
export const bearerTokenSettings = {
  issuer: setting({
    key: "issuer",
    env: "AUTHORITY_ISSUER",
    description: "issuer of accepted bearer tokens (the primary trusted issuer)",
    defaultText: DEFAULT_ISSUER,
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
    defaultText: "authority",
    parse: text(),
  }),
};

/** Where a process that keeps state embedded (serve, crypto) keeps it. */
export const embeddedStateSettings = {
  stateDir: setting({
    key: "state-dir",
    env: "AUTHORITY_STATE_DIR",
    description: "embedded state directory (SQLite file, wrapped keys)",
    default: "./.authority",
    parse: path,
  }),
  store: setting({
    key: "store",
    env: "AUTHORITY_STORE_URL",
    description:
      "the store: `sqlite:<file>`, `redis://host:port/db` or `postgres://user:password@host:port/database` (migrated at start; docs/store.md)",
    defaultText: "sqlite:<state-dir>/authority.db",
    flagAliases: ["store-url"],
    secret: true,
    parse: storeUrl,
  }),
};

/** The connection pool of a PostgreSQL store (ignored by the SQLite and Redis stores). */
export const storePoolSettings = {
  storePoolSize: setting({
    key: "store-pool-size",
    env: "AUTHORITY_STORE_POOL_SIZE",
    description: "most connections to a PostgreSQL store this process opens",
    default: 10,
    parse: integer(1, 1000),
  }),
  storeStatementTimeout: setting({
    key: "store-statement-timeout-ms",
    env: "AUTHORITY_STORE_STATEMENT_TIMEOUT_MS",
    description:
      "a PostgreSQL statement running longer is cancelled and the call fails closed as the store being unavailable (503)",
    default: 5000,
    parse: duration("ms", 10, 600_000),
  }),
};

/**
 * The key-encryption key of a process that keeps key rings at rest (serve's embedded mode, the
 * crypto service). Created only by an explicit init; a missing file is an error naming its path.
 */
export const kekSettings = {
  kekFile: setting({
    key: "kek-file",
    env: "AUTHORITY_KEK_FILE",
    description:
      "key-encryption key file (32 bytes, base64) wrapping keys at rest; a missing file is an error unless --init-kek (AUTHORITY_KEK wins)",
    defaultText: "<state-dir>/kek",
    parse: path,
  }),
  kek: setting({
    key: "kek",
    env: "AUTHORITY_KEK",
    description: "the key-encryption key itself (base64), instead of a file; environment only",
    secret: true,
    notInFile: true,
    noFlag: true,
    parse: text({ secret: true }),
  }),
  initKek: setting({
    key: "init-kek",
    env: "AUTHORITY_INIT_KEK",
    description:
      "create the KEK file if it does not exist (first start of an embedded SQLite install; refused with a shared store)",
    default: false,
    parse: boolean,
  }),
};

/** Replicas sharing a store must share one KEK: a new one is made only for an embedded SQLite store. */
export function refuseKekInitOnSharedStore(initKek: boolean, storeUrl: string): void {
  if (initKek && !storeUrl.toLowerCase().startsWith("sqlite:")) {
    throw new ConfigError(
      "--init-kek is only for the embedded SQLite store: replicas sharing a store must share one KEK (AUTHORITY_KEK_FILE from a secret)",
    );
  }
}
