/**
 * The tracing's own metrics (decision 2797), on a local OTLP/HTTP receiver: spans exported,
 * dropped with the export queue full (the SDK's queue holds 2,048 finished spans), and lost
 * with a failed export, and the failed export requests.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createMetricsRegistry } from "../../src/observability/metrics.ts";
import { startTracing, tracingMetrics } from "../../src/observability/tracing.ts";
import { type OtlpReceiver, startOtlpReceiver } from "../helpers/otlp-receiver.ts";
import { eventually } from "../servers/sidecar/world.ts";

/** The SDK batch processor's bounds: its queue, and the batch it starts exporting at once. */
const QUEUE = 2048;
const BATCH = 512;

async function tracedProcess(receiver: OtlpReceiver) {
  const registry = createMetricsRegistry({ collectDefaults: false });
  const tracing = await startTracing(
    { url: `${receiver.url}/v1/traces` },
    {
      fetch: (url, init) => fetch(url, init),
      serviceName: "authority-sidecar",
      onExportError: () => undefined,
      metrics: tracingMetrics(registry, "authority_sidecar"),
    },
  );
  assert.ok(tracing);
  /** `count` finished spans, within one turn of the event loop. */
  const spans = (count: number) => {
    for (let i = 0; i < count; i++) tracing.open("authority.check", "server").end();
  };
  const value = async (name: string, outcome?: string): Promise<number> => {
    const metric = await registry.getSingleMetric(name)?.get();
    const sample = metric?.values.find((v) => outcome === undefined || v.labels.outcome === outcome);
    return sample?.value ?? 0;
  };
  return { tracing, spans, value };
}

describe("tracing metrics: spans exported, dropped (queue full) and failed; failed exports", () => {
  let receiver: OtlpReceiver;
  before(async () => {
    receiver = await startOtlpReceiver();
  });
  after(async () => {
    await receiver?.close();
  });

  it("spans the receiver took are counted as exported", async () => {
    receiver.status = 200;
    const process = await tracedProcess(receiver);
    process.spans(10);
    await process.tracing.shutdown(10_000);
    assert.equal(await process.value("authority_sidecar_tracing_spans_total", "exported"), 10);
    assert.equal(await process.value("authority_sidecar_tracing_export_failures_total"), 0);
  });

  it("beyond the queue spans are dropped and counted; a refused export counts its spans as failed", async () => {
    receiver.status = 503;
    const process = await tracedProcess(receiver);
    // One batch leaves for the receiver, the queue fills, the rest is dropped.
    process.spans(BATCH + QUEUE + 100);
    await process.tracing.shutdown(10_000);
    assert.equal(await process.value("authority_sidecar_tracing_spans_total", "dropped"), 100);
    // Shutdown stops waiting at the first failed batch; the others fail in flight.
    const failed = () => process.value("authority_sidecar_tracing_spans_total", "failed");
    assert.ok(await eventually(async () => (await failed()) === BATCH + QUEUE), `failed: ${await failed()}`);
    assert.equal(await process.value("authority_sidecar_tracing_spans_total", "exported"), 0);
    assert.equal(
      await process.value("authority_sidecar_tracing_export_failures_total"),
      (BATCH + QUEUE) / BATCH,
      "one failed request per batch",
    );
  });

  it("an endpoint that is down: every export fails and is counted", async () => {
    await receiver.down();
    const process = await tracedProcess(receiver);
    process.spans(3);
    await process.tracing.shutdown(10_000);
    assert.equal(await process.value("authority_sidecar_tracing_spans_total", "failed"), 3);
    assert.equal(await process.value("authority_sidecar_tracing_export_failures_total"), 1);
    await receiver.up();
  });
});
