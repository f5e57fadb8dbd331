/**
 * Settings resolved from flags, the environment and an optional JSON or YAML file, in that
 * order of precedence (flags win), then defaults. Each setting names its flag (also its
 * key in the file) and its environment variable (docs/configuration.md); it is parsed and
 * validated once, at start. Messages name the setting and where it came from, never the
 * value of a secret one.
 */
import { type EgressAllowEntry, parseEgressAllowEntry } from "../core/egress-address.ts";
import { ConfigError } from "./errors.ts";
import { type ListenAddress, parseListenAddress } from "./listen-address.ts";

export type RawValue = string | number | boolean;

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
  /** Parses a present value; `where` is for messages. */
  parse(raw: RawValue, where: string): T;
  /** Parses a list or mapping given in a config file (settings that accept one). */
  parseStructured?(value: unknown, where: string): T;
}

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

/** The value of one setting (undefined when nowhere given: the caller applies its default). */
export function resolveSetting<T>(spec: SettingSpec<T>, inputs: SettingInputs): ResolvedSetting<T> {
  const flag = inputs.flags?.[spec.key];
  if (flag !== undefined) return { value: spec.parse(flag, `--${spec.key}`), source: "flag" };
  const env = spec.env === undefined ? undefined : inputs.env?.[spec.env];
  if (env !== undefined && env !== "") return { value: spec.parse(env, spec.env ?? ""), source: "env" };
  if (spec.notInFile !== true && inputs.file !== undefined && Object.hasOwn(inputs.file, spec.key)) {
    const raw = inputs.file[spec.key];
    const where = `${spec.key} in ${inputs.fileName ?? "the config file"}`;
    if (raw === null || raw === undefined) return { value: undefined, source: "file" };
    if (!isRaw(raw) && spec.parseStructured !== undefined) {
      return { value: spec.parseStructured(raw, where), source: "file" };
    }
    if (!isRaw(raw)) throw new ConfigError(`${where} must be a string, number or boolean`);
    return { value: spec.parse(raw, where), source: "file" };
  }
  return { value: undefined, source: "default" };
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
// Parsers

function asText(raw: RawValue, where: string): string {
  if (typeof raw !== "string") throw new ConfigError(`${where} must be a string`);
  return raw.trim();
}

export const text =
  (options: { secret?: boolean } = {}) =>
  (raw: RawValue, where: string): string => {
    const value = asText(raw, where);
    if (value.length === 0) throw new ConfigError(`${where} must not be empty`);
    if (options.secret !== true && value.length > 4096) throw new ConfigError(`${where} is too long`);
    return value;
  };

export function integer(min: number, max: number) {
  return (raw: RawValue, where: string): number => {
    const value =
      typeof raw === "number"
        ? raw
        : typeof raw === "string" && /^\d+$/.test(raw.trim())
          ? Number(raw)
          : Number.NaN;
    if (!Number.isSafeInteger(value) || value < min || value > max) {
      throw new ConfigError(`${where} must be an integer from ${min} to ${max}`);
    }
    return value;
  };
}

export function boolean(raw: RawValue, where: string): boolean {
  if (typeof raw === "boolean") return raw;
  const value = String(raw).trim().toLowerCase();
  if (["1", "true", "yes", "on"].includes(value)) return true;
  if (["0", "false", "no", "off"].includes(value)) return false;
  throw new ConfigError(`${where} must be true or false`);
}

export function list(raw: RawValue, where: string): string[] {
  const value = asText(raw, where);
  return value
    .split(",")
    .map((item) => item.trim())
    .filter((item) => item.length > 0);
}

export function httpUrl(raw: RawValue, where: string): string {
  const value = asText(raw, where);
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new ConfigError(`${where} must be an absolute http(s) URL`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new ConfigError(`${where} must be an absolute http(s) URL`);
  }
  return value.replace(/\/+$/, "");
}

export function oneOf<T extends string>(values: readonly T[]) {
  return (raw: RawValue, where: string): T => {
    const value = asText(raw, where);
    if (!(values as readonly string[]).includes(value)) {
      throw new ConfigError(`${where} must be one of ${values.join(", ")}`);
    }
    return value as T;
  };
}

export type { ListenAddress };

/** `host:port` or `[v6]:port`. */
export function listenAddress(raw: RawValue, where: string): ListenAddress {
  return parseListenAddress(asText(raw, where), where);
}

/** A store URL: `sqlite:<file>` or `redis(s)://…`; the value may hold a password, so it is never echoed. */
export function storeUrl(raw: RawValue, where: string): string {
  const value = asText(raw, where);
  if (!/^(sqlite:.+|rediss?:\/\/.+)$/i.test(value)) {
    throw new ConfigError(`${where} must be sqlite:<file> or redis://host:port[/db]`);
  }
  return value;
}

export function redisUrl(raw: RawValue, where: string): string {
  const value = asText(raw, where);
  if (!/^rediss?:\/\/.+/i.test(value)) throw new ConfigError(`${where} must be redis://host:port[/db]`);
  return value;
}

/**
 * The egress allow list: comma-separated CIDR blocks (`10.0.0.0/8`, `fd00::/8`, a bare address)
 * and `address:port` entries (`127.0.0.1:18080`, `[::1]:18080`). Host names are not accepted:
 * the policy is checked on the address a connection really reaches.
 */
export function egressAllowList(raw: RawValue, where: string): EgressAllowEntry[] {
  return list(raw, where).map((item) => {
    const entry = parseEgressAllowEntry(item);
    if (entry === undefined) {
      throw new ConfigError(
        `${where}: ${JSON.stringify(item.slice(0, 80))} is not a CIDR block or an address:port (e.g. 10.0.0.0/8, 127.0.0.1:18080, [::1]:18080)`,
      );
    }
    return entry;
  });
}

/** The egress allow list setting, shared by every process that calls upstreams (serve, sidecar). */
export const egressAllowSetting: SettingSpec<EgressAllowEntry[]> = {
  key: "egress-allow",
  env: "AUTHORITY_EGRESS_ALLOW",
  description:
    "comma-separated CIDRs and address:port entries upstream calls may reach beyond public addresses (default: none)",
  parse: egressAllowList,
};

/** The bearer-token settings every server that verifies tokens shares (serve, sidecar). */
export const bearerTokenSettings = {
  issuer: {
    key: "issuer",
    env: "AUTHORITY_ISSUER",
    description: "issuer of accepted bearer tokens (default http://127.0.0.1:8083)",
    parse: httpUrl,
  } satisfies SettingSpec<string>,
  jwksUrl: {
    key: "jwks-url",
    env: "AUTHORITY_JWKS_URL",
    description: "JWKS of the issuer (default <issuer>/.well-known/jwks.json)",
    parse: httpUrl,
  } satisfies SettingSpec<string>,
  audience: {
    key: "audience",
    env: "AUTHORITY_AUDIENCE",
    description: "required token audience (default authority)",
    parse: text(),
  } satisfies SettingSpec<string>,
};
