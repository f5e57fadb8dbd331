import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { createServer as createNetServer, type Server as NetServer, type Socket } from "node:net";
import { after, before, describe, it } from "node:test";
import { gzipSync } from "node:zlib";
import type { JsonAnswer } from "../../../src/core/json-fetch.ts";
import { requestToken, TokenRequestError } from "../../../src/identity/token-client.ts";
import { createNodeJsonFetch } from "../../../src/servers/sidecar/node-json-fetch.ts";

/**
 * The attack pass on the sidecar's node:http transport (decision 3081; attack pass 3121): servers
 * that misbehave on the wire. Whatever they send, a call settles (by its deadline at the latest:
 * a call that never settles would hold a shared JWKS reload, and every token behind it, forever),
 * follows no redirect, and a kept-alive connection never hands one call's answer to another.
 */

const LIMIT = 64 * 1024;
/** Far above any deadline used here: reaching it means the call never settled. */
const NEVER_MS = 10_000;

/** Rejects with "never settled" when `promise` has not settled by NEVER_MS. */
function settles<T>(promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const never = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error("never settled")), NEVER_MS);
  });
  return Promise.race([promise, never]).finally(() => clearTimeout(timer));
}

function listening<S extends Server | NetServer>(server: S): Promise<number> {
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => resolve((server.address() as AddressInfo).port)),
  );
}

/** A TCP server that answers each connection's first request with whatever `answer` writes. */
async function rawServer(answer: (socket: Socket, request: string) => void) {
  const sockets = new Set<Socket>();
  const server = createNetServer((socket) => {
    sockets.add(socket);
    socket.on("error", () => undefined);
    let seen = "";
    socket.on("data", (chunk) => {
      seen += chunk.toString("latin1");
      if (seen.includes("\r\n\r\n")) {
        const request = seen;
        seen = "";
        answer(socket, request);
      }
    });
  });
  const port = await listening(server);
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => {
      for (const socket of sockets) socket.destroy();
      server.close();
    },
  };
}

