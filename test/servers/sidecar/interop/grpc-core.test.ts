import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { createDevCertificate } from "../../../../src/servers/managed/dev-certificate.ts";
import type { CheckServer } from "../../../../src/servers/sidecar/grpc/check-server.ts";
import { DEFAULT_GRPC_LIMITS } from "../../../../src/servers/sidecar/grpc/limits.ts";
import type { CheckDecision, CheckFunction } from "../../../../src/servers/sidecar/grpc/types.ts";
import { type GrpcCoreAnswer, type GrpcCoreRun, requireGrpcCore } from "../../../helpers/grpc-core-peer.ts";
import {
  checkMethod,
  type Decoded,
  envoyCheckRequest,
  healthCheckMethod,
  healthWatchMethod,
  type TestCheckServerOptions,
  testCheckServer,
} from "../grpc/helpers.ts";
import {
  CAPABILITY,
  deniedBody,
  headerMap,
  type SidecarHandle,
  startWorld,
  UPSTREAM_HOST,
  UPSTREAM_SECRET,
  type World,
} from "../world.ts";

/**
 * The sidecar's gRPC server (grpc-js on node:http2) against gRPC C-core, a client whose HTTP/2
 * stack (chttp2) shares no code with nghttp2 — the nearest thing to Envoy's own gRPC client
 * that this machine can run. python3-grpcio is a test peer `make test` installs; without it
 * these tests fail, saying so.
 */
const peer = requireGrpcCore();

/** One C-core channel making `spec.calls`. */
function grpcCore(spec: GrpcCoreRun): Promise<GrpcCoreAnswer[][]> {
  return peer.run(spec);
}

const CHECK = checkMethod.path;
const OK = 0;

function checkBytes(token: string | null, path = "/orders/42"): Buffer {
  return checkMethod.requestSerialize(
    envoyCheckRequest({
      path,
      host: UPSTREAM_HOST,
      headers: token === null ? {} : { authorization: `Bearer ${token}` },
      contextExtensions: { capability_id: CAPABILITY },
      id: `req-${randomBytes(6).toString("hex")}`,
    }),
  );
}

function decoded(answer: GrpcCoreAnswer | undefined): Decoded {
  assert.equal(answer?.code, OK, answer?.details);
  assert.ok(answer?.response !== undefined);
  return checkMethod.responseDeserialize(answer.response) as Decoded;
}

describe("sidecar ext_authz with a gRPC C-core client", () => {
  let world: World;
  let sidecar: SidecarHandle;
  let target: string;

  before(async () => {
    world = await startWorld();
    sidecar = await world.startSidecar();
    target = `127.0.0.1:${sidecar.ports.grpc}`;
  });
  after(() => world?.close());

  test("allow, 403, 401, health Check and Watch, and an unknown method, on one channel", async () => {
    const [allow, forbidden, unauthenticated, health, watch, unknown] = await grpcCore({
      target,
      calls: [
        { kind: "unary", method: CHECK, request: checkBytes(world.tokens.agent) },
        { kind: "unary", method: CHECK, request: checkBytes(world.tokens.agent, "/admin/users") },
        { kind: "unary", method: CHECK, request: checkBytes(null) },
        {
          kind: "unary",
          method: healthCheckMethod.path,
          request: healthCheckMethod.requestSerialize({ service: "" }),
        },
        {
          kind: "first-of-stream",
          method: healthWatchMethod.path,
          request: healthWatchMethod.requestSerialize({ service: "" }),
        },
        { kind: "unary", method: "/envoy.service.auth.v3.Authorization/Nope", request: Buffer.alloc(0) },
      ],
    });

    const allowed = decoded(allow?.[0]);
    assert.equal(allowed.http_response, "ok_response");
    assert.equal(headerMap(allowed)["x-api-key"], UPSTREAM_SECRET);
    assert.deepEqual(allowed.ok_response.headers_to_remove, ["authorization"]);

    const denied = decoded(forbidden?.[0]);
    assert.equal(denied.denied_response.status.code, "Forbidden");
    assert.equal(deniedBody(denied).reason, "unknown_operation");

    const challenged = decoded(unauthenticated?.[0]);
    assert.equal(challenged.denied_response.status.code, "Unauthorized");
    assert.equal(deniedBody(challenged).reason, "missing_subject");

    for (const answer of [health?.[0], watch?.[0]]) {
      assert.equal(answer?.code, OK, answer?.details);
      assert.deepEqual(healthCheckMethod.responseDeserialize(answer?.response ?? Buffer.alloc(0)), {
        status: "SERVING",
      });
    }
    assert.equal(unknown?.[0]?.code, 12, "UNIMPLEMENTED");
  });

  test("300 concurrent Checks on one connection (C-core's dynamic HPACK table, multiplexing)", async () => {
    const [answers] = await grpcCore({
      target,
      calls: [
        {
          kind: "unary",
          method: CHECK,
          request: checkBytes(world.tokens.agent),
          repeat: 300,
          metadata: [["x-envoy-like", "repeated-on-every-call"]],
        },
      ],
    });
    assert.equal(answers?.length, 300);
    for (const answer of answers ?? []) assert.equal(decoded(answer).http_response, "ok_response");
  });
});

