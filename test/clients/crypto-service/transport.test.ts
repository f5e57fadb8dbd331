/**
 * The crypto-service transport over real node:http servers on ephemeral ports: what an answer
 * carries, the deadline, the answer size cap, and the one retry (only when an idle kept-alive
 * connection closed under the request, never when a fresh connection fails).
 */
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { after, describe, it } from "node:test";
import {
  keepAliveTransport,
  MAX_ANSWER_BYTES,
  TransportError,
} from "../../../src/clients/crypto-service/transport.ts";

const servers: Server[] = [];
after(async () => {
  for (const server of servers) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

async function serve(handle: (request: IncomingMessage, response: ServerResponse) => void): Promise<URL> {
  const server = createServer(handle);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/actions`);
}

const post = { headers: { "content-type": "application/json" }, body: '{"a":1}', timeoutMs: 2000 };
const kind = (expected: TransportError["kind"]) => (error: unknown) =>
  error instanceof TransportError && error.kind === expected;

describe("crypto-service keep-alive transport", () => {
  it("returns the status, the request id and the body the server sent, for the body posted", async () => {
    const url = await serve((request, response) => {
      let text = "";
      request.setEncoding("utf8");
      request.on("data", (chunk: string) => {
        text += chunk;
      });
      request.on("end", () => {
        response.writeHead(201, { "x-request-id": "r-1" }).end(`${request.method} ${text}`);
      });
    });
    const answer = await keepAliveTransport()(url, post);
    assert.deepEqual(answer, { status: 201, requestId: "r-1", body: 'POST {"a":1}' });
  });

  it("times out at the deadline when the server never answers", async () => {
    const url = await serve(() => undefined);
    const started = Date.now();
    await assert.rejects(keepAliveTransport()(url, { ...post, timeoutMs: 200 }), kind("timeout"));
    assert.ok(Date.now() - started < 1500);
  });

  it("refuses an answer larger than MAX_ANSWER_BYTES instead of buffering it", async () => {
    const url = await serve((_request, response) => {
      response.writeHead(200, { "content-length": String(MAX_ANSWER_BYTES + 1) });
      response.end(Buffer.alloc(MAX_ANSWER_BYTES + 1, 0x61));
    });
    await assert.rejects(keepAliveTransport()(url, { ...post, timeoutMs: 10_000 }), kind("unavailable"));
  });

  it("sends again once when an idle kept-alive connection closed under the request", async () => {
    const served = new WeakMap<Socket, number>();
    let dropped = 0;
    const url = await serve((request, response) => {
      const count = (served.get(request.socket) ?? 0) + 1;
      served.set(request.socket, count);
      // The second request on a kept-alive connection meets the server closing it (once).
      if (count === 2 && dropped === 0) {
        dropped += 1;
        request.socket.destroy();
        return;
      }
      request.resume();
      response.end("ok");
    });
    const send = keepAliveTransport({ maxSockets: 1 });
    assert.equal((await send(url, post)).body, "ok");
    assert.equal((await send(url, post)).body, "ok");
    assert.equal(dropped, 1);
  });

  it("does not send again when a kept-alive connection closes after the answer began (the server acted on it)", async () => {
    const served = new WeakMap<Socket, number>();
    let seen = 0;
    const url = await serve((request, response) => {
      seen += 1;
      const count = (served.get(request.socket) ?? 0) + 1;
      served.set(request.socket, count);
      request.resume();
      if (count === 1) {
        response.end("ok");
        return;
      }
      // The second request was acted on: its answer starts, then the connection drops.
      response.writeHead(200, { "content-length": "100" });
      response.write("partial", () => request.socket.destroy());
    });
    const send = keepAliveTransport({ maxSockets: 1 });
    assert.equal((await send(url, post)).body, "ok");
    await assert.rejects(send(url, post), kind("unavailable"));
    assert.equal(seen, 2);
  });

  it("does not send again when a fresh connection fails (the server may have acted on it)", async () => {
    let seen = 0;
    const url = await serve((request) => {
      seen += 1;
      request.socket.destroy();
    });
    await assert.rejects(keepAliveTransport()(url, post), kind("unavailable"));
    assert.equal(seen, 1);
  });
});
