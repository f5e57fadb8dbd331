import { ConfigError } from "../core/config-error.ts";

export interface ListenAddress {
  readonly host: string;
  readonly port: number;
}

const SHAPE = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]\s]+)):(\d+)$/;

/**
 * `host:port` or `[v6]:port` (port 0 picks a free port). The one parser of listen addresses for
 * every process; its messages say what is wrong: the shape, or the port's range.
 */
export function parseListenAddress(value: string, where = "listen address"): ListenAddress {
  const match = SHAPE.exec(value);
  const host = match?.[1] ?? match?.[2];
  const digits = match?.[3];
  if (host === undefined || digits === undefined) {
    throw new ConfigError(
      `${where} must be host:port or [ipv6]:port, got ${JSON.stringify(value.slice(0, 80))}`,
    );
  }
  const port = Number(digits);
  if (!Number.isSafeInteger(port) || port > 65535) {
    throw new ConfigError(`${where}: port ${digits.slice(0, 12)} is out of range (0-65535)`);
  }
  return { host, port };
}
