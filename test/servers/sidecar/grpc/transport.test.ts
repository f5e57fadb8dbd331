import assert from "node:assert/strict";
import { connect } from "node:http2";
import { after, before, describe, test } from "node:test";
import { connect as tlsConnect } from "node:tls";
import { deflateSync, gzipSync } from "node:zlib";
import { createDevCertificate } from "../../../../src/servers/managed/dev-certificate.ts";
import {
  createGrpcServer,
  type GrpcServer,
  type UnaryCall,
} from "../../../../src/servers/sidecar/grpc/transport.ts";
import { exchange, type Http2Reply } from "../../../helpers/http2-exchange.ts";

/**
 * The sidecar's gRPC transport at the protocol level, with a bare node:http2 client (the
 * grpc-js client suites exercise the normal paths): what it answers to requests that are not
 * well-formed gRPC, compression, message limits, deadlines and cancellation.
 */

function prefixed(message: Uint8Array, compressed = false): Buffer {
  const out = Buffer.alloc(5 + message.length);
  out[0] = compressed ? 1 : 0;
  out.writeUInt32BE(message.length, 1);
  out.set(message, 5);
  return out;
}

describe("gRPC transport (HTTP/2 framing and statuses)", () => {
  let server: GrpcServer;
  let port: number;
  const received: Buffer[] = [];
  const calls: UnaryCall[] = [];
  let hold = false;
  let cancelled = 0;

  before(async () => {
    server = createGrpcServer({
      maxMessageBytes: 64,
      methods: {
        "/t.Echo/Echo": {
          kind: "unary",
          handle(request, call) {
            received.push(request);
            calls.push(call);
            if (hold) {
              call.onCancel(() => {
                cancelled++;
              });
              return;
            }
            call.respond(request);
          },
        },
      },
    });
    port = await server.listen("127.0.0.1", 0);
  });
  after(() => server.close(1000));

  const send = async (headers: Record<string, string>, body: Buffer): Promise<Http2Reply> => {
    const session = connect(`http://127.0.0.1:${port}`);
    session.on("error", () => undefined);
    try {
      return await exchange(
        session,
        {
          ":method": "POST",
          ":path": "/t.Echo/Echo",
          "content-type": "application/grpc",
          te: "trailers",
          ...headers,
        },
        body,
      );
    } finally {
      session.close();
    }
  };
  const statusOf = (reply: Http2Reply) => reply.trailers["grpc-status"] ?? reply.headers["grpc-status"];

  test("a unary call: headers, one prefixed message, grpc-status 0 in the trailers", async () => {
    const reply = await send({}, prefixed(Buffer.from("hello")));
    assert.equal(reply.headers[":status"], 200);
    assert.match(String(reply.headers["content-type"]), /^application\/grpc/);
    assert.deepEqual(reply.body, prefixed(Buffer.from("hello")));
    assert.equal(reply.trailers["grpc-status"], "0");
  });

  test("not gRPC: 405 for another method, 415 for another content type; UNIMPLEMENTED for another path", async () => {
    assert.equal((await send({ ":method": "PUT" }, Buffer.alloc(0))).headers[":status"], 405);
    assert.equal(
      (await send({ "content-type": "application/json" }, Buffer.alloc(0))).headers[":status"],
      415,
    );
    const unknown = await send({ ":path": "/t.Echo/Other" }, prefixed(Buffer.from("x")));
    assert.equal(statusOf(unknown), "12");
  });

  test("gzip and deflate requests are decompressed; other encodings are UNIMPLEMENTED", async () => {
    received.length = 0;
    const reply = await send({ "grpc-encoding": "gzip" }, prefixed(gzipSync(Buffer.from("zipped")), true));
    assert.equal(statusOf(reply), "0");
    assert.deepEqual(received.at(-1), Buffer.from("zipped"));
    const deflated = await send(
      { "grpc-encoding": "deflate" },
      prefixed(deflateSync(Buffer.from("deflated")), true),
    );
    assert.equal(statusOf(deflated), "0");
    assert.deepEqual(received.at(-1), Buffer.from("deflated"));
    assert.equal(statusOf(await send({ "grpc-encoding": "snappy" }, prefixed(Buffer.from("x"), true))), "12");
    // A compressed flag without an encoding cannot be read.
    assert.equal(statusOf(await send({}, prefixed(Buffer.from("x"), true))), "13");
  });

  test("a message over the limit is RESOURCE_EXHAUSTED; none, two or a truncated one is INTERNAL", async () => {
    assert.equal(statusOf(await send({}, prefixed(Buffer.alloc(65)))), "8");
    assert.equal(
      statusOf(await send({ "grpc-encoding": "gzip" }, prefixed(gzipSync(Buffer.alloc(1000)), true))),
      "8",
    );
    assert.equal(statusOf(await send({}, Buffer.alloc(0))), "13");
    const two = Buffer.concat([prefixed(Buffer.from("a")), prefixed(Buffer.from("b"))]);
    assert.equal(statusOf(await send({}, two)), "13");
    assert.equal(statusOf(await send({}, prefixed(Buffer.from("abc")).subarray(0, 6))), "13");
  });

  test("grpc-timeout becomes the call's deadline; a call the client abandons is cancelled", async () => {
    calls.length = 0;
    await send({ "grpc-timeout": "250m" }, prefixed(Buffer.from("t")));
    const deadline = calls.at(-1)?.deadline;
    assert.ok(deadline !== undefined && deadline > Date.now() - 60_000 && deadline <= Date.now() + 250);
    await send({}, prefixed(Buffer.from("t")));
    assert.equal(calls.at(-1)?.deadline, undefined);

    hold = true;
    try {
      await new Promise<void>((resolve) => {
        const session = connect(`http://127.0.0.1:${port}`);
        const stream = session.request({
          ":method": "POST",
          ":path": "/t.Echo/Echo",
          "content-type": "application/grpc",
        });
        stream.on("error", () => undefined);
        stream.end(prefixed(Buffer.from("wait")));
        const started = calls.length;
        const poll = setInterval(() => {
          if (calls.length === started) return;
          clearInterval(poll);
          stream.close();
          session.close(() => resolve());
        }, 5);
      });
      const waited = Date.now();
      while (cancelled === 0 && Date.now() - waited < 5_000) await new Promise((r) => setTimeout(r, 5));
      assert.equal(cancelled, 1);
      assert.equal(calls.at(-1)?.cancelled, true);
      assert.equal(server.open, 0);
    } finally {
      hold = false;
    }
  });
});

