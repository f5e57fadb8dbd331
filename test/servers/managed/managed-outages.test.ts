import assert from "node:assert/strict";
import { createServer, type Socket } from "node:net";
import { after, before, describe, it } from "node:test";
import { type Environment, startEnvironment } from "./harness.ts";
import { type Answer, post } from "./https-client.ts";

describe("managed crypto API when a dependency is down", () => {
  let env: Environment;
  let headers: Record<string, string>;

  before(async () => {
    env = await startEnvironment();
    headers = {
      username: env.account.username,
      password: env.account.password,
      api_key: env.partner.apiKey,
      access_key: env.partner.accessKey,
      secret_key: env.partner.secretKey,
    };
  });
  after(() => env.close());

  const call = (operation: string, body: unknown, extra: Record<string, string> = {}, url = env.managedUrl) =>
    post(`${url}/v1/${operation}`, { ca: env.certificate.cert, headers: { ...headers, ...extra }, body });
  const reason = (answer: Answer) => (answer.json.details as { reason?: string } | undefined)?.reason;

  it("answers 503 while the upstream crypto service is stopped, and recovers when it is back", async () => {
    const sealed = await call("sign-encrypt", { data: "survives the outage" });
    assert.equal(sealed.status, 200);
    const encrypted = (sealed.json.body as { encrypted_data: string }).encrypted_data;

    await env.stopCrypto();
    for (const operation of ["encrypt", "decrypt-verify"]) {
      const answer = await call(
        operation,
        operation === "encrypt" ? { data: "x" } : { encrypted_data: encrypted },
      );
      assert.equal(answer.status, 503, answer.text);
      assert.equal(answer.json.error, "upstream_unavailable");
      assert.equal(reason(answer), "upstream_unavailable");
      assert.ok(Number(answer.headers["retry-after"]) >= 1);
    }

    await env.startCrypto();
    const back = await call("decrypt-verify", { encrypted_data: encrypted });
    assert.equal(back.status, 200, back.text);
    assert.equal((back.json.body as { decrypted_data: string }).decrypted_data, "survives the outage");
  });

  it("answers 503 while the identity provider is stopped, and recovers when it is back", async () => {
    // Warm the token cache for the main account; use a second, never-seen account below.
    assert.equal((await call("encrypt", { data: "warm" })).status, 200);
    const fresh = { username: "svc-fresh", password: "canary-fresh-password-3c4d" };
    await env.addAccount(fresh);

    await env.stopIdp();
    const down = await call("encrypt", { data: "x" }, fresh);
    assert.equal(down.status, 503, down.text);
    assert.equal(down.json.error, "upstream_unavailable");
    assert.equal(reason(down), "idp_unavailable");
    // A cached token keeps working while the IdP is away.
    assert.equal((await call("encrypt", { data: "cached" })).status, 200);

    await env.startIdp();
    const back = await call("encrypt", { data: "x" }, fresh);
    assert.equal(back.status, 200, back.text);
  });

  it("answers 504 when the upstream accepts the connection but never answers", async () => {
    const sockets = new Set<Socket>();
    const silent = createServer((socket) => {
      sockets.add(socket);
    });
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    const address = silent.address();
    const port = typeof address === "object" && address !== null ? address.port : 0;
    try {
      const stalled = await env.startManaged({
        cryptoUrl: `http://127.0.0.1:${port}`,
        upstreamTimeoutMs: 300,
      });
      const answer = await call("encrypt", { data: "x" }, {}, stalled.url);
      assert.equal(answer.status, 504, answer.text);
      assert.equal(answer.json.error, "upstream_timeout");
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });
});
