import { Server, ServerCredentials, type ServerUnaryCall, type sendUnaryData } from "@grpc/grpc-js";
import { type CheckResponse, loadProtos } from "../src/servers/sidecar/grpc/proto.ts";

/**
 * The baseline for `make bench`: a Check server that allows everything without looking at
 * the request — a plain grpc-js server built from proto/ with proto-loader (default server
 * options), as anyone would write one. The sidecar runs on the same stack, so the difference
 * is the cost of deciding (and of the sidecar's bounds).
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
