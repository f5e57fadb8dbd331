import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";
import {
  createDecisionExporter,
  type DecisionExporterOptions,
  type ExportOutcome,
  MASK,
} from "../../../src/audit/export/exporter.ts";
import { createEgressPolicy } from "../../../src/execute/egress.ts";
import { logRecords, type OtlpReceiver, startOtlpReceiver } from "../../helpers/otlp-receiver.ts";

let receiver: OtlpReceiver;
before(async () => {
  receiver = await startOtlpReceiver();
});
beforeEach(() => {
  receiver.bodies.length = 0;
  receiver.status = 200;
});
after(() => receiver.close());

let sequence = 0;
function decision(outcome: "allowed" | "denied", extra: Record<string, unknown> = {}) {
  sequence++;
  return {
    kind: "decision",
    id: `dec_${sequence}`,
    actor: "agent-1",
    subject_id: "agent-1",
    partner_id: "acme",
    capability_id: "orders",
    method: "GET",
    path: "/orders/42",
    permission_id: "orders:get:/orders/{orderId}",
    decision: outcome,
    reason: outcome === "denied" ? "policy_denied" : null,
    transport: "grpc",
    requestId: `req-${sequence}`,
    time: "2026-05-01T12:00:00.000Z",
    ...extra,
  };
}

function exporter(overrides: Partial<DecisionExporterOptions> = {}) {
  const counted: Record<ExportOutcome, number> = { sent: 0, retried: 0, dropped: 0, sampled_out: 0 };
  const url = overrides.url ?? `${receiver.url}/v1/logs`;
  const instance = createDecisionExporter({
    url,
    format: "otlp",
    serviceName: "authority-test",
    // The operator's endpoint, through the one egress gate, allowed by configuration.
    fetch: createEgressPolicy({ operatorUrls: [url] }).fetch,
    maxBuffered: 1000,
    batchSize: 100,
    intervalMs: 20,
    maskFields: [],
    allowSampleRate: 1,
    retry: { initialDelayMs: 5, maxDelayMs: 40 },
    requestTimeoutMs: 5000,
    random: Math.random,
    count: (outcome, records) => {
      counted[outcome] += records;
    },
    onSendError: () => undefined,
    ...overrides,
  });
  return { instance, counted };
}

describe("decision-log export over OTLP/HTTP", () => {
  it("ships records as OTLP JSON log records, masked fields replaced, denies as WARN", async () => {
    const { instance, counted } = exporter({ maskFields: ["actor", "subject_id", "path"] });
    instance.offer(decision("allowed"));
    instance.offer(decision("denied"));
    assert.equal(await instance.flush(10_000), true);
    const records = logRecords(receiver);
    assert.equal(records.length, 2);
    const [allow, deny] = records;
    assert.equal(allow.severityNumber, 9);
    assert.equal(deny.severityNumber, 13);
    assert.equal(deny.severityText, "WARN");
    assert.equal(allow.timeUnixNano, "1777636800000000000");
    const attributes = Object.fromEntries(
      deny.attributes.map((a: { key: string; value: { stringValue?: string } }) => [
        a.key,
        a.value.stringValue,
      ]),
    );
    assert.equal(attributes["authority.decision"], "denied");
    assert.equal(attributes["authority.reason"], "policy_denied");
    assert.equal(attributes["authority.subject_id"], MASK);
    assert.equal(attributes["authority.path"], MASK);
    assert.equal(JSON.parse(deny.body.stringValue).subject_id, MASK);
    assert.doesNotMatch(JSON.stringify(receiver.bodies), /agent-1"|\/orders\/42/);
    const body = receiver.bodies[0]?.body as { resourceLogs: Array<{ resource: unknown }> };
    assert.deepEqual(body.resourceLogs[0]?.resource, {
      attributes: [{ key: "service.name", value: { stringValue: "authority-test" } }],
    });
    assert.deepEqual(counted, { sent: 2, retried: 0, dropped: 0, sampled_out: 0 });
    await instance.close(1000);
  });

  it("receiver down and back: nothing lost within the buffer, drops counted beyond it", async () => {
    const { instance, counted } = exporter({ maxBuffered: 50, batchSize: 20 });
    await receiver.down();
    const offered = Array.from({ length: 60 }, (_, i) => decision(i % 3 === 0 ? "denied" : "allowed"));
    for (const record of offered) instance.offer(record);
    assert.equal(instance.stats().buffered, 50);
    assert.equal(counted.dropped, 10, "the ten beyond the buffer are dropped and counted");
    assert.equal(await instance.flush(200), false, "nothing can leave while the receiver is down");
    await receiver.up();
    assert.equal(await instance.flush(10_000), true);
    const ids = new Set(logRecords(receiver).map((r) => JSON.parse(r.body.stringValue).id));
    assert.deepEqual(
      [...ids].sort(),
      offered
        .slice(0, 50)
        .map((r) => r.id)
        .sort(),
    );
    assert.equal(counted.sent, 50);
    assert.ok(counted.retried >= 20, `retried ${counted.retried}`);
    assert.equal(counted.dropped, 10);
    await instance.close(1000);
  });

  it("retries a 503 and a 429; drops a batch the endpoint refuses for good (400), counted", async () => {
    const { instance, counted } = exporter();
    receiver.status = 503;
    instance.offer(decision("allowed"));
    assert.equal(await instance.flush(100), false);
    receiver.status = 429;
    assert.equal(await instance.flush(100), false);
    receiver.status = 200;
    assert.equal(await instance.flush(10_000), true);
    assert.equal(counted.sent, 1);
    assert.ok(counted.retried >= 2);
    receiver.status = 400;
    instance.offer(decision("denied"));
    assert.equal(await instance.flush(10_000), true);
    assert.equal(counted.dropped, 1);
    await instance.close(1000);
  });

  it("samples allows, never denies", async () => {
    const { instance, counted } = exporter({ allowSampleRate: 0.5, random: sequenceOf([0.1, 0.9]) });
    for (let i = 0; i < 4; i++) instance.offer(decision("allowed"));
    for (let i = 0; i < 4; i++) instance.offer(decision("denied"));
    assert.equal(await instance.flush(10_000), true);
    const outcomes = logRecords(receiver).map((r) => JSON.parse(r.body.stringValue).decision);
    assert.deepEqual(outcomes, ["allowed", "allowed", "denied", "denied", "denied", "denied"]);
    assert.equal(counted.sampled_out, 2);
    await instance.close(1000);
  });

  it("the plain HTTP endpoint takes a JSON array of the records", async () => {
    const { instance } = exporter({ format: "json", url: `${receiver.url}/decisions` });
    const record = decision("denied");
    instance.offer(record);
    assert.equal(await instance.flush(10_000), true);
    assert.deepEqual(receiver.bodies, [{ path: "/decisions", body: [record] }]);
    await instance.close(1000);
  });

  it("close sends what is buffered; later offers are ignored", async () => {
    const { instance, counted } = exporter({ intervalMs: 60_000 });
    instance.offer(decision("allowed"));
    assert.deepEqual(await instance.close(10_000), { flushed: true });
    instance.offer(decision("allowed"));
    assert.equal(counted.sent, 1);
    assert.equal(instance.stats().buffered, 0);
  });

  it("refuses options it cannot honour", () => {
    assert.throws(() => exporter({ maxBuffered: 0 }), /maxBuffered/);
    assert.throws(() => exporter({ allowSampleRate: 1.5 }), /allowSampleRate/);
    assert.throws(() => exporter({ url: "not a url" }));
  });
});

function sequenceOf(values: readonly number[]): () => number {
  let i = 0;
  return () => values[i++ % values.length] as number;
}
