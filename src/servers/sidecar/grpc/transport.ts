import { type AddressInfo, createServer as createTcpServer, type Server, type Socket } from "node:net";
import { createServer as createTlsServer, type TLSSocket, type TlsOptions } from "node:tls";
import { gunzipSync, inflateSync } from "node:zlib";
import { H2Connection, type H2Stream, type RequestHeaders } from "./h2/connection.ts";
import { encodeHeaderBlock } from "./h2/hpack.ts";

/**
 * A small gRPC server (gRPC over HTTP/2, https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md)
 * for the sidecar's two services: unary methods and server-streaming methods whose request
 * is one message. Messages go in and out as bytes; the codecs are the services' own.
 *
 * Why not grpc-js, nor node:http2: on the ext_authz hot path a grpc-js server spends about
 * twice the CPU of the HTTP/2 stack underneath on its own call machinery (interceptors,
 * metadata objects, channelz bookkeeping, per-call streams and timers), and node:http2 itself
 * costs more per call than the decision (a C++ session, a JS Duplex stream, header objects and
 * several event emissions per call). The HTTP/2 layer here is the sidecar's own (./h2/, see
 * docs/sidecar.md), and this keeps only what gRPC needs on top of it:
 *
 * - requests: `:method` POST (else HTTP 405), `content-type: application/grpc…` (else 415),
 *   a registered `:path` (else UNIMPLEMENTED), exactly one length-prefixed message of at most
 *   `maxMessageBytes` (else RESOURCE_EXHAUSTED / INTERNAL), compressed with `grpc-encoding`
 *   identity, gzip or deflate (else UNIMPLEMENTED), `grpc-timeout` read as the call's deadline;
 * - answers: headers, one message per response, `grpc-status`/`grpc-message` trailers;
 *   errors as trailers-only responses; nothing is compressed;
 * - a call whose stream closes before it is answered is cancelled (its `onCancel` runs);
 * - shutdown: GOAWAY to every connection and wait for open calls, then cut what is left.
 *
 * Connections are HTTP/2 with prior knowledge (h2c) unless `tls` is given (h2 over TLS).
 */

export const GrpcStatus = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  RESOURCE_EXHAUSTED: 8,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
} as const;

/** What every call can tell and do. */
export interface GrpcCall {
  /** When the caller stops waiting (epoch ms, from `grpc-timeout`); undefined without a deadline. */
  readonly deadline: number | undefined;
  /** True once the caller went away (stream closed before the call was answered). */
  readonly cancelled: boolean;
  /** Runs once if the caller goes away before the call is answered. */
  onCancel(listener: () => void): void;
  /** Ends the call with a non-OK status. */
  fail(code: number, message: string): void;
}

export interface UnaryCall extends GrpcCall {
  /** Sends the one response message and status OK. */
  respond(message: Uint8Array): void;
}

export interface ServerStreamCall extends GrpcCall {
  /** Sends one message (headers first, the first time). */
  write(message: Uint8Array): void;
  /** Ends the stream with status OK. */
  end(): void;
}

export type Method =
  | { readonly kind: "unary"; readonly handle: (request: Buffer, call: UnaryCall) => void }
  | { readonly kind: "server-stream"; readonly handle: (request: Buffer, call: ServerStreamCall) => void };

export interface GrpcServerOptions {
  /** Methods by path, `/package.Service/Method`. */
  readonly methods: Readonly<Record<string, Method>>;
  /** Largest request message, bytes after decompression (default 4 MiB, as grpc-js). */
  readonly maxMessageBytes?: number;
  /** TLS (h2, by ALPN); default plaintext HTTP/2 (the sidecar and Envoy share the pod's loopback). */
  readonly tls?: TlsOptions;
}

export interface GrpcServer {
  /** Binds; port 0 picks one. Resolves with the bound port. */
  listen(host: string, port: number): Promise<number>;
  /** Stops accepting, sends GOAWAY, waits for open calls up to graceMs, then cuts the connections. */
  close(graceMs: number): Promise<void>;
  /** Calls received and not yet answered. */
  readonly open: number;
}

const DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024;
const TIMEOUT = /^(\d{1,8})([HMSmun])$/;
const TIMEOUT_UNIT_MS: Readonly<Record<string, number>> = {
  H: 3_600_000,
  M: 60_000,
  S: 1000,
  m: 1,
  u: 0.001,
  n: 0.000001,
};

