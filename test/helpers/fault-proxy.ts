/**
 * A TCP proxy in front of a real service that can inject network faults without touching
 * the service: pass traffic through, hang (accept, read, never answer — a frozen peer), or
 * reset every connection. Connections already open keep their mode.
 *
 *   const proxy = await startFaultProxy(cryptoPort);
 *   client → proxy.url
 *   proxy.mode = "hang";  …  proxy.mode = "pass";
 */
import { createServer, type Server, type Socket, connect as tcpConnect } from "node:net";

export type FaultMode = "pass" | "hang" | "reset";

export interface FaultProxy {
  readonly port: number;
  /** `http://127.0.0.1:<port>` */
  readonly url: string;
  mode: FaultMode;
  /** Connections accepted since start. */
  accepted(): number;
  /** Drops every open connection (e.g. so a hung client's socket is freed). */
  dropAll(): void;
  /**
   * Cuts every open connection from the service without telling its client, whose next bytes
   * get a reset: a peer that dropped the connection while the client held it idle, unnoticed.
   */
  cutAllSilently(): void;
  close(): Promise<void>;
}

export async function startFaultProxy(targetPort: number, targetHost = "127.0.0.1"): Promise<FaultProxy> {
  const sockets = new Set<Socket>();
  /** Each passing client connection and its connection to the service. */
  const passing = new Map<Socket, Socket>();
  let accepted = 0;
  const state: { mode: FaultMode } = { mode: "pass" };
  const track = (socket: Socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => socket.destroy());
  };
  const server: Server = createServer((client) => {
    accepted++;
    track(client);
    if (state.mode === "reset") {
      client.resetAndDestroy();
      return;
    }
    if (state.mode === "hang") {
      client.resume(); // read and discard; never answer
      return;
    }
    const upstream = tcpConnect({ host: targetHost, port: targetPort });
    track(upstream);
    passing.set(client, upstream);
    upstream.on("error", () => client.destroy());
    client.on("close", () => {
      passing.delete(client);
      upstream.destroy();
    });
    upstream.on("close", () => {
      if (passing.get(client) === upstream) client.destroy();
    });
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("fault proxy: no port");
  const port = address.port;
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    get mode() {
      return state.mode;
    },
    set mode(value: FaultMode) {
      state.mode = value;
    },
    accepted: () => accepted,
    dropAll() {
      for (const socket of sockets) socket.destroy();
    },
    cutAllSilently() {
      for (const [client, upstream] of passing) {
        passing.delete(client);
        client.unpipe(upstream);
        upstream.unpipe(client);
        upstream.destroy();
        client.on("data", () => client.resetAndDestroy());
        client.resume();
      }
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
