import {
  createSecureServer,
  createServer,
  type Http2SecureServer,
  type Http2Server,
  type Http2Session,
  constants as http2Constants,
  type IncomingHttpHeaders,
  type SecureServerOptions,
  type ServerHttp2Stream,
} from "node:http2";
import type { AddressInfo } from "node:net";
import { gunzipSync, inflateSync } from "node:zlib";

/**
 * A small gRPC server (gRPC over HTTP/2, https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md)
 * for the sidecar's two services: unary methods and server-streaming methods whose request
 * is one message. Messages go in and out as bytes; the codecs are the services' own.
 *
 * Why not grpc-js: on the ext_authz hot path a grpc-js server spends about twice the CPU of
 * the HTTP/2 stack underneath on its own call machinery (interceptors, metadata objects,
 * channelz bookkeeping, per-call streams and timers) — more than the decision itself. This
 * keeps only what the protocol needs:
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
  /** TLS (h2); default plaintext HTTP/2 (the sidecar and Envoy share the pod's loopback). */
  readonly tls?: SecureServerOptions;
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
function deadlineOf(headers: IncomingHttpHeaders): number | undefined {
  const value = headers["grpc-timeout"];
  if (typeof value !== "string") return undefined;
  const match = TIMEOUT.exec(value);
  if (match === null) return undefined;
  return Date.now() + Number(match[1]) * (TIMEOUT_UNIT_MS[match[2] ?? ""] ?? 0);
}

/** The response headers of every answered call. */
const RESPONSE_HEADERS = Object.freeze({
  [http2Constants.HTTP2_HEADER_STATUS]: 200,
  [http2Constants.HTTP2_HEADER_CONTENT_TYPE]: "application/grpc+proto",
  "grpc-accept-encoding": "identity,deflate,gzip",
});
const OK_TRAILERS = Object.freeze({ "grpc-status": "0" });

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

/** The status as trailers (or trailers-only headers); the message percent-encoded as grpc-js does. */
function statusHeaders(code: number, message: string): Record<string, string | number> {
  return { "grpc-status": String(code), "grpc-message": encodeURI(message) };
}

export function createGrpcServer(options: GrpcServerOptions): GrpcServer {
  const { methods } = options;
  const maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  const settings = {
    // As grpc-js: Node's session memory limit (10 MB) breaks busy connections; not enforced.
    maxSessionMemory: Number.MAX_SAFE_INTEGER,
    maxSendHeaderBlockLength: Number.MAX_SAFE_INTEGER,
  };
  const server: Http2Server | Http2SecureServer =
    options.tls === undefined
      ? createServer(settings)
      : createSecureServer({ ...options.tls, ...settings, allowHTTP1: false });
  const sessions = new Set<Http2Session>();
  let open = 0;
  let closing = false;

  server.on("session", (session: Http2Session) => {
    sessions.add(session);
    session.on("error", () => undefined);
    session.once("close", () => sessions.delete(session));
    // A connection that arrives while closing is told to go away at once.
    if (closing) session.close();
  });
  // No idle timeouts on connections Envoy keeps open.
  server.setTimeout(0);

  /** One accepted call: counted in `open` until it is answered or its stream closes. */
  const accept = (stream: ServerHttp2Stream, method: Method, headers: IncomingHttpHeaders): void => {
    open++;
    let done = false;
    let headersSent = false;
    let cancelled = false;
    let cancelListeners: Array<() => void> | undefined;
    const finish = (): boolean => {
      if (done) return false;
      done = true;
      open--;
      return !stream.destroyed;
    };
    stream.once("close", () => {
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
    });
    /** Ends the stream with trailers after what was sent; headers first if none went yet. */
    const endWith = (trailers: Readonly<Record<string, string | number>>, last?: Buffer): void => {
      if (!headersSent) {
        headersSent = true;
        stream.respond(RESPONSE_HEADERS, { waitForTrailers: true });
      }
      stream.once("wantTrailers", () => stream.sendTrailers(trailers));
      if (last === undefined) stream.end();
      else stream.end(last);
    };
    const fail = (code: number, message: string): void => {
      if (!finish()) return;
      if (headersSent) endWith(statusHeaders(code, message));
      else stream.respond({ ...RESPONSE_HEADERS, ...statusHeaders(code, message) }, { endStream: true });
    };

    let size = 0;
    let body: Buffer | undefined;
    let chunks: Buffer[] | undefined;
    stream.on("data", (chunk: Buffer) => {
      if (done) return;
      size += chunk.length;
      if (size > maxMessageBytes + 5) {
        fail(GrpcStatus.RESOURCE_EXHAUSTED, "request message too large");
        return;
      }
      if (body === undefined) body = chunk;
      else {
        chunks ??= [body];
        chunks.push(chunk);
      }
    });
    stream.once("end", () => {
      if (done) return;
      let request: Buffer;
      try {
        const encoding = headers["grpc-encoding"];
        request = requestMessage(
          chunks === undefined ? (body ?? Buffer.alloc(0)) : Buffer.concat(chunks),
          typeof encoding === "string" ? encoding : "identity",
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
              if (finish()) endWith(OK_TRAILERS, frame(message));
            },
          }),
        );
        return;
      }
      method.handle(
        request,
        Object.assign(call, {
          write(message: Uint8Array) {
            if (done || stream.destroyed) return;
            if (!headersSent) {
              headersSent = true;
              stream.respond(RESPONSE_HEADERS, { waitForTrailers: true });
            }
            stream.write(frame(message));
          },
          end() {
            if (finish()) endWith(OK_TRAILERS);
          },
        }),
      );
    });
  };

  server.on("stream", (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => {
    // Errors end in "close", which is what calls react to.
    stream.on("error", () => undefined);
    if (headers[http2Constants.HTTP2_HEADER_METHOD] !== "POST") {
      stream.respond({ [http2Constants.HTTP2_HEADER_STATUS]: 405 }, { endStream: true });
      stream.resume();
      return;
    }
    const contentType = headers[http2Constants.HTTP2_HEADER_CONTENT_TYPE];
    if (typeof contentType !== "string" || !contentType.startsWith("application/grpc")) {
      stream.respond({ [http2Constants.HTTP2_HEADER_STATUS]: 415 }, { endStream: true });
      stream.resume();
      return;
    }
    const path = headers[http2Constants.HTTP2_HEADER_PATH];
    const method = typeof path === "string" && Object.hasOwn(methods, path) ? methods[path] : undefined;
    const encoding = headers["grpc-encoding"];
    const unsupported =
      typeof encoding === "string" &&
      encoding !== "identity" &&
      encoding !== "gzip" &&
      encoding !== "deflate";
    if (method === undefined || unsupported) {
      const message =
        method === undefined
          ? `The server does not implement the method ${String(path)}`
          : `Compression ${String(encoding)} is not supported`;
      stream.respond(
        { ...RESPONSE_HEADERS, ...statusHeaders(GrpcStatus.UNIMPLEMENTED, message) },
        { endStream: true },
      );
      stream.resume();
      return;
    }
    accept(stream, method, headers);
  });

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
          for (const session of sessions) session.destroy(undefined, http2Constants.NGHTTP2_CANCEL);
          done();
        }, graceMs);
        // Resolves once every connection is gone: each closes when its open calls are answered.
        server.close(() => done());
        for (const session of sessions) session.close();
      });
    },
  };
}
