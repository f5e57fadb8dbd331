import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { healthCheckMethod, unary } from "./grpc/helpers.ts";
import { proxyRequest, startWorld, UPSTREAM_HOST, type World } from "./world.ts";

describe("sidecar lifecycle: /healthz, /readyz, /metrics, gRPC health, graceful shutdown", () => {
  let world: World;

  before(async () => {
    world = await startWorld();
  });
  after(() => world.close());

  const getJson = async (port: number, path: string) => {
    const response = await fetch(`http://127.0.0.1:${port}${path}`);
    return {
      status: response.status,
      body: (await response.json()) as { status?: string; checks?: unknown },
    };
  };

  test("ready once gRPC and the proxy listen; metrics use Prometheus names and process defaults", async () => {
    const handle = await world.startSidecar({ registry: undefined });
    assert.deepEqual(await getJson(handle.ports.metrics, "/healthz"), {
      status: 200,
      body: { status: "ok" },
    });
    assert.equal(await handle.sidecar.whenReady(10_000), true);
    const ready = await getJson(handle.ports.metrics, "/readyz");
    assert.equal(ready.status, 200);
    assert.deepEqual(ready.body.checks, {
      grpc: true,
      proxy: true,
      audit: true,
      jwks: true,
      credentials: true,
      catalogs: true,
      policy_changes: true,
      decision_path: true,
      grpc_serving: true,
    });
    const health = await unary(handle.client, healthCheckMethod, {
      service: "envoy.service.auth.v3.Authorization",
    });
    assert.equal(health.status, "SERVING");
    await handle.check({});
    const text = await handle.metricsText();
    for (const name of [
      "authority_sidecar_decisions_total",
      "authority_sidecar_check_duration_seconds_bucket",
      "authority_sidecar_cache_hits_total",
      "authority_sidecar_cache_misses_total",
      "authority_sidecar_token_checks_total",
      "process_resident_memory_bytes",
      "nodejs_eventloop_lag_seconds",
    ]) {
      assert.match(text, new RegExp(`^${name}`, "m"), name);
    }
    assert.match(text, /authority_sidecar_check_duration_seconds_bucket\{le="0.0001",transport="grpc"\}/);
    assert.match(
      text,
      /authority_sidecar_decisions_total\{transport="grpc",outcome="allow",reason="none"\} 1/,
    );
    await handle.close();
  });

  test("with Redis configured but never reachable, the sidecar is not ready (and denies)", async () => {
    const handle = await world.startSidecar({
      redis: { url: "redis://127.0.0.1:9", cacheKey: world.cacheKey },
    });
    const ready = await getJson(handle.ports.metrics, "/readyz");
    assert.equal(ready.status, 503);
    const {
      jwks: _jwks,
      credentials: _credentials,
      catalogs: _catalogs,
      policy_changes: _policyChanges,
      decision_path: _decisionPath,
      grpc_serving: _grpcServing,
      ...listeners
    } = ready.body.checks as Record<string, boolean>;
    assert.deepEqual(listeners, { grpc: true, proxy: true, redis: false, audit: true });
    const response = await handle.check({});
    assert.equal(JSON.parse(response.denied_response.body).reason, "upstream_unavailable");
    await handle.close();
  });

  test("shutdown: not ready at once, an in-flight proxied request finishes, new connections are refused", async () => {
    const handle = await world.startSidecar({ upstreamTimeoutMs: 5000 });
    // Warm the caches so the slow request's time is all upstream.
    assert.equal((await handle.proxy({ target: `http://${UPSTREAM_HOST}/orders/1` })).status, 200);
    const inFlight = proxyRequest(
      handle.ports.proxy,
      { target: `http://${UPSTREAM_HOST}/slow` },
      world.tokens.agent,
    );
    await new Promise((resolve) => setTimeout(resolve, 200));
    const closing = handle.sidecar.close({ graceMs: 10_000 });
    const ready = await getJson(handle.ports.metrics, "/readyz");
    assert.equal(ready.status, 503);
    const reply = await inFlight;
    assert.equal(reply.status, 200);
    assert.deepEqual(reply.json(), { slow: true });
    await closing;
    await assert.rejects(fetch(`http://127.0.0.1:${handle.ports.metrics}/healthz`));
    await assert.rejects(
      proxyRequest(handle.ports.proxy, { target: `http://${UPSTREAM_HOST}/orders/1` }, world.tokens.agent),
    );
    await handle.close();
  });
});
