/**
 * What observability costs per decision (issue 31): the decision-log export (offer, mask,
 * batch, OTLP JSON encoding, send) per record, and tracing per request — off (the `traced`
 * wrapper around a stage, no span) and on (a server span with the three decision stages'
 * spans, serialized as OTLP JSON and sent). The endpoint is a fetch answering 200 at once:
 * the figures are this process's CPU, not a network's.
 */
import { createDecisionExporter } from "../src/audit/export/exporter.ts";
import { decisionRecord } from "../src/audit/records.ts";
import { startTracing, type Tracing, traced } from "../src/observability/tracing.ts";

export interface ObservabilityBenchRow {
  name: string;
  /** Mean CPU µs per decision (user + system), the background sends included. */
  cpuUs: number;
}

const accepted = async (_url: string, init: RequestInit): Promise<Response> => {
  // The body is produced (and so paid for) before the answer.
  if (init.body === undefined) throw new Error("no body");
  return new Response(null, { status: 200 });
};

async function measure(
  name: string,
  iterations: number,
  fn: () => unknown,
  settle: () => Promise<void>,
): Promise<ObservabilityBenchRow> {
  for (let i = 0; i < Math.min(2000, iterations); i++) fn();
  await settle();
  const cpu = process.cpuUsage();
  for (let i = 0; i < iterations; i++) {
    fn();
    // Let the background sends run as they would between requests (and no queue overflow).
    if (i % 64 === 63) await new Promise((resolve) => setImmediate(resolve));
  }
  await settle();
  const used = process.cpuUsage(cpu);
  return { name, cpuUs: (used.user + used.system) / iterations };
}

function sampleRecord(): Record<string, unknown> {
  return {
    ...decisionRecord({
      actor: "agent-7",
      subject_id: "agent-7",
      partner_id: "partner-1",
      capability_id: "billing-api",
      method: "GET",
      path: "/invoices/inv_000123",
      permission_id: "billing-api:GET:/invoices/{id}",
      decision: "allowed",
      transport: "http",
      requestId: "req-bench-000000000001",
      time: new Date("2026-06-01T00:00:00Z"),
    }),
    id: "dec_bench",
  };
}

export async function benchObservability(iterations = 50_000): Promise<ObservabilityBenchRow[]> {
  const record = sampleRecord();
  const exporter = createDecisionExporter({
    url: "http://collector.invalid/v1/logs",
    format: "otlp",
    serviceName: "authority",
    fetch: accepted,
    maxBuffered: 100_000,
    batchSize: 512,
    intervalMs: 1000,
    maskFields: ["path"],
    allowSampleRate: 1,
    retry: { initialDelayMs: 100, maxDelayMs: 1000 },
    requestTimeoutMs: 10_000,
    random: Math.random,
    count: () => undefined,
    onSendError: () => undefined,
  });
  const exported = await measure(
    "decision-log export: one record offered, masked, batched, encoded (OTLP JSON) and sent",
    iterations,
    () => exporter.offer(record),
    async () => {
      await exporter.flush(30_000);
    },
  );
  await exporter.close(1000);

  const stage = () => 1;
  const off = await measure(
    "tracing off: one stage through `traced` (no span)",
    iterations * 10,
    () => traced("authority.decide", stage),
    async () => undefined,
  );

  const tracing = (await startTracing(
    { url: "http://collector.invalid/v1/traces" },
    { fetch: accepted, serviceName: "authority-sidecar", onExportError: () => undefined },
  )) as Tracing;
  const carrier = (name: string) =>
    name === "traceparent" ? "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" : undefined;
  const request = () => {
    const span = tracing.open("authority.check", "server", [carrier]);
    span.run(() => {
      traced("authority.verify_token", stage);
      traced("authority.load_policy", stage);
      traced("authority.decide", stage);
      span.headers();
    });
    span.end({ "authority.decision": "allow" });
  };
  const on = await measure(
    "tracing on: a Check's spans (server + 3 stages, context for the upstream), exported",
    iterations / 10,
    request,
    // The last partial batch leaves after the processor's 1 s delay.
    () => new Promise((resolve) => setTimeout(resolve, 1500)),
  );
  await tracing.shutdown(5000);
  return [exported, off, on];
}
