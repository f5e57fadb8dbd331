import fastify, {
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  LogController,
} from "fastify";
import { checkJsonBounds } from "../../core/bounded-json.ts";
import { requestIdFrom } from "../../core/request-id.ts";
import { AuthorityError } from "../../errors.ts";
import type { Logger } from "../../observability/logger.ts";
import { installErrorHandling, sendError } from "./error-handling.ts";

export interface HttpServerOptions {
  /** The process's logger, from its composition root. */
  readonly logger: Logger;
  /** Largest accepted request body in bytes (413 above). */
  readonly bodyLimit?: number;
  readonly https?: { readonly key: string | Buffer; readonly cert: string | Buffer };
  /** Per-request socket timeout; a client that stalls longer is cut off. */
  readonly requestTimeoutMs?: number;
  /** Longest path parameter, decoded (default 100; 414 above). */
  readonly maxParamLength?: number;
}

export { requestIdFrom };

/** How a route family reads JSON bodies differently from the default (MCP answers its own -32700). */
export interface BoundedJsonBodies {
  /** What a body that is not JSON becomes; by default fastify's 400. */
  readonly malformed?: () => unknown;
  /** What a parsed body within the limits becomes; by default the value itself. */
  readonly parsed?: (value: unknown) => unknown;
}

/**
 * fastify's JSON body parser (prototype-poisoning refused, as by default), then the JSON
 * limits (core/bounded-json.ts): a body nested or spread past them is a 400
 * `input_too_complex` before any route, schema or hook walks it.
 */
export function boundJsonBodies(app: FastifyInstance, options: BoundedJsonBodies = {}): void {
  const parseJson = app.getDefaultJsonParser("error", "error");
  app.removeContentTypeParser("application/json");
  app.addContentTypeParser("application/json", { parseAs: "string" }, (request, text, done) => {
    parseJson(request, text as string, (error, value) => {
      if (error !== null && error !== undefined) {
        if (options.malformed === undefined) done(error, undefined);
        else done(null, options.malformed());
        return;
      }
      try {
        checkJsonBounds(value);
      } catch (bounds) {
        done(bounds as Error, undefined);
        return;
      }
      done(null, options.parsed === undefined ? value : options.parsed(value));
    });
  });
}

/** The fastify base every server of the project starts from: logging, ids, limits, errors. */
export function createHttpServer(options: HttpServerOptions): FastifyInstance {
  const app = fastify({
    loggerInstance: options.logger,
    bodyLimit: options.bodyLimit ?? 1024 * 1024,
    requestTimeout: options.requestTimeoutMs ?? 30_000,
    routerOptions: { maxParamLength: options.maxParamLength ?? 100 },
    genReqId: (request) => requestIdFrom(request.headers["x-request-id"]),
    // One summary line per request (onResponse below) instead of fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
    return503OnClosing: true,
    forceCloseConnections: "idle",
    ...(options.https === undefined ? {} : { https: options.https }),
    // Router-level failures (bad percent-encoding, over-long path parameters) answer in the
    // project's error format, never fastify's default body echoing the URL.
    frameworkErrors: (error, request, reply) =>
      sendError(
        reply as FastifyReply,
        request as FastifyRequest,
        error.code === "FST_ERR_MAX_PARAM_LENGTH"
          ? new AuthorityError("uri_too_long")
          : new AuthorityError("invalid_request", "The URL is malformed."),
      ),
    // Requests node's HTTP parser rejects never reach a route: answer with a fixed body.
    clientErrorHandler: (error, socket) => {
      const status = (error as { code?: string }).code === "HPE_HEADER_OVERFLOW" ? 431 : 400;
      if (socket.writable) {
        const body = JSON.stringify({ error: "invalid_request", message: "The HTTP request is malformed." });
        socket.end(
          `HTTP/1.1 ${status} ${status === 431 ? "Request Header Fields Too Large" : "Bad Request"}\r\n` +
            `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
        );
      }
      socket.destroy(error);
    },
    ajv: {
      customOptions: { removeAdditional: false, coerceTypes: false, allErrors: false, useDefaults: true },
    },
  }) as unknown as FastifyInstance;
  // Every API of the project takes JSON; fastify's built-in text/plain parser would hand a
  // string to routes that then answer a misleading 400 instead of 415.
  app.removeContentTypeParser("text/plain");
  boundJsonBodies(app);
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
