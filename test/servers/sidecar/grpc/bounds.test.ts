import assert from "node:assert/strict";
import { type ClientHttp2Session, type ClientHttp2Stream, connect as http2Connect } from "node:http2";
import { type Socket, connect as tcpConnect } from "node:net";
import { after, before, describe, test } from "node:test";
import { Client, credentials, status as GrpcStatus, type ServiceError } from "@grpc/grpc-js";
import type { RejectionReason } from "../../../../src/servers/sidecar/grpc/check-server.ts";
import { DEFAULT_GRPC_LIMITS } from "../../../../src/servers/sidecar/grpc/limits.ts";
import type { CheckDecision } from "../../../../src/servers/sidecar/grpc/types.ts";
import { checkMethod, envoyCheckRequest, type Harness, startHarness, unary, unaryRaw } from "./helpers.ts";

/**
 * What a peer inside the pod can make the ext_authz server hold, tried as an attacker would:
 * with a bare node:http2 client that opens streams and never finishes them, raw TCP sockets
 * that never speak, and messages past the limits.
 */

const allow: CheckDecision = { allow: true, headersToSet: {}, headersToRemove: [], dynamicMetadata: {} };

async function waitFor(what: string, condition: () => boolean, timeoutMs = 10_000): Promise<void> {
  const started = Date.now();
  while (!condition()) {
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** A gRPC length prefix announcing `length` bytes (the bytes themselves may never come). */
function prefix(length: number): Buffer {
  const out = Buffer.alloc(5);
  out.writeUInt32BE(length, 1);
  return out;
}

/** Opens a Check stream on `session` and sends `bytes` of it, without ending it. */
function unfinishedCheck(session: ClientHttp2Session, bytes: Buffer): ClientHttp2Stream {
  const stream = session.request(
    { ":method": "POST", ":path": checkMethod.path, "content-type": "application/grpc", te: "trailers" },
    { endStream: false },
  );
  stream.on("error", () => undefined);
  stream.write(bytes);
  return stream;
}

/** The grpc-status a stream is answered with (trailers-only or trailers); undefined if it closes without one. */
function grpcStatusOf(stream: ClientHttp2Stream): Promise<number | undefined> {
  return new Promise((resolve) => {
    const read = (headers: Record<string, unknown>): void => {
      const value = headers["grpc-status"];
      if (value !== undefined) resolve(Number(value));
    };
    stream.on("response", read);
    stream.on("trailers", read);
    stream.on("close", () => resolve(undefined));
    stream.resume();
  });
}

function openSession(port: number): Promise<ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const session = http2Connect(`http://127.0.0.1:${port}`);
    session.once("remoteSettings", () => resolve(session));
    session.once("error", reject);
  });
}

function closed(target: { once(event: "close", listener: () => void): unknown }): Promise<void> {
  return new Promise((resolve) => target.once("close", () => resolve()));
}

