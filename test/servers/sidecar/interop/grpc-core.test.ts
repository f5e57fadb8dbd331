import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { createDevCertificate } from "../../../../src/servers/managed/dev-certificate.ts";
import {
  createGrpcServer,
  type GrpcServer,
  type Method,
} from "../../../../src/servers/sidecar/grpc/transport.ts";
import { type GrpcCoreAnswer, type GrpcCoreRun, requireGrpcCore } from "../../../helpers/grpc-core-peer.ts";
import {
  checkMethod,
  type Decoded,
  envoyCheckRequest,
  healthCheckMethod,
  healthWatchMethod,
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
 * The sidecar's HTTP/2 and gRPC layers against gRPC C-core, a client whose HTTP/2 stack
 * (chttp2) shares no code with node:http2 — the nearest thing to Envoy's own gRPC client that
 * this machine can run. python3-grpcio is a test peer `make test` installs; without it these
 * tests fail, saying so.
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

describe("the sidecar's gRPC transport with a gRPC C-core client", () => {
  let server: GrpcServer;
  let tlsServer: GrpcServer;
  const ports = { h2c: 0, tls: 0 };
  let rootPem: string;
  const methods: Record<string, Method> = {
    "/t.Echo/Echo": { kind: "unary", handle: (request, call) => call.respond(request) },
    // What the server read from C-core's grpc-timeout: the ms left, or "none".
    "/t.Deadline/Left": {
      kind: "unary",
      handle: (_request, call) =>
        call.respond(
          Buffer.from(call.deadline === undefined ? "none" : String(Math.round(call.deadline - Date.now()))),
        ),
    },
  };

  before(async () => {
    const certificate = await createDevCertificate();
    rootPem = certificate.cert;
    server = createGrpcServer({ methods });
    tlsServer = createGrpcServer({ methods, tls: { key: certificate.key, cert: certificate.cert } });
    ports.h2c = await server.listen("127.0.0.1", 0);
    ports.tls = await tlsServer.listen("127.0.0.1", 0);
  });
  after(async () => {
    await server?.close(1000);
    await tlsServer?.close(1000);
  });

  test("C-core's grpc-timeout, in whatever unit it picks, becomes the call's deadline", async () => {
    const timeoutsS = [1.5, 7.5, 90, 5000];
    const results = await grpcCore({
      target: `127.0.0.1:${ports.h2c}`,
      calls: [
        ...timeoutsS.map((timeout) => ({
          kind: "unary" as const,
          method: "/t.Deadline/Left",
          request: Buffer.alloc(0),
          timeout,
        })),
        { kind: "unary", method: "/t.Deadline/Left", request: Buffer.alloc(0), timeout: null },
      ],
    });
    for (const [i, timeout] of timeoutsS.entries()) {
      const answer = results[i]?.[0];
      assert.equal(answer?.code, OK, answer?.details);
      const leftMs = Number(answer?.response?.toString());
      // C-core rounds its timeout up to the unit it sends; the call itself takes some time.
      assert.ok(
        leftMs <= timeout * 1000 * 1.01 + 5 && leftMs >= timeout * 1000 - 1000,
        `${timeout} s: ${leftMs} ms left`,
      );
    }
    assert.equal(results[timeoutsS.length]?.[0]?.response?.toString(), "none");
  });

  // Sizes past the 1 MiB stream window the server grants and past C-core's 64 KiB initial
  // window, so flow control works both ways; random content, so nothing compresses or repeats.
  const sizes = [0, 1, 16_383, 16_385, 65_535, 70_000, 1_048_576 + 17, 3 * 1024 * 1024];

  for (const tls of [false, true]) {
    test(`messages of ${sizes.length} sizes up to 3 MiB echo intact, ${tls ? "h2 over TLS (ALPN)" : "h2c"}`, async () => {
      const messages = sizes.map((size) => randomBytes(size));
      const port = tls ? ports.tls : ports.h2c;
      const results = await grpcCore({
        target: `127.0.0.1:${port}`,
        ...(tls ? { tls: { rootPem, serverName: "localhost" } } : {}),
        calls: messages.map((request) => ({
          kind: "unary" as const,
          method: "/t.Echo/Echo",
          request,
          repeat: 3,
        })),
      });
      assert.equal(results.length, sizes.length);
      for (const [i, answers] of results.entries()) {
        assert.equal(answers.length, 3);
        for (const answer of answers) {
          assert.equal(answer.code, OK, `${sizes[i]} bytes: ${answer.details}`);
          assert.ok(answer.response?.equals(messages[i] ?? Buffer.alloc(1)), `${sizes[i]} bytes`);
        }
      }
    });
  }
});
