import { Server, ServerCredentials, type ServerUnaryCall, type sendUnaryData } from "@grpc/grpc-js";
import { encodeCheckResponse } from "../src/servers/sidecar/grpc/codec.ts";
import { CHECK_PATH } from "../src/servers/sidecar/grpc/names.ts";
import { type CheckResponse, loadProtos } from "../src/servers/sidecar/grpc/proto.ts";
import { createGrpcServer } from "../src/servers/sidecar/grpc/transport.ts";

/**
 * The baselines for `make bench`: Check servers that allow everything without looking at the
 * request.
 *
 * - `startNoopCheckServer`: the baseline, a plain grpc-js server built from proto/
 *   with proto-loader (default server options), as anyone would write one.
 * - `startTransportNoopServer`: the sidecar's own gRPC transport (src/servers/sidecar/grpc/
 *   transport.ts) answering a pre-encoded allow: what Check costs the sidecar before it
 *   decodes or decides anything. The difference to the sidecar is the cost of deciding.
 */

const allow: CheckResponse = { status: { code: 0 }, ok_response: { headers: [], headers_to_remove: [] } };

export interface NoopCheckServer {
  readonly port: number;
  close(): Promise<void>;
}

export async function startNoopCheckServer(address = "127.0.0.1:0"): Promise<NoopCheckServer> {
  const server = new Server();
  server.addService(loadProtos().authorization, {
    Check: (_call: ServerUnaryCall<unknown, CheckResponse>, callback: sendUnaryData<CheckResponse>) => {
      callback(null, allow);
    },
  });
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync(address, ServerCredentials.createInsecure(), (error, bound) => {
      if (error === null) resolve(bound);
      else reject(error);
    });
  });
  return {
    port,
    close: () =>
      new Promise<void>((resolve) => {
        const force = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, 2_000);
        server.tryShutdown(() => {
          clearTimeout(force);
          resolve();
        });
      }),
  };
}

export async function startTransportNoopServer(host = "127.0.0.1", port = 0): Promise<NoopCheckServer> {
  const response = encodeCheckResponse(allow);
  const server = createGrpcServer({
    methods: { [CHECK_PATH]: { kind: "unary", handle: (_request, call) => call.respond(response) } },
  });
  const bound = await server.listen(host, port);
  return { port: bound, close: () => server.close(2_000) };
}
