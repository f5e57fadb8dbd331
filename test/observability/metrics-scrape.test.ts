import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Counter, Histogram } from "prom-client";
import { createMetricsRegistry, metricsText } from "../../src/observability/metrics.ts";

/** A registry with labelled series of each kind, and no process defaults (their values move). */
function fixedRegistry() {
  const registry = createMetricsRegistry({ collectDefaults: false, defaultLabels: { service: "test" } });
  const counter = new Counter({
    name: "t_calls_total",
    help: "calls",
    labelNames: ["outcome"],
    registers: [registry],
  });
  counter.inc({ outcome: "allow" }, 3);
  counter.inc({ outcome: "deny" });
  const histogram = new Histogram({
    name: "t_duration_seconds",
    help: "durations",
    labelNames: ["transport"],
    buckets: [0.001, 0.01],
    registers: [registry],
  });
  histogram.observe({ transport: "grpc" }, 0.002);
  new Counter({ name: "t_empty_total", help: "never counted", registers: [registry] });
  return registry;
}

describe("metricsText (a scrape)", () => {
  it("is byte for byte the registry's own text", async () => {
    const registry = fixedRegistry();
    assert.equal(await metricsText(registry), await registry.metrics());
  });

  it("does not hold the event loop for the whole scrape: other tasks run between metrics", async () => {
    // Before: registry.metrics() ran every collector in one task, so no other task ran until the
    // whole scrape was done (process defaults included).
    const registry = createMetricsRegistry();
    const metrics = registry.getMetricsAsArray().length;
    let turns = 0;
    let running = true;
    const tick = (): void => {
      turns++;
      if (running) setImmediate(tick);
    };
    setImmediate(tick);
    const text = await metricsText(registry);
    running = false;
    assert.ok(turns >= metrics - 1, `${turns} other tasks ran during a scrape of ${metrics} metrics`);
    for (const { name } of registry.getMetricsAsArray())
      assert.match(text, new RegExp(`^# TYPE ${name} `, "m"));
  });

  it("leaves out a metric removed during the scrape instead of failing it", async () => {
    const registry = fixedRegistry();
    const scrape = metricsText(registry);
    registry.removeSingleMetric("t_empty_total");
    const text = await scrape;
    assert.doesNotMatch(text, /t_empty_total/);
    assert.match(text, /t_calls_total\{outcome="allow",service="test"\} 3/);
  });
});
