import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import type { FastifyInstance } from "fastify";
import { pino } from "pino";
import { createMetricsRegistry } from "../../../src/observability/metrics.ts";
import { installHttpMetrics } from "../../../src/servers/http/metrics.ts";
import { createHttpServer } from "../../../src/servers/http/server.ts";

describe("HTTP metrics at /metrics", () => {
  let app: FastifyInstance;
  let base: string;

  before(async () => {
    app = createHttpServer({ logger: pino({ level: "silent" }) });
    installHttpMetrics(app, { namespace: "authority", registry: createMetricsRegistry() });
    app.get("/things/:id", async () => ({ ok: true }));
    await app.listen({ host: "127.0.0.1", port: 0 });
    base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  });

  after(() => app.close());

  it("counts by route template, never by raw URL, and passes promtool's lint", async () => {
    await fetch(`${base}/things/secret-customer-id`);
    for (let i = 0; i < 3; i++) await fetch(`${base}/scan-${i}/x`);
    const response = await fetch(`${base}/metrics`);
    assert.equal(response.status, 200);
    assert.match(response.headers.get("content-type") ?? "", /^text\/plain/);
    const text = await response.text();
    assert.match(
      text,
      /^authority_http_requests_total\{route="\/things\/:id",method="GET",status="200"\} 1$/m,
    );
    assert.match(text, /^authority_http_requests_total\{route="unmatched",method="GET",status="404"\} 3$/m);
    assert.match(
      text,
      /^authority_http_request_duration_seconds_count\{route="\/things\/:id",method="GET"\} 1$/m,
    );
    assert.doesNotMatch(text, /secret-customer-id|scan-/);
    assert.match(text, /^process_resident_memory_bytes /m);
    const lint = spawnSync("promtool", ["check", "metrics"], { input: text, encoding: "utf8" });
    assert.equal(lint.error, undefined, "promtool must be installed (make test installs it)");
    assert.equal(lint.status, 0, `${lint.stdout}${lint.stderr}`);
  });
});
