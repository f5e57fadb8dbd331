import { connect } from "node:http2";
import { loadProtos } from "./grpc/proto.ts";

/**
 * One grpc.health.v1 Check to the sidecar's own gRPC port, over loopback, before `/readyz` says
 * ready: it proves the port answers a real RPC (not only that it is bound) and runs the server's
 * HTTP/2 session and call path once, so the first Check from Envoy does not pay for it. It goes
 * to the health service, not to ext_authz: no decision, no decision record, no Check metric.
 * The deadline is generous: at start the process is busy with the other warm-up steps, and a
 * timeout only delays readiness (the step is retried).
 *
 * The call is made on a plain HTTP/2 session, as Envoy makes it, not through a grpc-js client:
 * its channel, resolver and load balancer are code the sidecar never runs otherwise, and
 * compiling and running them cost a fresh process ≈ 25 ms of CPU while its first Checks wait
 * (decision 2811).
 */
export async function probeOwnGrpcPort(target: string, timeoutMs = 10_000): Promise<void> {
  const check = loadProtos().health.Check;
  if (check === undefined) throw new Error("grpc.health.v1.Health/Check missing");
  const message = check.requestSerialize({ service: "" });
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  message.copy(frame, 5);
  const session = connect(`http://${target}`);
  try {
    const { grpcStatus, body } = await new Promise<{ grpcStatus: string | undefined; body: Buffer }>(
      (resolve, reject) => {
        const timer = setTimeout(() => reject(new Error("the gRPC port did not answer in time")), timeoutMs);
        const fail = (error: Error) => {
          clearTimeout(timer);
          reject(error);
        };
        session.once("error", fail);
        const stream = session.request({
          ":method": "POST",
          ":path": check.path,
          "content-type": "application/grpc",
          te: "trailers",
        });
        const chunks: Buffer[] = [];
        let grpcStatus: string | undefined;
        const readStatus = (headers: Record<string, unknown>) => {
          const status = headers["grpc-status"];
          if (typeof status === "string") grpcStatus = status;
        };
        stream.once("response", readStatus);
        stream.once("trailers", readStatus);
        stream.on("data", (chunk: Buffer) => chunks.push(chunk));
        stream.once("error", fail);
        stream.once("end", () => {
          clearTimeout(timer);
          resolve({ grpcStatus, body: Buffer.concat(chunks) });
        });
        stream.end(frame);
      },
    );
    if (grpcStatus !== "0") throw new Error(`the gRPC port answered status ${String(grpcStatus)}`);
    const length = body.length >= 5 ? body.readUInt32BE(1) : -1;
    if (body[0] !== 0 || length !== body.length - 5)
      throw new Error("the gRPC port answered a malformed message");
    const status = (check.responseDeserialize(body.subarray(5)) as { status?: unknown }).status;
    if (status !== "SERVING") throw new Error(`the gRPC port reports ${String(status)}`);
  } finally {
    session.destroy();
  }
}
