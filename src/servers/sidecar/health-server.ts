import { createServer, type Server } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import type { Registry } from "prom-client";
import { serveMetrics } from "../../observability/metrics.ts";
import { SidecarConfigError } from "./errors.ts";

/**
 * The metrics and health port (`127.0.0.1:9464`): `GET /metrics` (Prometheus text),
 * `GET /healthz` (200 while the process serves; 503 once it is shutting down) and
 * `GET /readyz` (200 only when `ready()` says so). Plain node:http: it must answer even when
 * everything else is busy.
 */

export interface ReadinessReport {
  readonly ready: boolean;
  /** Safe facts only: which checks pass. */
  readonly checks: Readonly<Record<string, boolean>>;
}

export interface HealthServerOptions {
  readonly registry: Registry;
  readonly ready: () => ReadinessReport;
  readonly live: () => boolean;
}

export interface HealthServer {
  listen(address: { host: string; port: number }): Promise<{ port: number }>;
  close(): Promise<void>;
}

export function createHealthServer(options: HealthServerOptions): HealthServer {
  const sockets = new Set<Socket>();
  const json = (status: number, body: unknown) => ({ status, text: JSON.stringify(body) });
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? "").split("?")[0];
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.writeHead(405, { allow: "GET, HEAD" }).end();
      return;
    }
    if (path === "/metrics") {
      void serveMetrics(options.registry, req, res);
      return;
    }
    let answer: { status: number; text: string };
    if (path === "/healthz") {
      const live = options.live();
      answer = json(live ? 200 : 503, { status: live ? "ok" : "shutting_down" });
    } else if (path === "/readyz") {
      const report = options.ready();
      answer = json(report.ready ? 200 : 503, {
        status: report.ready ? "ready" : "not_ready",
        checks: report.checks,
      });
    } else {
      answer = json(404, { error: "not_found" });
    }
    res.writeHead(answer.status, { "content-type": "application/json", "cache-control": "no-store" });
    res.end(req.method === "HEAD" ? undefined : answer.text);
  });
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  return {
    listen({ host, port }) {
      return new Promise((resolve, reject) => {
        const onError = (error: Error) =>
          reject(new SidecarConfigError(`cannot listen on ${host}:${port}`, { cause: error }));
        server.once("error", onError);
        server.listen(port, host, () => {
          server.off("error", onError);
          resolve({ port: (server.address() as AddressInfo).port });
        });
      });
    },
    close() {
      return new Promise((resolve) => {
        server.close(() => resolve());
        for (const socket of sockets) socket.destroy();
      });
    },
  };
}