/** `grpc-timeout` as an absolute deadline (epoch ms); undefined when absent or malformed. */
function deadlineOf(headers: RequestHeaders): number | undefined {
  const value = headers["grpc-timeout"];
  if (typeof value !== "string") return undefined;
  const match = TIMEOUT.exec(value);
  if (match === null) return undefined;
  return Date.now() + Number(match[1]) * (TIMEOUT_UNIT_MS[match[2] ?? ""] ?? 0);
}

const RESPONSE_FIELDS: ReadonlyArray<readonly [string, string]> = [
  [":status", "200"],
  ["content-type", "application/grpc+proto"],
  ["grpc-accept-encoding", "identity,deflate,gzip"],
];
/** The response headers of every answered call, and the trailers of a successful one (encoded once). */
const RESPONSE_HEADERS = encodeHeaderBlock(RESPONSE_FIELDS);
const OK_TRAILERS = encodeHeaderBlock([["grpc-status", "0"]]);

/** A message with its 5-byte prefix (uncompressed). */
function frame(message: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + message.length);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  out.set(message, 5);
  return out;
}

class CallError extends Error {
  readonly code: number;

  constructor(code: number, message: string) {
    super(message);
    this.code = code;
  }
}

/** The one message of a request body (length-prefixed, maybe compressed). */
function requestMessage(body: Buffer, encoding: string, max: number): Buffer {
  if (body.length < 5) throw new CallError(GrpcStatus.INTERNAL, "the request carries no message");
  const compressed = body[0];
  const length = body.readUInt32BE(1);
  if (5 + length !== body.length) {
    throw new CallError(
      GrpcStatus.INTERNAL,
      5 + length < body.length ? "a unary request carries one message" : "truncated message",
    );
  }
  const message = body.subarray(5);
  if (compressed === 0) return message;
  if (compressed !== 1) throw new CallError(GrpcStatus.INTERNAL, "bad message flag");
  const options = { maxOutputLength: max };
  try {
    if (encoding === "gzip") return gunzipSync(message, options);
    if (encoding === "deflate") return inflateSync(message, options);
  } catch (error) {
    if ((error as { code?: unknown }).code === "ERR_BUFFER_TOO_LARGE") {
      throw new CallError(GrpcStatus.RESOURCE_EXHAUSTED, "request message too large");
    }
    throw new CallError(GrpcStatus.INTERNAL, "the request message does not decompress");
  }
  throw new CallError(GrpcStatus.INTERNAL, "a compressed message without grpc-encoding");
}

/** The status as trailers (or with the response headers: trailers-only), the message percent-encoded as grpc-js does. */
function statusBlock(code: number, message: string, withHeaders: boolean): Buffer {
  const status: Array<readonly [string, string]> = [
    ["grpc-status", String(code)],
    ["grpc-message", encodeURI(message)],
  ];
  return encodeHeaderBlock(withHeaders ? [...RESPONSE_FIELDS, ...status] : status);
}

/** A response that is not gRPC (wrong method or content type): the HTTP status alone. */
function httpStatusBlock(status: number): Buffer {
  return encodeHeaderBlock([[":status", String(status)]]);
}

/** HTTP/2 settings of every connection. */
const CONNECTION_LIMITS = {
  maxConcurrentStreams: 1000,
  maxHeaderListSize: 64 * 1024,
  streamWindow: 1024 * 1024,
  connectionWindow: 16 * 1024 * 1024,
  maxBufferedOutput: 16 * 1024 * 1024,
  maxBufferedInput: 64 * 1024 * 1024,
  prefaceTimeoutMs: 10_000,
} as const;

