/**
 * The validators every setting of every process uses (docs/configuration.md). Each one parses
 * a raw value from a flag, the environment or a config file into its typed value, or throws a
 * ConfigError whose message starts with `where` (how the user set it: `--listen`,
 * `AUTHORITY_LISTEN`, `listen in authority.yaml`). A validator names its type for the
 * generated reference page.
 */
import { statSync } from "node:fs";
import { resolve } from "node:path";
import { ConfigError } from "../core/config-error.ts";
import { type EgressAllowEntry, parseEgressAllowEntry } from "../core/egress-address.ts";
import { type LogLevel, logLevels } from "../observability/log-level.ts";
import { type ListenAddress, parseListenAddress } from "./listen-address.ts";

export type RawValue = string | number | boolean;

export interface Validator<T> {
  (raw: RawValue, where: string): T;
  /** The type as the reference page and `--help` show it (`integer 1–60000`, `URL`). */
  readonly type: string;
}

export function validator<T>(type: string, parse: (raw: RawValue, where: string) => T): Validator<T> {
  return Object.assign((raw: RawValue, where: string) => parse(raw, where), { type });
}

function asText(raw: RawValue, where: string): string {
  if (typeof raw !== "string") throw new ConfigError(`${where} must be a string`);
  return raw.trim();
}

/** Non-empty text (at most 4096 characters unless it is a secret, which may be a long token). */
export const text = (options: { secret?: boolean } = {}): Validator<string> =>
  validator(options.secret === true ? "secret text" : "text", (raw, where) => {
    const value = asText(raw, where);
    if (value.length === 0) throw new ConfigError(`${where} must not be empty`);
    if (options.secret !== true && value.length > 4096) throw new ConfigError(`${where} is too long`);
    return value;
  });

/** A whole number from `min` to `max` (a string of digits, or a number in a config file). */
export function integer(min: number, max: number): Validator<number> {
  return validator(`integer ${min}–${max}`, (raw, where) => {
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
  });
}

/** A whole number from 1 to `max` (counts, sizes, rates). */
export function positiveInteger(max: number = Number.MAX_SAFE_INTEGER): Validator<number> {
  return integer(1, max);
}

const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 } as const;
type DurationUnit = "ms" | "s";

/**
 * A duration in `unit` (the setting's unit, which its name or description says), from `min` to
 * `max` of that unit. A bare integer is in the unit (`--shutdown-timeout 10`: 10 s); a number
 * with a suffix `ms`, `s`, `m` or `h` is converted (`15m`), and must come out whole.
 */
export function duration(unit: DurationUnit, min: number, max: number): Validator<number> {
  return validator(`duration ${min}–${max} ${unit}`, (raw, where) => {
    const shape = /^(\d{1,15})(ms|s|m|h)?$/.exec(typeof raw === "number" ? String(raw) : String(raw).trim());
    const message = `${where} must be a duration from ${min} to ${max} ${unit} (a whole number of ${unit}, or with a unit: 500ms, 10s, 15m, 1h)`;
    if (shape === null || (typeof raw !== "string" && typeof raw !== "number"))
      throw new ConfigError(message);
    const amount = Number(shape[1]);
    const suffix = (shape[2] ?? unit) as keyof typeof UNIT_MS;
    const value = (amount * UNIT_MS[suffix]) / UNIT_MS[unit];
    if (!Number.isSafeInteger(value) || value < min || value > max) throw new ConfigError(message);
    return value;
  });
}

export const boolean: Validator<boolean> = validator("boolean", (raw, where) => {
  if (typeof raw === "boolean") return raw;
  const value = String(raw).trim().toLowerCase();
  if (["1", "true", "yes", "on"].includes(value)) return true;
  if (["0", "false", "no", "off"].includes(value)) return false;
  throw new ConfigError(`${where} must be true or false`);
});

/** A comma-separated list (empty items dropped). */
export const list: Validator<string[]> = validator("comma-separated list", (raw, where) =>
  asText(raw, where)
    .split(",")
    .map((item) => item.trim())
    .filter((item) => item.length > 0),
);

/** An absolute http(s) URL, without trailing slashes. */
export const httpUrl: Validator<string> = validator("URL", (raw, where) => {
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
});

/** One of a fixed set of words. */
export function oneOf<T extends string>(values: readonly T[]): Validator<T> {
  return validator(values.join(" | "), (raw, where) => {
    const value = asText(raw, where);
    if (!(values as readonly string[]).includes(value)) {
      throw new ConfigError(`${where} must be one of ${values.join(", ")}`);
    }
    return value as T;
  });
}

export { type LogLevel, logLevels };
export const logLevel: Validator<LogLevel> = oneOf(logLevels);

export type { ListenAddress };

/** `host:port` or `[v6]:port` (port 0: any free port). */
export const listenAddress: Validator<ListenAddress> = validator("host:port", (raw, where) =>
  parseListenAddress(asText(raw, where), where),
);

/** A path (text); relative paths are kept as given and resolve against the working directory. */
export const path: Validator<string> = validator("path", (raw, where) => text()(raw, where));

/**
 * A file that must exist when the process starts (a mounted secret, a certificate): found
 * missing here, the start stops with the setting's name, not later with a bare ENOENT.
 */
export const existingFile: Validator<string> = validator("path of an existing file", (raw, where) => {
  const value = text()(raw, where);
  let isFile: boolean;
  try {
    isFile = statSync(resolve(value)).isFile();
  } catch {
    throw new ConfigError(`${where}: ${value} does not exist or cannot be read`);
  }
  if (!isFile) throw new ConfigError(`${where}: ${value} is not a file`);
  return value;
});

/**
 * A store URL: `sqlite:<file>`, `redis(s)://…` or `postgres(ql)://…`; the value may hold a
 * password, so it is never echoed.
 */
export const storeUrl: Validator<string> = validator("sqlite:<file>, redis or postgres URL", (raw, where) => {
  const value = asText(raw, where);
  if (!/^(sqlite:.+|rediss?:\/\/.+|postgres(ql)?:\/\/.+)$/i.test(value)) {
    throw new ConfigError(
      `${where} must be sqlite:<file>, redis://host:port[/db] or postgres://[user[:password]@]host[:port]/database`,
    );
  }
  return value;
});

export const redisUrl: Validator<string> = validator("redis URL", (raw, where) => {
  const value = asText(raw, where);
  if (!/^rediss?:\/\/.+/i.test(value)) throw new ConfigError(`${where} must be redis://host:port[/db]`);
  return value;
});

/**
 * The egress allow list: comma-separated CIDR blocks (`10.0.0.0/8`, `fd00::/8`, a bare address),
 * `address:port` entries (`127.0.0.1:18080`, `[::1]:18080`) and host names with an optional port
 * (`orders.shop.svc.cluster.local:8080`). Every connection is still checked on the address it
 * really reaches; a name entry admits the addresses that name resolves to.
 */
export const egressAllowList: Validator<EgressAllowEntry[]> = validator(
  "comma-separated CIDRs, address:port and host[:port]",
  (raw, where) =>
    list(raw, where).map((item) => {
      const entry = parseEgressAllowEntry(item);
      if (entry === undefined) {
        throw new ConfigError(
          `${where}: ${JSON.stringify(item.slice(0, 80))} is not a CIDR block, an address:port or a host name[:port] (e.g. 10.0.0.0/8, 127.0.0.1:18080, [::1]:18080, orders.shop.svc.cluster.local:8080)`,
        );
      }
      return entry;
    }),
);
