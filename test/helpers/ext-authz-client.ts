/**
 * A grpc-js client for the sidecar's Envoy ext_authz server, built from the project's
 * proto/ definitions: one `CheckRequest` shaped as Envoy's HTTP filter sends it, and the
 * answer decoded into what Envoy would do (allow, or the HTTP status it would send).
 *
 *   const client = createExtAuthzClient(grpcPort);
 *   const answer = await client.check({ token, path: "/items/42" });
 *   answer.allowed; answer.status; answer.response.denied_response.body
 *   client.close();
 */
import { randomBytes } from "node:crypto";
import { Client, credentials, type ServiceError } from "@grpc/grpc-js";
import { loadProtos } from "../../src/servers/sidecar/grpc/proto.ts";

export interface ExtAuthzRequest {
  readonly method?: string;
  readonly path?: string;
  readonly host?: string;
  readonly headers?: Record<string, string>;
  /** `context_extensions.capability_id`; null sends none. */
  readonly capability?: string | null;
  /** Bearer token for `authorization`; null or absent sends none. */
  readonly token?: string | null;
  /** `HttpRequest.body`, as Envoy sends it with with_request_body. */
  readonly body?: string;
  /** `HttpRequest.raw_body` (with_request_body.pack_as_bytes). */
  readonly rawBody?: Uint8Array;
}

/** The decoded CheckResponse (or the gRPC error). */
export interface ExtAuthzAnswer {
  readonly allowed: boolean;
  /** HTTP status Envoy would send (200 for an allow, 0 on a gRPC error). */
  readonly status: number;
  // biome-ignore lint/suspicious/noExplicitAny: decoded protobuf messages are read field by field
  readonly response: any;
  readonly grpcError: ServiceError | undefined;
  readonly elapsedMs: number;
}

export interface ExtAuthzClient {
  check(
    request: ExtAuthzRequest,
    defaults: { host: string; capability: string },
    deadlineMs?: number,
  ): Promise<ExtAuthzAnswer>;
  close(): void;
}

/** Envoy's `envoy.type.v3.StatusCode` names (enums decode as names) → HTTP status. */
const statusCodes: Record<string, number> = {
  BadRequest: 400,
  Unauthorized: 401,
  Forbidden: 403,
  NotFound: 404,
  PayloadTooLarge: 413,
  TooManyRequests: 429,
  InternalServerError: 500,
  BadGateway: 502,
  ServiceUnavailable: 503,
  GatewayTimeout: 504,
};

export function createExtAuthzClient(port: number): ExtAuthzClient {
  const method = loadProtos().authorization.Check;
  if (method === undefined) throw new Error("ext_authz: the proto has no Check method");
  const client = new Client(`127.0.0.1:${port}`, credentials.createInsecure());
  return {
    check(request, defaults, deadlineMs = 10_000) {
      const headers: Record<string, string> = { ...request.headers };
      if (request.token !== undefined && request.token !== null)
        headers.authorization = `Bearer ${request.token}`;
      const verb = request.method ?? "GET";
      const path = request.path ?? "/items/42";
      const host = request.host ?? defaults.host;
      const message = {
        attributes: {
          request: {
            http: {
              id: `req-${randomBytes(6).toString("hex")}`,
              method: verb,
              path,
              host,
              scheme: "http",
              protocol: "HTTP/1.1",
              headers: { ":method": verb, ":path": path, ":authority": host, ...headers },
              ...(request.body === undefined ? {} : { body: request.body }),
              ...(request.rawBody === undefined ? {} : { raw_body: request.rawBody }),
            },
          },
          context_extensions:
            request.capability === null ? {} : { capability_id: request.capability ?? defaults.capability },
        },
      };
      const started = performance.now();
      return new Promise<ExtAuthzAnswer>((resolve) => {
        client.makeUnaryRequest(
          method.path,
          method.requestSerialize,
          method.responseDeserialize,
          message,
          { deadline: Date.now() + deadlineMs },
          (error: ServiceError | null, response?: unknown) => {
            // biome-ignore lint/suspicious/noExplicitAny: decoded protobuf message
            const decoded = (response ?? {}) as any;
            const allowed = error === null && decoded.http_response === "ok_response";
            const code = decoded.denied_response?.status?.code;
            const status =
              error !== null ? 0 : allowed ? 200 : (statusCodes[String(code)] ?? Number(code ?? 0));
            resolve({
              allowed,
              status,
              response: decoded,
              grpcError: error ?? undefined,
              elapsedMs: performance.now() - started,
            });
          },
        );
      });
    },
    close: () => client.close(),
  };
}