export function createGrpcServer(options: GrpcServerOptions): GrpcServer {
  const { methods } = options;
  const maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  const connections = new Set<H2Connection>();
  let open = 0;
  let closing = false;

  /** One accepted call: counted in `open` until it is answered or its stream closes. */
  const accept = (stream: H2Stream, method: Method): void => {
    open++;
    const headers = stream.headers;
    let done = false;
    let cancelled = false;
    let cancelListeners: Array<() => void> | undefined;
    const finish = (): boolean => {
      if (done) return false;
      done = true;
      open--;
      return !stream.closed;
    };
    stream.onClose = () => {
      if (done) return;
      done = true;
      open--;
      cancelled = true;
      for (const listener of cancelListeners ?? []) {
        try {
          listener();
        } catch {
          // A listener's failure must not stop the others.
        }
      }
    };
    const fail = (code: number, message: string): void => {
      if (!finish()) return;
      if (stream.headersSent) stream.sendTrailers(statusBlock(code, message, false));
      else stream.respond(statusBlock(code, message, true), true);
    };

    let size = 0;
    let body: Buffer | undefined;
    let chunks: Buffer[] | undefined;
    stream.onData = (chunk) => {
      if (done) return;
      size += chunk.length;
      if (size > maxMessageBytes + 5) {
        fail(GrpcStatus.RESOURCE_EXHAUSTED, "request message too large");
        return;
      }
      // Copied: a view would keep the whole socket read alive for as long as the call.
      if (body === undefined) body = Buffer.from(chunk);
      else {
        chunks ??= [body];
        chunks.push(Buffer.from(chunk));
      }
    };
    stream.onEnd = () => {
      if (done) return;
      let request: Buffer;
      try {
        const encoding = headers["grpc-encoding"];
        request = requestMessage(
          chunks === undefined ? (body ?? Buffer.alloc(0)) : Buffer.concat(chunks),
          encoding ?? "identity",
          maxMessageBytes,
        );
      } catch (error) {
        fail(
          error instanceof CallError ? error.code : GrpcStatus.INTERNAL,
          error instanceof CallError ? error.message : "bad request",
        );
        return;
      }
      // What every call sees; unary calls add respond(), streaming ones write() and end().
      const call = {
        deadline: deadlineOf(headers),
        get cancelled() {
          return cancelled;
        },
        onCancel(listener: () => void): void {
          cancelListeners ??= [];
          cancelListeners.push(listener);
        },
        fail,
      };
      if (method.kind === "unary") {
        method.handle(
          request,
          Object.assign(call, {
            respond(message: Uint8Array) {
              if (finish()) stream.respondComplete(RESPONSE_HEADERS, frame(message), OK_TRAILERS);
            },
          }),
        );
        return;
      }
      method.handle(
        request,
        Object.assign(call, {
          write(message: Uint8Array) {
            if (done || stream.closed) return;
            if (!stream.headersSent) stream.respond(RESPONSE_HEADERS);
            stream.sendData(frame(message));
          },
          end() {
            if (!finish()) return;
            if (!stream.headersSent) stream.respond(RESPONSE_HEADERS);
            stream.sendTrailers(OK_TRAILERS);
          },
        }),
      );
    };
  };

  const onStream = (stream: H2Stream): void => {
    const headers = stream.headers;
    if (headers[":method"] !== "POST") {
      stream.respond(httpStatusBlock(405), true);
      return;
    }
    const contentType = headers["content-type"];
    if (contentType === undefined || !contentType.startsWith("application/grpc")) {
      stream.respond(httpStatusBlock(415), true);
      return;
    }
    const path = headers[":path"];
    const method = path !== undefined && Object.hasOwn(methods, path) ? methods[path] : undefined;
    const encoding = headers["grpc-encoding"];
    const unsupported =
      encoding !== undefined && encoding !== "identity" && encoding !== "gzip" && encoding !== "deflate";
    if (method === undefined || unsupported) {
      const message =
        method === undefined
          ? `The server does not implement the method ${String(path)}`
          : `Compression ${String(encoding)} is not supported`;
      stream.respond(statusBlock(GrpcStatus.UNIMPLEMENTED, message, true), true);
      return;
    }
    accept(stream, method);
  };

  const serve = (socket: Socket): void => {
    const connection = new H2Connection(socket, { ...CONNECTION_LIMITS, onStream });
    connections.add(connection);
    connection.onGone = () => connections.delete(connection);
    // A connection that arrives while closing is told to go away at once.
    if (closing) connection.goAway();
  };
  const server: Server =
    options.tls === undefined
      ? createTcpServer(serve)
      : createTlsServer({ ...options.tls, ALPNProtocols: ["h2"] }, (socket: TLSSocket) => {
          // HTTP/2 over TLS is negotiated by ALPN (RFC 9113 §3.2); anything else is refused.
          if (socket.alpnProtocol !== "h2") socket.destroy();
          else serve(socket);
        });
  server.on("tlsClientError", (_error: Error, socket: Socket) => socket.destroy());

  return {
    get open() {
      return open;
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

    close(graceMs) {
      closing = true;
      return new Promise<void>((resolve) => {
        let finished = false;
        const done = (): void => {
          if (finished) return;
          finished = true;
          clearTimeout(force);
          resolve();
        };
        const force = setTimeout(() => {
          for (const connection of connections) connection.destroy();
          done();
        }, graceMs);
        // Resolves once every connection is gone: each closes when its open calls are answered.
        server.close(() => done());
        for (const connection of connections) connection.goAway();
      });
    },
  };
}