describe("the ext_authz server's deadlines, sizes and TLS with a gRPC C-core client", () => {
  // Decides only when told to stop: every answer is the server's own deadline deny. Records
  // how long each call waited before the server stopped it.
  const waitedMs: number[] = [];
  const never: CheckFunction = (_input, signal) => {
    const started = performance.now();
    return new Promise<CheckDecision>((_resolve, reject) => {
      signal.addEventListener(
        "abort",
        () => {
          waitedMs.push(performance.now() - started);
          reject(signal.reason);
        },
        { once: true },
      );
    });
  };
  const seenHeaderBytes: number[] = [];
  const measuring: CheckFunction = (input) => {
    seenHeaderBytes.push(input.headers["x-padding"]?.length ?? -1);
    return { allow: true, headersToSet: {}, headersToRemove: [], dynamicMetadata: {} };
  };
  const servers: CheckServer[] = [];
  const ports = { slow: 0, sized: 0, tls: 0 };
  let rootPem: string;

  const start = async (options: TestCheckServerOptions): Promise<number> => {
    const server = testCheckServer(options);
    servers.push(server);
    return (await server.listen("127.0.0.1:0")).port;
  };

  before(async () => {
    const certificate = await createDevCertificate();
    rootPem = certificate.cert;
    ports.slow = await start({ check: never, deadlineMs: 60_000 });
    ports.sized = await start({ check: measuring });
    ports.tls = await start({ check: measuring, tls: { key: certificate.key, cert: certificate.cert } });
  });
  after(async () => {
    for (const server of servers) await server.close({ graceMs: 1_000 });
  });

  const padded = (bytes: number): Buffer =>
    checkMethod.requestSerialize(envoyCheckRequest({ headers: { "x-padding": "p".repeat(bytes) } }));

  test("C-core's grpc-timeout, in whatever unit it picks, bounds the decision (deadlineMs is 60 s)", async () => {
    // Long enough for the server's full 50 ms margin (10 % of what is left, 5–50 ms).
    const timeoutsS = [1.5, 4];
    waitedMs.length = 0;
    const results = await grpcCore({
      target: `127.0.0.1:${ports.slow}`,
      calls: timeoutsS.map((timeout) => ({
        kind: "unary" as const,
        method: CHECK,
        request: padded(1),
        timeout,
      })),
    });
    for (const [i, timeout] of timeoutsS.entries()) {
      // The decision was stopped by C-core's deadline (aimed just ahead of it), not at
      // deadlineMs. The upper slack is timer lateness on a loaded machine (seen: +7 ms at load 20).
      const waited = waitedMs[i] ?? Number.NaN;
      assert.ok(
        waited >= timeout * 1000 * 0.9 && waited <= timeout * 1000 * 1.1,
        `${timeout} s: waited ${waited} ms`,
      );
      const answer = results[i]?.[0];
      // Our 503 deny, sent 50 ms ahead; on a machine too loaded for it to beat C-core's timer,
      // C-core's DEADLINE_EXCEEDED — a deny at Envoy as well (failure_mode_allow: false).
      if (answer?.code === 4) continue;
      const denied = decoded(answer);
      assert.equal(denied.http_response, "denied_response", `${timeout} s`);
      assert.equal(deniedBody(denied).reason, "upstream_unavailable", `${timeout} s`);
    }
  });

  for (const tls of [false, true]) {
    test(`CheckRequests up to the message limit are read intact; past it RESOURCE_EXHAUSTED (${tls ? "h2 over TLS" : "h2c"})`, async () => {
      // Past the 64 KiB initial windows of both sides and several 16 KiB frames.
      const sizes = [1, 16_385, 70_000, DEFAULT_GRPC_LIMITS.maxReceiveMessageBytes - 1024];
      seenHeaderBytes.length = 0;
      const results = await grpcCore({
        target: `127.0.0.1:${tls ? ports.tls : ports.sized}`,
        ...(tls ? { tls: { rootPem, serverName: "localhost" } } : {}),
        calls: [
          ...sizes.map((size) => ({
            kind: "unary" as const,
            method: CHECK,
            request: padded(size),
            repeat: 2,
          })),
          { kind: "unary", method: CHECK, request: padded(DEFAULT_GRPC_LIMITS.maxReceiveMessageBytes + 1) },
        ],
      });
      for (const [i, size] of sizes.entries()) {
        for (const answer of results[i] ?? [])
          assert.equal(decoded(answer).http_response, "ok_response", `${size}`);
      }
      assert.deepEqual(
        [...seenHeaderBytes].sort((a, b) => a - b),
        sizes.flatMap((size) => [size, size]),
      );
      assert.equal(results[sizes.length]?.[0]?.code, 8, "RESOURCE_EXHAUSTED");
    });
  }
});
