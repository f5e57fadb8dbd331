import assert from "node:assert/strict";
import { after, before, beforeEach, describe, test } from "node:test";
import {
  AGENT,
  CAPABILITY,
  deniedBody,
  type SidecarHandle,
  startWorld,
  UPSTREAM_HOST,
  UPSTREAM_SECRET,
  type World,
} from "./world.ts";

describe("sidecar forward proxy, end to end with a real upstream", () => {
  let world: World;
  let sidecar: SidecarHandle;

  before(async () => {
    world = await startWorld();
    sidecar = await world.startSidecar();
    // As in a pod, traffic comes once the sidecar is ready (its warm-up is done).
    assert.equal(await sidecar.sidecar.whenReady(30_000), true);
  });
  beforeEach(() => {
    world.upstream.seen.length = 0;
  });
  after(() => world.close());

  test("absolute-form request: decided, auth injected, caller token not forwarded, JSON redacted", async () => {
    const reply = await sidecar.proxy({
      target: `http://${UPSTREAM_HOST}/orders/42?expand=lines`,
      headers: {
        authorization: "Bearer caller-token-also-here",
        cookie: "sid=caller",
        traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "x-trace": "t-1",
      },
    });
    assert.equal(reply.status, 200);
    const body = reply.json();
    assert.equal(body.id, "42");
    // Operation rule (mask, keep 4), policy rule (remove /total), default (password).
    assert.equal(body.card_number, "************1111");
    assert.equal(body.total, undefined);
    assert.equal(body.customer.password, "*******");
    assert.equal(body.customer.email, "ada@example.com");
    assert.equal(reply.headers["content-length"], String(reply.body.length));
    assert.equal(reply.headers["set-cookie"], undefined);
    assert.equal(reply.headers.server, undefined);
    assert.match(String(reply.headers["x-authority-request-id"]), /^req_/);

    assert.equal(world.upstream.seen.length, 1);
    const seen = world.upstream.seen[0];
    assert.ok(seen !== undefined);
    assert.equal(seen.url, "/orders/42?expand=lines");
    assert.equal(seen.headers["x-api-key"], UPSTREAM_SECRET);
    assert.equal(seen.headers.authorization, undefined);
    assert.equal(seen.headers["proxy-authorization"], undefined);
    assert.equal(seen.headers.cookie, undefined);
    // Tracing goes through; a header the snapshot does not declare does not.
    assert.equal(seen.headers.traceparent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    assert.equal(seen.headers["x-trace"], undefined);
    assert.equal(seen.headers["x-authority-permission-id"], `${CAPABILITY}:get:/orders/{orderId}`);
    assert.equal(seen.headers["x-authority-request-id"], reply.headers["x-authority-request-id"]);
    // The request went to the reviewed upstream, whatever host the app named.
    assert.match(String(seen.headers.host), /^127\.0\.0\.1:\d+$/);
  });

  test("origin-form request with Host and the capability header", async () => {
    const reply = await sidecar.proxy({
      target: "/orders",
      host: "anything.example",
      headers: { "x-authority-capability": CAPABILITY },
    });
    assert.equal(reply.status, 200);
    assert.equal(reply.json().items[0].api_key, "**********");
    assert.equal(world.upstream.seen[0]?.headers["x-authority-capability"], undefined);
  });

  test("a response that needs no redaction (binary, no rules) is read whole and passes unchanged", async () => {
    const reply = await sidecar.proxy({ target: `http://${UPSTREAM_HOST}/files/report.bin` });
    assert.equal(reply.status, 200);
    assert.equal(reply.headers["content-type"], "application/octet-stream");
    assert.equal(Buffer.compare(reply.body, world.upstream.fileBytes), 0);
    assert.match(await sidecar.metricsText(), /authority_sidecar_proxy_responses_total\{kind="passed"\} 1/);
  });

  test("an oversize JSON response fails closed: 502, nothing of the upstream body", async () => {
    const reply = await sidecar.proxy({ target: `http://${UPSTREAM_HOST}/big` });
    assert.equal(reply.status, 502);
    const body = reply.json();
    assert.deepEqual(Object.keys(body).sort(), ["reason", "requestId", "status"]);
    assert.equal(body.reason, "upstream_error");
    assert.equal(body.status, "error");
    assert.doesNotMatch(reply.body.toString("utf8"), /xxxx/);
    assert.match(
      await sidecar.metricsText(),
      /authority_sidecar_proxy_responses_total\{kind="too_large"\} 1/,
    );
  });

  test("denies never reach the upstream: 401 without a token, 403 for an operation outside the allowlist", async () => {
    const missing = await sidecar.proxy({ target: `http://${UPSTREAM_HOST}/orders/1`, token: null });
    assert.equal(missing.status, 401);
    assert.equal(missing.json().reason, "missing_subject");
    assert.equal(missing.headers["www-authenticate"], 'Bearer realm="authority"');
    const forbidden = await sidecar.proxy({ target: `http://${UPSTREAM_HOST}/orders`, method: "POST" });
    assert.equal(forbidden.status, 403);
    assert.deepEqual(Object.keys(forbidden.json()).sort(), [
      "reason",
      "remedy",
      "requestId",
      "rule",
      "status",
    ]);
    assert.equal(forbidden.json().reason, "operation_not_allowed");
    assert.equal(forbidden.json().rule, "decide/allowlist");
    assert.equal(world.upstream.seen.length, 0);
  });

  test("an upstream that does not answer in time is 504 upstream_timeout", async () => {
    const reply = await sidecar.proxy({ target: `http://${UPSTREAM_HOST}/slow` });
    assert.equal(reply.status, 504);
    assert.equal(reply.json().reason, "upstream_timeout");
  });

  test("absolute-form: the path is decided as sent, not as URL parsing resolves it (same answer as ext_authz)", async () => {
    // WHATWG URL parsing turns "/orders/42/%2E" into "/orders/42/" (allowed getOrder) and
    // "/orders/x/%2e%2e" into "/orders/" (allowed listOrders): the proxy must see what ext_authz sees.
    for (const path of [
      "/orders/42/%2E",
      "/orders/x/%2e%2e",
      "/orders/x/..",
      "/orders/x/./42",
      "/orders\\42",
    ]) {
      const check = await sidecar.check({ path });
      assert.ok(check.denied_response !== undefined && check.denied_response !== null, `ext_authz ${path}`);
      const expected = deniedBody(check).reason;
      for (const target of [`http://${UPSTREAM_HOST}${path}`, path]) {
        const reply = await sidecar.proxy({ target, host: UPSTREAM_HOST });
        assert.equal(reply.json().reason, expected, `proxy ${target}`);
      }
    }
    assert.equal(world.upstream.seen.length, 0);
  });

  test("CONNECT tunnels are refused", async () => {
    const { request } = await import("node:http");
    const status = await new Promise<number>((resolve, reject) => {
      const req = request({
        host: "127.0.0.1",
        port: sidecar.ports.proxy,
        method: "CONNECT",
        path: "orders.internal:443",
      });
      req.on("connect", (res, socket) => {
        socket.destroy();
        resolve(res.statusCode ?? 0);
      });
      req.on("response", (res) => resolve(res.statusCode ?? 0));
      req.on("error", reject);
      req.end();
    });
    assert.equal(status, 405);
  });

  test("metrics name the proxy transport and never a subject", async () => {
    const text = await sidecar.metricsText();
    assert.match(
      text,
      /authority_sidecar_decisions_total\{transport="proxy",outcome="allow",reason="none"\} \d+/,
    );
    assert.match(text, /authority_sidecar_check_duration_seconds_bucket\{le="0.0005",transport="proxy"\}/);
    assert.match(text, /authority_sidecar_redaction_events_total\{source="operation",mode="mask"\} \d+/);
    assert.doesNotMatch(text, new RegExp(AGENT));
  });
});
