import { Client, credentials, Metadata } from "@grpc/grpc-js";
import { loadProtos } from "./grpc/proto.ts";

/**
 * One grpc.health.v1 Check to the sidecar's own gRPC port, over loopback, before `/readyz` says
 * ready: it proves the port answers a real RPC (not only that it is bound) and runs the server's
 * HTTP/2 session and call path once, so the first Check from Envoy does not pay for it. It goes
 * to the health service, not to ext_authz: no decision, no decision record, no Check metric.
 * The deadline is generous: at start the process is busy with the other warm-up steps, and a
 * timeout only delays readiness (the step is retried).
 */
export async function probeOwnGrpcPort(target: string, timeoutMs = 10_000): Promise<void> {
  const check = loadProtos().health.Check;
  if (check === undefined) throw new Error("grpc.health.v1.Health/Check missing");
  const client = new Client(target, credentials.createInsecure());
  try {
    const status = await new Promise<unknown>((resolve, reject) => {
      client.makeUnaryRequest(
        check.path,
        check.requestSerialize,
        check.responseDeserialize,
        { service: "" },
        new Metadata(),
        { deadline: Date.now() + timeoutMs },
        (error, response) => {
          if (error !== null) reject(error);
          else resolve((response as { status?: unknown } | undefined)?.status);
        },
      );
    });
    if (status !== "SERVING") {
      throw new Error(`the gRPC port reports ${String(status)}`);
    }
  } finally {
    client.close();
  }
}