describe("ext_authz server bounds (attacker inside the pod)", () => {
  let harness: Harness;
  const rejections: RejectionReason[] = [];

  before(async () => {
    harness = await startHarness({
      check: () => allow,
      onRejected: (reason) => rejections.push(reason),
      limits: {
        maxReceivingCalls: 150,
        receiveTimeoutMs: 300,
        maxConnectionIdleMs: 1_000,
        maxConnections: 8,
      },
    });
  });
  after(() => harness.close());

  test("a message over the receive limit is RESOURCE_EXHAUSTED; the server keeps serving", async () => {
    const oversized = Buffer.alloc(DEFAULT_GRPC_LIMITS.maxReceiveMessageBytes + 1, 0x41);
    await assert.rejects(
      unaryRaw(harness.client, checkMethod.path, oversized),
      (error: ServiceError) => error.code === GrpcStatus.RESOURCE_EXHAUSTED,
    );
    // The length prefix alone decides: the bytes are not waited for.
    const session = await openSession(harness.port);
    const announced = unfinishedCheck(session, prefix(64 * 1024 * 1024));
    assert.equal(await grpcStatusOf(announced), GrpcStatus.RESOURCE_EXHAUSTED);
    session.destroy();
    const response = await unary(harness.client, checkMethod, envoyCheckRequest({}));
    assert.equal(response.status.code, 0);
  });

  test("the server advertises 100 concurrent streams per connection and holds no more", async () => {
    const session = await openSession(harness.port);
    try {
      assert.equal(session.remoteSettings.maxConcurrentStreams, DEFAULT_GRPC_LIMITS.maxConcurrentStreams);
      const streams = Array.from({ length: 140 }, () => unfinishedCheck(session, prefix(1000)));
      await waitFor("100 receiving calls", () => harness.server.receiving === 100);
      await new Promise((resolve) => setTimeout(resolve, 100));
      assert.equal(harness.server.receiving, 100);
      for (const stream of streams) stream.close();
    } finally {
      session.destroy();
    }
    await waitFor("no receiving calls", () => harness.server.receiving === 0);
  });

  test("past maxReceivingCalls over all connections, the call receiving longest makes room; Envoy's Checks get through", async () => {
    rejections.length = 0;
    const sessions = await Promise.all([openSession(harness.port), openSession(harness.port)]);
    try {
      const [first, second] = sessions as [ClientHttp2Session, ClientHttp2Session];
      const oldest = unfinishedCheck(first, prefix(1000));
      const oldestStatus = grpcStatusOf(oldest);
      await waitFor("the first receiving call", () => harness.server.receiving === 1);
      for (let i = 0; i < 99; i++) unfinishedCheck(first, prefix(1000));
      for (let i = 0; i < 50; i++) unfinishedCheck(second, prefix(1000));
      await waitFor("150 receiving calls", () => harness.server.receiving === 150);
      // A whole Check (as Envoy sends it) arrives while the stallers hold every slot (on a
      // connection of its own: the harness client's may have been closed as silent).
      const envoy = new Client(`127.0.0.1:${harness.port}`, credentials.createInsecure());
      try {
        const response = await unary(envoy, checkMethod, envoyCheckRequest({}));
        assert.equal(response.status.code, 0);
      } finally {
        envoy.close();
      }
      assert.equal(await oldestStatus, GrpcStatus.RESOURCE_EXHAUSTED);
      assert.deepEqual(rejections, ["overloaded"]);
      assert.equal(harness.server.receiving, 149);
    } finally {
      for (const session of sessions) session.destroy();
    }
    await waitFor("no receiving calls", () => harness.server.receiving === 0);
  });

  test("a request that never finishes is DEADLINE_EXCEEDED after receiveTimeoutMs and its connection is cut", async () => {
    rejections.length = 0;
    const session = await openSession(harness.port);
    const sessionClosed = closed(session);
    session.on("error", () => undefined);
    const started = Date.now();
    const stalled = unfinishedCheck(session, Buffer.concat([prefix(500), Buffer.alloc(100)]));
    const code = await grpcStatusOf(stalled);
    await sessionClosed;
    const elapsed = Date.now() - started;
    assert.ok(code === undefined || code === GrpcStatus.DEADLINE_EXCEEDED, String(code));
    assert.ok(elapsed >= 250 && elapsed < 1_000, `${elapsed} ms`);
    assert.deepEqual(rejections, ["receive_timeout"]);
    await waitFor("the connection gone", () => harness.server.connections === 0);
  });

  test("a connection that never sends a request is closed after maxConnectionIdleMs", async () => {
    const socket = tcpConnect(harness.port, "127.0.0.1");
    socket.on("error", () => undefined);
    // Read (and drop) what the server sends, so its closing is seen.
    socket.resume();
    const started = Date.now();
    await closed(socket);
    const elapsed = Date.now() - started;
    assert.ok(elapsed >= 900 && elapsed < 5_000, `${elapsed} ms`);
  });

  test("connections past maxConnections are closed on accept", async () => {
    const sockets: Socket[] = [];
    try {
      for (let i = 0; i < 8; i++) {
        const socket = tcpConnect(harness.port, "127.0.0.1");
        socket.on("error", () => undefined);
        sockets.push(socket);
      }
      await waitFor("8 connections", () => harness.server.connections === 8);
      const extra = tcpConnect(harness.port, "127.0.0.1");
      extra.on("error", () => undefined);
      extra.resume();
      await closed(extra);
      assert.equal(harness.server.connections, 8);
    } finally {
      for (const socket of sockets) socket.destroy();
    }
  });
});
