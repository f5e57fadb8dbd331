import assert from "node:assert/strict";
import { createServer, type Server, type Socket } from "node:net";
import { after, before, describe, it } from "node:test";
import { CryptoClientError, createCryptoClient } from "../../../src/clients/crypto-service/client.ts";

const credentials = { token: "t", apiKey: "a", accessKey: "b", secretKey: "c" };

function listen(server: Server): Promise<number> {
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      resolve(typeof address === "object" && address !== null ? address.port : 0);
    });
  });
}

describe("crypto client failures", () => {
  const sockets = new Set<Socket>();
  // A peer that accepts connections and never answers: the client must give up on time.
  const silent = createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  let silentPort = 0;
  let closedPort = 0;

  before(async () => {
    silentPort = await listen(silent);
    const probe = createServer();
    closedPort = await listen(probe);
    await new Promise((resolve) => probe.close(resolve));
  });
  after(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => silent.close(resolve));
  });

  for (const transport of ["node:http", "fetch"] as const) {
    const extra = transport === "fetch" ? { fetch: globalThis.fetch } : {};

    it(`reports a refused connection as upstream_unavailable (${transport})`, async () => {
      const client = createCryptoClient({
        baseUrl: `http://127.0.0.1:${closedPort}`,
        timeoutMs: 2000,
        ...extra,
      });
      await assert.rejects(client.encrypt(credentials, "x"), (error: unknown) => {
        assert.ok(error instanceof CryptoClientError);
        assert.equal(error.code, "upstream_unavailable");
        assert.equal(error.message, "The crypto service could not be reached.");
        return true;
      });
    });

    it(`reports a peer that never answers as upstream_timeout (${transport})`, async () => {
      const client = createCryptoClient({
        baseUrl: `http://127.0.0.1:${silentPort}`,
        timeoutMs: 300,
        ...extra,
      });
      await assert.rejects(client.decryptVerify(credentials, "x"), (error: unknown) => {
        assert.ok(error instanceof CryptoClientError);
        assert.equal(error.code, "upstream_timeout");
        return true;
      });
    });
  }

  it("validates its options", () => {
    assert.throws(() => createCryptoClient({ baseUrl: "ftp://x" }), TypeError);
    assert.throws(() => createCryptoClient({ baseUrl: "http://u:p@x" }), TypeError);
    assert.throws(() => createCryptoClient({ baseUrl: "http://x", timeoutMs: 0 }), TypeError);
  });
});
