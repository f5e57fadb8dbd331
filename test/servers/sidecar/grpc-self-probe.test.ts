import assert from "node:assert/strict";
import type { AddressInfo, Socket } from "node:net";
import { createServer as createTcpServer } from "node:net";
import { after, describe, test } from "node:test";
import {
  Server,
  ServerCredentials,
  type ServerUnaryCall,
  type ServiceError,
  type sendUnaryData,
  status,
} from "@grpc/grpc-js";
import { loadProtos } from "../../../src/servers/sidecar/grpc/proto.ts";
import { probeOwnGrpcPort } from "../../../src/servers/sidecar/grpc-self-probe.ts";

/**
 * The readiness self-probe (grpc_serving) over a plain HTTP/2 session: it passes only when a
 * real gRPC server answers grpc.health.v1 Check with SERVING, and fails — never hangs — on
 * anything else.
 */
describe("probeOwnGrpcPort", () => {
  const servers: Server[] = [];
  after(() => {
    for (const server of servers) server.forceShutdown();
  });

  async function healthServer(answer: (reply: (error: unknown, value?: unknown) => void) => void) {
    const server = new Server();
    servers.push(server);
    server.addService(loadProtos().health, {
      Check: (_call: ServerUnaryCall<unknown, unknown>, reply: sendUnaryData<unknown>) =>
        answer((error, value) => reply(error as ServiceError | null, value)),
    });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (error, bound) =>
        error === null ? resolve(bound) : reject(error),
      ),
    );
    return `127.0.0.1:${port}`;
  }

  test("SERVING passes", async () => {
    await probeOwnGrpcPort(await healthServer((reply) => reply(null, { status: "SERVING" })));
  });

  test("NOT_SERVING, a gRPC error and an unimplemented service fail", async () => {
    await assert.rejects(
      probeOwnGrpcPort(await healthServer((reply) => reply(null, { status: "NOT_SERVING" }))),
      /reports NOT_SERVING/,
    );
    await assert.rejects(
      probeOwnGrpcPort(await healthServer((reply) => reply({ code: status.UNAVAILABLE, details: "no" }))),
      /status 14/,
    );
    const bare = new Server();
    servers.push(bare);
    const port = await new Promise<number>((resolve, reject) =>
      bare.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (error, bound) =>
        error === null ? resolve(bound) : reject(error),
      ),
    );
    await assert.rejects(probeOwnGrpcPort(`127.0.0.1:${port}`), /status 12/);
  });

  test("a port that is closed, or open but silent, fails within the deadline", async () => {
    const sockets: Socket[] = [];
    const silent = createTcpServer((socket) => void sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    const silentPort = (silent.address() as AddressInfo).port;
    await assert.rejects(probeOwnGrpcPort(`127.0.0.1:${silentPort}`, 300), /did not answer in time/);
    const closed = new Promise<void>((resolve) => silent.close(() => resolve()));
    for (const socket of sockets) socket.destroy();
    await closed;
    await assert.rejects(probeOwnGrpcPort(`127.0.0.1:${silentPort}`, 2000));
  });
});