describe("gRPC transport over TLS", () => {
  test("h2 is negotiated by ALPN and calls work as on plaintext; a client without h2 is refused", async () => {
    const certificate = await createDevCertificate();
    const server = createGrpcServer({
      tls: { key: certificate.key, cert: certificate.cert },
      methods: { "/t.Echo/Echo": { kind: "unary", handle: (request, call) => call.respond(request) } },
    });
    const port = await server.listen("127.0.0.1", 0);
    try {
      const session = connect(`https://127.0.0.1:${port}`, { ca: certificate.cert, servername: "localhost" });
      const { body } = await exchange(
        session,
        { ":method": "POST", ":path": "/t.Echo/Echo", "content-type": "application/grpc" },
        prefixed(Buffer.from("secret-free")),
      );
      session.close();
      assert.deepEqual(body, prefixed(Buffer.from("secret-free")));

      const http1 = tlsConnect({
        port,
        host: "127.0.0.1",
        ca: certificate.cert,
        servername: "localhost",
        ALPNProtocols: ["http/1.1"],
      });
      // The handshake itself fails: the server offers h2 only (TLS alert no_application_protocol).
      const refused = await new Promise<Error | undefined>((resolve) => {
        http1.on("error", resolve);
        http1.on("secureConnect", () => resolve(undefined));
      });
      http1.destroy();
      assert.match(String(refused?.message), /no application protocol/);
    } finally {
      await server.close(1000);
    }
  });
});
