import { randomUUID } from "node:crypto";
import fastify, { type FastifyInstance, LogController } from "fastify";
import { createLogger, type Logger } from "../../observability/logger.ts";
import { installErrorHandling } from "./error-handling.ts";

export interface HttpServerOptions {
  /** Logger name, e.g. "authority" or "managed". */
  readonly name: string;
  readonly logger?: Logger;
  /** Largest accepted request body in bytes (413 above). */
  readonly bodyLimit?: number;
  readonly https?: { readonly key: string | Buffer; readonly cert: string | Buffer };
  /** Per-request socket timeout; a client that stalls longer is cut off. */
  readonly requestTimeoutMs?: number;
}

const callerRequestId = /^[A-Za-z0-9._:-]{8,128}$/;

/** A caller-supplied X-Request-Id is kept only when it is short and plain; otherwise we mint one. */
export function requestIdFrom(header: string | string[] | undefined): string {
  return typeof header === "string" && callerRequestId.test(header) ? header : `req_${randomUUID()}`;
}

/** The fastify base every server of the project starts from: logging, ids, limits, errors. */
export function createHttpServer(options: HttpServerOptions): FastifyInstance {
  const app = fastify({
    loggerInstance: options.logger ?? createLogger(options.name),
    bodyLimit: options.bodyLimit ?? 1024 * 1024,
    requestTimeout: options.requestTimeoutMs ?? 30_000,
    genReqId: (request) => requestIdFrom(request.headers["x-request-id"]),
    // One summary line per request (onResponse below) instead of fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
    return503OnClosing: true,
    forceCloseConnections: "idle",
    ...(options.https === undefined ? {} : { https: options.https }),
    ajv: {
      customOptions: { removeAdditional: false, coerceTypes: false, allErrors: false, useDefaults: true },
    },
  }) as unknown as FastifyInstance;
  app.addHook("onRequest", async (request, reply) => {
    reply.header("x-request-id", request.id);
  });
  app.addHook("onResponse", async (request, reply) => {
    request.log.info(
      {
        method: request.method,
        route: request.routeOptions.url,
        status: reply.statusCode,
        ms: reply.elapsedTime,
      },
      "request",
    );
  });
  installErrorHandling(app);
  return app;
}
