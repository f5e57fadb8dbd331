/**
 * Where the development environment listens: the documented default ports (DESIGN §6,
 * docs/configuration.md), or free ports chosen by the OS so a demo or a test never
 * collides with a running `authority dev`.
 */
import { createServer } from "node:net";

export const DEV_HOST = "127.0.0.1";

export interface DevPorts {
  readonly authority: number;
  readonly managed: number;
  readonly crypto: number;
  readonly idp: number;
  readonly sampleApi: number;
  readonly sidecarGrpc: number;
  readonly sidecarProxy: number;
  readonly sidecarMetrics: number;
}

export const DEFAULT_DEV_PORTS: DevPorts = {
  authority: 8080,
  managed: 8081,
  crypto: 8082,
  idp: 8083,
  sampleApi: 18080,
  sidecarGrpc: 9191,
  sidecarProxy: 15101,
  sidecarMetrics: 9464,
};

/** Every port 0 ("any free port"): each server reports the port it bound. */
export const EPHEMERAL_DEV_PORTS: DevPorts = {
  authority: 0,
  managed: 0,
  crypto: 0,
  idp: 0,
  sampleApi: 0,
  sidecarGrpc: 0,
  sidecarProxy: 0,
  sidecarMetrics: 0,
};

/** Below Linux's ephemeral range (32768–60999), which the OS hands to every port-0 bind and outgoing connection. */
const FREE_PORT_LOW = 20_000;
const FREE_PORT_SPAN = 12_000;

/**
 * A port that was free a moment ago. Only for a server whose own address must be known
 * before it starts (the authority service names itself in tokens and MCP metadata); there
 * is a short window in which another process could take it, and the start then fails. The
 * port is picked at random below the ephemeral range, so that window is not shared with
 * every connection the machine opens meanwhile.
 */
export async function findFreePort(host = DEV_HOST): Promise<number> {
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = FREE_PORT_LOW + Math.floor(Math.random() * FREE_PORT_SPAN);
    if (await isFree(port, host)) return port;
  }
  throw new Error("no free port");
}

function isFree(port: number, host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.unref();
    probe.once("error", () => resolve(false));
    probe.listen(port, host, () => probe.close(() => resolve(true)));
  });
}

/** A friendlier message than EADDRINUSE for the usual cause: `authority dev` is already running. */
export function portInUseHint(error: unknown, what: string, port: number): Error {
  const code = (error as { code?: unknown } | null)?.code;
  if (code === "EADDRINUSE") {
    return new Error(
      `${what}: port ${port} is in use (is another \`authority dev\` running? \`authority demo\` uses free ports instead)`,
      { cause: error },
    );
  }
  return error instanceof Error ? error : new Error(String(error));
}
