/**
 * A server span around every request a fastify server handles (decision 2741): its parent is
 * the request's trace context (W3C, else B3), and the route's stages (token, policy load,
 * decide, execute, upstream call) open their spans inside it.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { FastifyInstance } from "fastify";
import { isHttpMethod } from "../../core/http-method.ts";
import type { TraceCarrier, Tracing } from "../../observability/tracing.ts";

type RequestListener = (req: IncomingMessage, res: ServerResponse) => void;

function requestCarrier(req: IncomingMessage): TraceCarrier {
  return (name) => {
    const value = req.headers[name];
    return typeof value === "string" ? value : value?.[0];
  };
}

/** Wraps the server's request listener (fastify's router) in a span; call before `listen`. */
export function traceRequests(app: FastifyInstance, tracing: Tracing | undefined): void {
  if (tracing === undefined) return;
  const server = app.server;
  const routers = server.listeners("request") as RequestListener[];
  server.removeAllListeners("request");
  server.on("request", (req: IncomingMessage, res: ServerResponse) => {
    // A fixed set of names: a client's method string never becomes one.
    const method = isHttpMethod(req.method) ? req.method : "OTHER";
    const span = tracing.open(`HTTP ${method}`, "server", [requestCarrier(req)]);
    res.once("close", () =>
      span.end(
        { "http.response.status_code": res.statusCode },
        res.writableFinished ? (res.statusCode >= 500 ? "server_error" : undefined) : "connection_closed",
      ),
    );
    span.run(() => {
      // The body arrives by events: its listeners continue in this span.
      tracing.bind(req);
      tracing.bind(res);
      for (const route of routers) route.call(server, req, res);
    });
  });
}
