import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { createAuthorityClient } from "../../../src/servers/sidecar/authority-client.ts";
import { AuthorityFetchError } from "../../../src/servers/sidecar/errors.ts";
import { AnswerTooLargeError, createNodeJsonFetch } from "../../../src/servers/sidecar/node-json-fetch.ts";
import { staticTokenSource } from "../../../src/servers/sidecar/service-token.ts";
import { makeTempDir, type TempDir } from "../../helpers/temp-dir.ts";
import { selfSignedCert } from "../inject/tls.ts";

/**
 * The sidecar's transport to its authority and its issuers' JWKS (decision 3081): node:http(s)
 * over kept-alive agents instead of fetch. What fetch gave the authority client, held against
 * real servers: a deadline that also cuts a body that stalls, no redirect followed, an answer
 * read under a byte limit, connections kept alive, and TLS verified against Node's CAs
 * (NODE_EXTRA_CA_CERTS included).
 */

const LIMIT = 64 * 1024;
const SECRET_TOKEN = "sidecar-token-canary-3081";
const repo = fileURLToPath(new URL("../../../", import.meta.url));

type Handler = (request: IncomingMessage, response: ServerResponse) => void;

describe("the sidecar's node:http transport", () => {
  let server: Server;
  let base: string;
  let handler: Handler = (_request, response) => response.end("{}");
  const sockets = new Set<unknown>();
  const fetch = createNodeJsonFetch({ maxAnswerBytes: LIMIT });
  const get = (path: string, timeoutMs = 2000, redirect: "manual" | "error" = "error") =>
    fetch(`${base}${path}`, { headers: {}, redirect, signal: AbortSignal.timeout(timeoutMs) });

  before(async () => {
    server = createServer((request, response) => handler(request, response));
    server.on("connection", (socket) => sockets.add(socket));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it("reads the answer whole, parses it, and keeps the connection for the next request", async () => {
    handler = (request, response) => {
      response.setHeader("content-type", "application/json");
      response.end(JSON.stringify({ path: request.url, method: request.method }));
    };
    sockets.clear();
    const first = await get("/a");
    assert.equal(first.status, 200);
    assert.deepEqual(await first.json(), { path: "/a", method: "GET" });
    await get("/b");
    assert.equal(sockets.size, 1, "one kept-alive connection");
  });

  it("sends a body with its length", async () => {
    handler = (request, response) => {
      const chunks: Buffer[] = [];
      request.on("data", (chunk: Buffer) => chunks.push(chunk));
      request.on("end", () =>
        response.end(
          JSON.stringify({
            length: request.headers["content-length"],
            body: Buffer.concat(chunks).toString(),
          }),
        ),
      );
    };
    const answer = await fetch(`${base}/post`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: Buffer.from('{"x":1}'),
      redirect: "error",
      signal: AbortSignal.timeout(2000),
    });
    assert.deepEqual(await answer.json(), { length: "7", body: '{"x":1}' });
  });

  it("refuses an answer over its limit, whether announced or streamed, and stays usable", async () => {
    handler = (request, response) => {
      if (request.url === "/announced") {
        response.setHeader("content-length", String(LIMIT + 1));
        response.end("x".repeat(LIMIT + 1));
        return;
      }
      response.write("[");
      const more = () => {
        if (response.destroyed) return;
        response.write(`${"1,".repeat(4096)}`, () => setImmediate(more));
      };
      more();
    };
    await assert.rejects(get("/announced"), AnswerTooLargeError);
    await assert.rejects(get("/streamed"), AnswerTooLargeError);
    handler = (_request, response) => response.end('{"ok":true}');
    assert.deepEqual(await (await get("/after")).json(), { ok: true });
  });

  it("times out on no answer, and on a body that stalls after its headers", async () => {
    handler = () => undefined;
    await assert.rejects(get("/silent", 200), { name: "TimeoutError" });
    handler = (_request, response) => {
      response.writeHead(200, { "content-type": "application/json" });
      response.write('{"partial":');
    };
    await assert.rejects(get("/stalls", 200), { name: "TimeoutError" });
  });

  it("follows no redirect: 'error' fails, 'manual' answers it as it came", async () => {
    handler = (_request, response) => {
      response.writeHead(302, { location: "http://169.254.169.254/latest/meta-data" });
      response.end();
    };
    await assert.rejects(get("/moved"), /redirect refused \(302\)/);
    assert.equal((await get("/moved", 2000, "manual")).status, 302);
    // A 304 (a policy not modified) is an answer, not a redirect.
    handler = (_request, response) => {
      response.writeHead(304);
      response.end();
    };
    assert.equal((await get("/unchanged")).status, 304);
  });

  it("sends a GET again when its kept-alive connection was closed before any answer; never a POST", async () => {
    const served = new WeakMap<object, number>();
    let requests = 0;
    handler = (request, response) => {
      requests++;
      const count = (served.get(request.socket) ?? 0) + 1;
      served.set(request.socket, count);
      // The second request on a connection: closed unanswered, as a server closing an idle one.
      if (count === 2) request.socket.destroy();
      else response.end('{"fresh":true}');
    };
    await get("/first");
    requests = 0;
    assert.deepEqual(await (await get("/again")).json(), { fresh: true });
    assert.equal(requests, 2, "sent once more, on a new connection");
    requests = 0;
    await assert.rejects(
      fetch(`${base}/post`, {
        method: "POST",
        headers: {},
        body: Buffer.from("{}"),
        redirect: "error",
        signal: AbortSignal.timeout(2000),
      }),
    );
    assert.equal(requests, 1, "a POST is not sent again");
  });

  it("the authority client over it: limits and failures are upstream_unavailable, the token never in the error", async () => {
    handler = (request, response) => {
      if (request.url?.startsWith("/v1/sidecar/policy-keys/")) {
        response.end(JSON.stringify({ pad: "x".repeat(LIMIT) }));
        return;
      }
      response.statusCode = 200;
      response.end("not json");
    };
    const client = createAuthorityClient({ baseUrl: base, token: staticTokenSource(SECRET_TOKEN), fetch });
    for (const attempt of [() => client.fetchPolicyKeys("subject:a"), () => client.fetchPolicy("s", {})]) {
      const error = await attempt().then(
        () => assert.fail("resolved"),
        (caught: unknown) => caught,
      );
      assert.ok(error instanceof AuthorityFetchError);
      assert.equal(error.authorityCode, "upstream_unavailable");
      assert.doesNotMatch(JSON.stringify(error, Object.getOwnPropertyNames(error)), new RegExp(SECRET_TOKEN));
      assert.doesNotMatch(String(error.stack), new RegExp(SECRET_TOKEN));
    }
  });
});

describe("the sidecar's node:http transport over TLS", () => {
  let dir: TempDir;
  let url: string;
  let close: () => void;

  before(async () => {
    dir = await makeTempDir("node-json-fetch-tls-");
    const { cert, key } = await selfSignedCert("authority.test");
    await writeFile(join(dir.path, "ca.pem"), cert);
    const server = createHttpsServer({ cert, key }, (_request, response) => response.end('{"tls":true}'));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `https://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    close = () => {
      server.closeAllConnections();
      server.close();
    };
  });
  after(async () => {
    close?.();
    await dir?.cleanup();
  });

  it("refuses a certificate that chains to no trusted CA", async () => {
    const fetch = createNodeJsonFetch({ maxAnswerBytes: LIMIT });
    await assert.rejects(
      fetch(url, { headers: {}, redirect: "error", signal: AbortSignal.timeout(2000) }),
      /self-signed|self signed/,
    );
  });

  it("trusts a CA given to Node as fetch does (NODE_EXTRA_CA_CERTS)", async () => {
    const script = `import { createNodeJsonFetch } from "./src/servers/sidecar/node-json-fetch.ts";
const answer = await createNodeJsonFetch({ maxAnswerBytes: 1024 })(${JSON.stringify(url)}, { headers: {}, redirect: "error", signal: AbortSignal.timeout(5000) });
process.stdout.write(JSON.stringify(await answer.json()));`;
    // Not spawnSync: the server answering it runs in this process.
    const run = await promisify(execFile)(process.execPath, ["--input-type=module", "-e", script], {
      cwd: repo,
      encoding: "utf8",
      env: { ...process.env, NODE_EXTRA_CA_CERTS: join(dir.path, "ca.pem") },
    });
    assert.equal(run.stdout, '{"tls":true}');
  });
});
