import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { logRecords, type OtlpReceiver, startOtlpReceiver } from "../../helpers/otlp-receiver.ts";
import { AGENT, CAPABILITY, type System, startSystem } from "../../helpers/system.ts";
import { eventually } from "../../servers/sidecar/world.ts";

/**
 * `authority serve` with `--decision-export-url`: the decisions it records reach a local OTLP/HTTP
 * receiver through the egress gate, masked as configured, counted in its metrics.
 */
describe("the authority exports its decision records", () => {
  let receiver: OtlpReceiver;
  let system: System;

  before(async () => {
    receiver = await startOtlpReceiver();
    system = await startSystem({
      binding: false,
      decisionExport: {
        url: `${receiver.url}/v1/logs`,
        format: "otlp",
        maxBuffered: 1000,
        batchSize: 100,
        intervalMs: 20,
        maskFields: ["path"],
        allowSampleRate: 1,
      },
    });
  });
  after(async () => {
    await system?.close();
    await receiver?.close();
  });

  it("an allow and a deny reach the receiver with their ids; the metrics count them", async () => {
    const token = await system.agentToken(AGENT);
    const allowed = await system.authorize(
      { capability_id: CAPABILITY, method: "GET", path: "/items/7" },
      token,
    );
    assert.equal(allowed.status, 200, allowed.text);
    const denied = await system.authorize({ capability_id: "no-such", method: "GET", path: "/x" }, token);
    assert.notEqual(denied.status, 200);
    const bodies = () => logRecords(receiver).map((record) => JSON.parse(record.body.stringValue));
    assert.ok(await eventually(async () => bodies().length >= 2), "both records exported");
    const [first, second] = bodies();
    assert.equal(first.decision, "allowed");
    assert.equal(first.capability_id, CAPABILITY);
    assert.equal(first.path, "****");
    assert.equal(second.decision, "denied");
    assert.match(first.id, /^dec_/);
    const metrics = await system.call("GET", `${system.url}/metrics`);
    assert.match(metrics.text, /authority_decision_export_records_total\{outcome="sent"\} 2/);
  });
});
