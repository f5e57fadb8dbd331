/**
 * Receipts through a real Envoy (decision 2771): the sidecar's Check answer carries
 * `x-authority-receipt` for the client (ok_response.response_headers_to_add on an allow, the
 * denied response's headers on a deny), Envoy passes it on, and the receipt finds the record
 * the sidecar shipped to the authority through GET /admin/audit/receipts/{receipt}.
 */
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, describe, it } from "node:test";
import { type EnvoyHandle, renderBootstrap, startEnvoy } from "../../../helpers/envoy.ts";
import { type HttpReply, httpRequest } from "../../../helpers/http-client.ts";
import {
  CAPABILITY,
  eventually,
  type SidecarHandle,
  startWorld,
  UPSTREAM_HOST,
  type World,
} from "../world.ts";

const FORGED = "r2.a.1.AAAAAAAAAAAAAAAAAAAAAA";

let world: World;
let sidecar: SidecarHandle;
let envoy: EnvoyHandle;

before(async () => {
  world = await startWorld();
  sidecar = await world.startSidecar({
    listen: {
      grpc: { host: "127.0.0.1", port: 0 },
      proxy: { host: "127.0.0.1", port: 0 },
      metrics: { host: "127.0.0.1", port: 0 },
    },
  });
  const appPort = Number(new URL(world.upstream.url).port);
  envoy = await startEnvoy((accessLogPath) =>
    renderBootstrap({
      sidecarPort: sidecar.ports.grpc,
      appPort,
      capability: CAPABILITY,
      timeout: "3s",
      accessLogPath,
    }),
  );
});

after(async () => {
  await envoy?.stop();
  await world?.close();
});

function get(path: string): Promise<HttpReply> {
  return httpRequest(`${envoy.url}${path}`, {
    method: "GET",
    headers: { host: UPSTREAM_HOST, authorization: `Bearer ${world.tokens.agent}` },
  });
}

/** The record the receipt finds, once the sidecar's batch reached the authority. */
async function recordOf(receipt: string): Promise<Record<string, unknown>> {
  let record: Record<string, unknown> | undefined;
  await eventually(async () => {
    const response = await fetch(
      `${world.authorityUrl}/admin/audit/receipts/${encodeURIComponent(receipt)}`,
      {
        headers: { authorization: `Bearer ${world.tokens.admin}` },
      },
    );
    if (response.status !== 200) return false;
    record = (await response.json()) as Record<string, unknown>;
    return true;
  }, 5000);
  assert.ok(record !== undefined, `no record for ${receipt}`);
  return record;
}

describe("a Check's receipt through Envoy", () => {
  it("an allow carries it to the client, and it finds the shipped record", async () => {
    const before = world.upstream.seen.length;
    const reply = await get("/orders/77");
    assert.equal(reply.status, 200, reply.text);
    const receipt = reply.headers["x-authority-receipt"];
    assert.ok(typeof receipt === "string", "Envoy passed the receipt back");
    assert.match(receipt, /^r2\.a\.\d+\.[A-Za-z0-9_-]{22}$/);
    const upstreamHeaders = world.upstream.seen.slice(before)[0]?.headers ?? {};
    assert.equal(
      upstreamHeaders["x-authority-receipt"],
      undefined,
      "the receipt is the client's, not the upstream's",
    );
    const record = await recordOf(receipt);
    assert.deepEqual([record.decision, record.transport, record.path], ["allowed", "grpc", "/orders/77"]);
  });

  it("a deny carries it too, and it finds the denied record", async () => {
    const reply = await get("/admin/receipt-deny");
    assert.equal(reply.status, 403, reply.text);
    const receipt = reply.headers["x-authority-receipt"];
    assert.ok(typeof receipt === "string");
    const record = await recordOf(receipt);
    assert.equal(record.decision, "denied");
    assert.equal(record.requestId, reply.headers["x-authority-request-id"]);
  });
});

describe("a forward-proxy answer's receipt (decision 2865)", () => {
  it("an allow carries it, and it finds the shipped record", async () => {
    const reply = await sidecar.proxy({ target: `http://${UPSTREAM_HOST}/orders/78` });
    assert.equal(reply.status, 200, reply.body.toString("utf8"));
    const receipt = reply.headers["x-authority-receipt"];
    assert.ok(typeof receipt === "string", "the proxy's answer carries the receipt");
    assert.match(receipt, /^r2\.a\.\d+\.[A-Za-z0-9_-]{22}$/);
    const record = await recordOf(receipt);
    assert.deepEqual([record.decision, record.transport, record.path], ["allowed", "proxy", "/orders/78"]);
  });

  it("a deny carries it too, and it finds the denied record", async () => {
    const reply = await sidecar.proxy({ target: `http://${UPSTREAM_HOST}/admin/receipt-deny` });
    assert.equal(reply.status, 403, reply.body.toString("utf8"));
    const receipt = reply.headers["x-authority-receipt"];
    assert.ok(typeof receipt === "string");
    const record = await recordOf(receipt);
    assert.deepEqual([record.decision, record.transport], ["denied", "proxy"]);
    assert.equal(record.requestId, reply.headers["x-authority-request-id"]);
  });
});

describe("an upstream's own receipt header (decision 2865)", () => {
  it("never reaches the proxy's client: the proxy's receipt replaces it", async () => {
    const own = await startWorld();
    try {
      const proxied = await own.startSidecar();
      // The world's upstream gives its port to one that answers with a receipt of its own.
      const port = Number(new URL(own.upstream.url).port);
      await own.upstream.close();
      const forger = createServer((req, res) => {
        req.resume();
        const body = JSON.stringify({ id: "1" });
        res.writeHead(200, {
          "content-type": "application/json",
          "content-length": Buffer.byteLength(body),
          "x-authority-receipt": FORGED,
        });
        res.end(body);
      });
      await new Promise<void>((resolve) => forger.listen(port, "127.0.0.1", resolve));
      try {
        const reply = await proxied.proxy({ target: `http://${UPSTREAM_HOST}/orders/79` });
        assert.equal(reply.status, 200, reply.body.toString("utf8"));
        const receipt = reply.headers["x-authority-receipt"];
        assert.ok(
          typeof receipt === "string" && receipt !== FORGED,
          `the proxy's receipt: ${String(receipt)}`,
        );
      } finally {
        await new Promise((resolve) => forger.close(resolve));
      }
    } finally {
      await own.close().catch(() => undefined);
    }
  });
});