describe("the sidecar's node:http transport under attack", () => {
  const fetch = createNodeJsonFetch({ maxAnswerBytes: LIMIT });
  const get = (url: string, timeoutMs = 300, redirect: "manual" | "error" = "error") =>
    settles(fetch(url, { headers: {}, redirect, signal: AbortSignal.timeout(timeoutMs) }));

  it("settles on a 101 upgrade it never asked for, and on 1xx answers that never end", async () => {
    for (const head of [
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
      "HTTP/1.1 100 Continue\r\n\r\n",
      "HTTP/1.1 102 Processing\r\n\r\n",
    ]) {
      const server = await rawServer((socket) => {
        socket.write(head);
        const again = setInterval(() => (socket.destroyed ? clearInterval(again) : socket.write(head)), 20);
        socket.on("close", () => clearInterval(again));
      });
      try {
        await assert.rejects(get(`${server.url}/`), (error: Error) => error.message !== "never settled");
      } finally {
        server.close();
      }
    }
  });

  it("still reads an answer whose body ends with its connection (no length, no chunks)", async () => {
    for (const delay of [0, 50]) {
      const server = await rawServer((socket) => {
        socket.write(
          'HTTP/1.1 200 OK\r\nConnection: close\r\ncontent-type: application/json\r\n\r\n{"whole":',
        );
        setTimeout(() => socket.end("true}"), delay);
      });
      try {
        assert.deepEqual(await (await get(`${server.url}/`, 2000)).json(), { whole: true });
      } finally {
        server.close();
      }
    }
  });

  it("a body trickling byte by byte (slowloris) is cut by the deadline", async () => {
    const server = await rawServer((socket) => {
      socket.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n[1\r\n");
      const drip = setInterval(
        () => (socket.destroyed ? clearInterval(drip) : socket.write("2\r\n,1\r\n")),
        10,
      );
      socket.on("close", () => clearInterval(drip));
    });
    try {
      await assert.rejects(get(`${server.url}/`), { name: "TimeoutError" });
    } finally {
      server.close();
    }
  });

  it("refuses lying or smuggling framing: a short body, thousands of headers, chunked with a length", async () => {
    const answers = [
      // Announces more than it sends, then closes.
      "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{}",
      // Larger than Node's header limit.
      `HTTP/1.1 200 OK\r\n${Array.from({ length: 5000 }, (_, i) => `x-h${i}: v\r\n`).join("")}Content-Length: 2\r\n\r\n{}`,
      // Both framings: a request-smuggling classic.
      'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n7\r\n{"a":1}\r\n0\r\n\r\n',
    ];
    for (const text of answers) {
      const server = await rawServer((socket) => socket.end(text));
      try {
        await assert.rejects(
          get(`${server.url}/`, 2000),
          (error: Error) => error.message !== "never settled",
        );
      } finally {
        server.close();
      }
    }
  });

  it("sends no accept-encoding, and a compressed answer it did not ask for is refused, not misread", async () => {
    let acceptEncoding: string | undefined = "unset";
    const server = createServer((request: IncomingMessage, response: ServerResponse) => {
      acceptEncoding = request.headers["accept-encoding"];
      response.writeHead(200, { "content-type": "application/json", "content-encoding": "gzip" });
      response.end(gzipSync('{"keys":[]}'));
    });
    const port = await listening(server);
    try {
      const answer = await get(`http://127.0.0.1:${port}/`, 2000);
      assert.equal(acceptEncoding, undefined);
      await assert.rejects(answer.json(), SyntaxError);
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  it("never follows a redirect to another host, so the bearer token stays home", async () => {
    let elsewhere = 0;
    const other = createServer((_request, response) => {
      elsewhere++;
      response.end("{}");
    });
    const otherPort = await listening(other);
    const server = createServer((_request, response) => {
      response.writeHead(307, { location: `http://127.0.0.1:${otherPort}/steal` });
      response.end();
    });
    const port = await listening(server);
    try {
      const send = (redirect: "manual" | "error") =>
        settles(
          fetch(`http://127.0.0.1:${port}/v1/sidecar/policy`, {
            headers: { authorization: "Bearer attack-canary-3121" },
            redirect,
            signal: AbortSignal.timeout(2000),
          }),
        );
      await assert.rejects(send("error"), /redirect refused \(307\)/);
      assert.equal((await send("manual")).status, 307);
      assert.equal(elsewhere, 0);
    } finally {
      for (const s of [server, other]) {
        s.closeAllConnections();
        s.close();
      }
    }
  });

  it("an aborted or refused answer's rest is never read as the next call's answer (no desync)", async () => {
    // Every request on a connection answered in turn; the first ones stall mid-body or run over.
    let served = 0;
    const server = createServer((request, response) => {
      served++;
      if (request.url === "/stall") {
        response.writeHead(200, { "content-length": "100" });
        response.write('{"stale":');
        return;
      }
      if (request.url === "/large") {
        response.writeHead(200, { "content-length": String(LIMIT * 2) });
        response.end(`{"stale":"${"x".repeat(LIMIT * 2 - 12)}"}`);
        return;
      }
      if (request.url === "/moved") {
        response.writeHead(302, { location: "/elsewhere", "content-length": "15" });
        response.end('{"stale":true}\n');
        return;
      }
      response.end(JSON.stringify({ url: request.url }));
    });
    const port = await listening(server);
    const base = `http://127.0.0.1:${port}`;
    try {
      await get(`${base}/warm`);
      await assert.rejects(get(`${base}/stall`, 200), { name: "TimeoutError" });
      assert.deepEqual(await (await get(`${base}/next1`, 2000)).json(), { url: "/next1" });
      await assert.rejects(get(`${base}/large`, 2000));
      assert.deepEqual(await (await get(`${base}/next2`, 2000)).json(), { url: "/next2" });
      await assert.rejects(get(`${base}/moved`, 2000), /redirect refused/);
      assert.deepEqual(await (await get(`${base}/next3`, 2000)).json(), { url: "/next3" });
      const manual: JsonAnswer = await get(`${base}/moved`, 2000, "manual");
      assert.equal(manual.status, 302);
      assert.deepEqual(await (await get(`${base}/next4`, 2000)).json(), { url: "/next4" });
      assert.equal(served, 9);
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  it("reaches an IPv6 literal on its port and names it so in Host", async (context) => {
    const server = createServer((request, response) =>
      response.end(JSON.stringify({ host: request.headers.host })),
    );
    const listened = await new Promise<boolean>((resolve) => {
      server.once("error", () => resolve(false));
      server.listen(0, "::1", () => resolve(true));
    });
    if (!listened) return context.skip("no IPv6 loopback here");
    const port = (server.address() as AddressInfo).port;
    try {
      assert.deepEqual(await (await get(`http://[::1]:${port}/`, 2000)).json(), { host: `[::1]:${port}` });
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  it("sends the URL's user-info nowhere: a URL with credentials is refused, as fetch refuses it", async () => {
    let authorization: string | undefined;
    const server = createServer((request, response) => {
      authorization = request.headers.authorization;
      response.end("{}");
    });
    const port = await listening(server);
    try {
      await assert.rejects(
        fetch(`http://user:hunter2@127.0.0.1:${port}/`, {
          headers: {},
          redirect: "error",
          signal: AbortSignal.timeout(2000),
        }),
        (error: Error) => !/hunter2/.test(`${error.message} ${error.stack}`),
      );
      assert.equal(authorization, undefined);
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });
});

/** Every string reachable from an error: its own properties, its cause chain, its stack. */
function everythingIn(error: unknown, seen = new Set<unknown>()): string {
  if (typeof error !== "object" || error === null || seen.has(error)) return String(error);
  seen.add(error);
  return Object.getOwnPropertyNames(error)
    .map((name) => everythingIn((error as Record<string, unknown>)[name], seen))
    .join(" ");
}

describe("the token request over the node:http transport: the client secret in no error", () => {
  const SECRET = "client-secret-canary-3121";
  const basic = Buffer.from(`sidecar:${SECRET}`).toString("base64");
  const fetch = createNodeJsonFetch({ maxAnswerBytes: LIMIT });

  it("whether the endpoint resets, answers garbage, redirects, stalls or is too large", async () => {
    const faults: ReadonlyArray<(socket: Socket) => void> = [
      (socket) => socket.destroy(),
      (socket) => socket.end("NOT HTTP AT ALL\r\n\r\n"),
      (socket) =>
        socket.end("HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/\r\nContent-Length: 0\r\n\r\n"),
      (socket) => socket.write("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{"),
      (socket) =>
        socket.end(`HTTP/1.1 200 OK\r\nContent-Length: ${LIMIT + 1}\r\n\r\n${"x".repeat(LIMIT + 1)}`),
    ];
    for (const fault of faults) {
      let received = "";
      const server = await rawServer((socket, request) => {
        received = request;
        fault(socket);
      });
      try {
        const error = await settles(
          requestToken({
            tokenUrl: `${server.url}/oauth2/token`,
            grant: { type: "client_credentials", clientId: "sidecar", clientSecret: SECRET },
            timeoutMs: 300,
            fetch,
          }),
        ).then(
          () => assert.fail("resolved"),
          (caught: unknown) => caught,
        );
        assert.ok(error instanceof TokenRequestError, String(error));
        assert.ok(received.includes(basic), "the secret went to the endpoint, in its header");
        const text = everythingIn(error);
        assert.ok(!text.includes(SECRET) && !text.includes(basic), text);
      } finally {
        server.close();
      }
    }
  });
});

describe("the node:http transport and a signal aborted before the call", () => {
  let server: Server;
  let base: string;
  before(async () => {
    server = createServer((_request, response) => response.end("{}"));
    base = `http://127.0.0.1:${await listening(server)}`;
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  it("an abort before the request is sent rejects with the signal's reason, sends nothing", async () => {
    const fetch = createNodeJsonFetch({ maxAnswerBytes: LIMIT });
    const controller = new AbortController();
    controller.abort(new Error("gone"));
    await assert.rejects(fetch(`${base}/`, { headers: {}, redirect: "error", signal: controller.signal }), {
      message: "gone",
    });
  });
});
