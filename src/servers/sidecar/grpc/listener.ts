import { type AddressInfo, createServer, type Server, type Socket } from "node:net";
import type { ConnectionInjector } from "@grpc/grpc-js";

/**
 * The TCP listener in front of the grpc-js server: it accepts sockets itself (so it can cap
 * their number and cut one on demand) and hands each to grpc-js through a connection
 * injector, which runs HTTP/2 (and TLS, when the injector's credentials say so) on it.
 */

export interface GrpcListener {
  listen(host: string, port: number): Promise<number>;
  /** Stops accepting; open connections are grpc-js's to drain. */
  stopAccepting(): Promise<void>;
  /** Destroys the connection from `address:port`, if it is open. */
  cut(address: string | undefined, port: number | undefined): void;
  /** Destroys every open connection. */
  cutAll(): void;
  readonly connections: number;
}

const key = (address: string | undefined, port: number | undefined): string => `${address}|${port}`;

export interface GrpcListenerOptions {
  readonly maxConnections: number;
  /**
   * A socket silent this long, both ways, is destroyed. grpc-js's own idle timeout only asks a
   * connection to close (GOAWAY), which a peer that never spoke HTTP/2 ignores; on a live
   * connection the server's keepalive pings keep the socket from ever being silent this long.
   */
  readonly silentMs: number;
}

export function createGrpcListener(injector: ConnectionInjector, options: GrpcListenerOptions): GrpcListener {
  const sockets = new Map<string, Socket>();
  // No Nagle delay: a Check's answer is one small write that must leave at once.
  const server: Server = createServer({ noDelay: true }, (socket) => {
    const id = key(socket.remoteAddress, socket.remotePort);
    sockets.set(id, socket);
    socket.once("close", () => sockets.delete(id));
    socket.setTimeout(options.silentMs, () => socket.destroy());
    injector.injectConnection(socket);
  });
  // Node closes sockets past this at accept.
  server.maxConnections = options.maxConnections;

  return {
    get connections() {
      return sockets.size;
    },
    listen(host, port) {
      return new Promise((resolve, reject) => {
        const onError = (error: Error): void => reject(error);
        server.once("error", onError);
        server.listen(port, host, () => {
          server.off("error", onError);
          resolve((server.address() as AddressInfo).port);
        });
      });
    },
    stopAccepting() {
      return new Promise((resolve) => {
        if (!server.listening) resolve();
        // net.Server's close callback waits for every connection; grpc-js drains those.
        else server.close(() => resolve());
      });
    },
    cut(address, port) {
      sockets.get(key(address, port))?.destroy();
    },
    cutAll() {
      for (const socket of sockets.values()) socket.destroy();
    },
  };
}
