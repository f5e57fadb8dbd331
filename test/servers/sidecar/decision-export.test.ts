import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { configuredExporter } from "../../../src/audit/export/configured.ts";
import type { DecisionExporter } from "../../../src/audit/export/exporter.ts";
import type { DecisionAuditRecord } from "../../../src/audit/records.ts";
import { createMetricsRegistry } from "../../../src/observability/metrics.ts";
import { logs } from "../../../src/store/model.ts";
import { logRecords, type OtlpReceiver, startOtlpReceiver } from "../../helpers/otlp-receiver.ts";
import { AGENT, CAPABILITY, type System, startSystem } from "../../helpers/system.ts";
import { eventually } from "./world.ts";

/**
 * A sidecar with its own decision-log export (decision 2797) beside an authority that exports
 * too: each decision record is exported once — the sidecar's by the sidecar (its batches say
 * `exported`, and the authority skips them), the authority's own and those of a sidecar that does
 * not export by the authority — and a receiver down and back loses nothing within the buffer.
 */

const SIDECAR_BUFFER = 20;

/** The decision records (parsed bodies) a receiver got. */
function exported(receiver: OtlpReceiver): Array<Record<string, unknown>> {
  return logRecords(receiver).map((record) => JSON.parse(record.body.stringValue));
}

describe("a sidecar exports its own decision records", () => {
  let authorityReceiver: OtlpReceiver;
  let sidecarReceiver: OtlpReceiver;
  let sidecarExporter: DecisionExporter;
  let system: System;
  let agent: string;

  before(async () => {
    authorityReceiver = await startOtlpReceiver();
    sidecarReceiver = await startOtlpReceiver();
    const registry = createMetricsRegistry({ collectDefaults: false });
    const exporter = configuredExporter(
      {
        url: `${sidecarReceiver.url}/v1/logs`,
        format: "otlp",
        maxBuffered: SIDECAR_BUFFER,
        batchSize: 4,
        intervalMs: 20,
        maskFields: ["actor"],
        allowSampleRate: 1,
      },
      {
        fetch: (url, init) => fetch(url, init),
        registry,
        metricPrefix: "authority_sidecar",
        serviceName: "authority-sidecar",
        logger: { warn: () => undefined },
      },
    );
    assert.ok(exporter);
    sidecarExporter = exporter;
    system = await startSystem({
      binding: false,
      decisionExport: {
        url: `${authorityReceiver.url}/v1/logs`,
        format: "otlp",
        maxBuffered: 1000,
        batchSize: 100,
        intervalMs: 20,
        maskFields: [],
        allowSampleRate: 1,
      },
      sidecar: { options: { decisionExport: sidecarExporter, registry } },
    });
    agent = await system.agentToken(AGENT);
  });
  after(async () => {
    await system?.close();
    await authorityReceiver?.close();
    await sidecarReceiver?.close();
  });

  /** Every decision record in the authority's audit log, once the sidecar's and the recorder's queues drained. */
  async function auditRecords(): Promise<DecisionAuditRecord[]> {
    assert.equal(await system.sidecar?.sidecar.flushAudit(10_000), true, "the sidecar's records are sent");
    assert.equal(await system.recorder.flush(10_000), true, "the audit buffer drains");
    const entries = await system.store.readLog<DecisionAuditRecord>(logs.audit, { limit: 10_000 });
    return entries.map((entry) => entry.value);
  }

  it("each record is exported once: the sidecar's by the sidecar, the authority's by the authority", async () => {
    const seqBefore = (await auditRecords()).length;
    assert.equal(await sidecarExporter.flush(10_000), true);
    const received = {
      authority: exported(authorityReceiver).length,
      sidecar: exported(sidecarReceiver).length,
    };
    const sent = sidecarExporter.stats().sent;
    for (let i = 0; i < 3; i++) assert.equal((await system.check({ token: agent })).allowed, true);
    for (let i = 0; i < 2; i++) assert.equal((await system.check({ token: null })).allowed, false);
    assert.equal(
      (await system.authorize({ capability_id: CAPABILITY, method: "GET", path: "/items/7" }, agent)).status,
      200,
    );
    assert.notEqual(
      (await system.authorize({ capability_id: "no-such", method: "GET", path: "/x" }, agent)).status,
      200,
    );
    const records = (await auditRecords()).slice(seqBefore);
    assert.equal(records.length, 7, "every decision recorded");
    const sidecarIds = records.filter((r) => r.transport === "grpc").map((r) => r.id);
    const authorityIds = records.filter((r) => r.transport !== "grpc").map((r) => r.id);
    assert.equal(sidecarIds.length, 5);
    assert.equal(await sidecarExporter.flush(10_000), true);
    assert.ok(
      await eventually(
        async () => exported(authorityReceiver).length >= received.authority + authorityIds.length,
      ),
      "the authority exported its own records",
    );
    // The authority's export had time to (wrongly) export the sidecar's too.
    await system.recorder.flush(1000);
    const bySidecar = exported(sidecarReceiver).slice(received.sidecar);
    assert.deepEqual(
      bySidecar.map((r) => r.id),
      sidecarIds,
      "the sidecar exported its records, in order, once",
    );
    assert.deepEqual(
      exported(authorityReceiver)
        .slice(received.authority)
        .map((r) => r.id),
      authorityIds,
      "the authority exported its own records only, once",
    );
    // The sidecar's settings apply to what it exports.
    assert.ok(bySidecar.every((r) => r.actor === null || r.actor === "****"));
    assert.ok(bySidecar.some((r) => r.actor === "****"));
    assert.equal(sidecarExporter.stats().sent - sent, 5);
  });

  it("the authority exports a sidecar's batch unless the batch says the sidecar exported it", async () => {
    const sidecarToken = await system.agentToken("sidecar-2", { roles: ["sidecar", "sidecar_platform"] });
    const record = (id: string) => ({
      id,
      actor: null,
      subject_id: null,
      partner_id: null,
      capability_id: null,
      method: "GET",
      path: "/x",
      permission_id: null,
      decision: "denied",
      reason: "invalid_token",
      transport: "grpc",
      requestId: id,
      time: new Date().toISOString(),
    });
    const before = exported(authorityReceiver).length;
    const shipped = await system.call("POST", `${system.url}/v1/sidecar/decisions`, {
      token: sidecarToken,
      json: { records: [record("dec_not-exported-1")] },
    });
    assert.equal(shipped.status, 200, shipped.text);
    const shippedExported = await system.call("POST", `${system.url}/v1/sidecar/decisions`, {
      token: sidecarToken,
      json: { exported: true, records: [record("dec_exported-1")] },
    });
    assert.equal(shippedExported.status, 200, shippedExported.text);
    const ids = (await auditRecords()).map((r) => r.id);
    assert.ok(ids.includes("dec_not-exported-1") && ids.includes("dec_exported-1"), "both are stored");
    assert.ok(await eventually(async () => exported(authorityReceiver).length > before));
    await system.recorder.flush(1000);
    assert.deepEqual(
      exported(authorityReceiver)
        .slice(before)
        .map((r) => r.id),
      ["dec_not-exported-1"],
    );
  });

  it("the receiver down and back: nothing lost within the buffer, drops counted beyond it", async () => {
    const before = { received: exported(sidecarReceiver).length, stats: sidecarExporter.stats() };
    const seqBefore = (await auditRecords()).length;
    await sidecarReceiver.down();
    // As many records as the buffer holds, then three more.
    for (let i = 0; i < SIDECAR_BUFFER + 3; i++) await system.check({ token: i % 2 === 0 ? agent : null });
    const stats = sidecarExporter.stats();
    assert.equal(stats.dropped - before.stats.dropped, 3, "the records beyond the buffer are dropped");
    assert.equal(stats.buffered, SIDECAR_BUFFER);
    assert.equal(stats.sent, before.stats.sent, "nothing was sent while the receiver was down");
    await sidecarReceiver.up();
    assert.equal(await sidecarExporter.flush(20_000), true, "the buffer drains once the receiver is back");
    const phase = (await auditRecords()).slice(seqBefore);
    assert.equal(phase.length, SIDECAR_BUFFER + 3, "the authority stored every record");
    const received = exported(sidecarReceiver)
      .slice(before.received)
      .map((r) => r.id);
    assert.deepEqual(
      received,
      phase.slice(0, SIDECAR_BUFFER).map((r) => r.id),
      "the buffered records arrive, in order, once",
    );
    const metrics = await system.call("GET", `http://127.0.0.1:${system.sidecar?.metricsPort}/metrics`);
    assert.match(metrics.text, /authority_sidecar_decision_export_records_total\{outcome="dropped"\} 3/);
    assert.match(metrics.text, /authority_sidecar_decision_export_records_total\{outcome="retried"\} [1-9]/);
  });
});

describe("the sidecar's export is off by default and costs no module", () => {
  it("a sidecar without the setting loads none of the exporter", async () => {
    const script = `
      import { registerHooks } from "node:module";
      const loaded = new Set();
      registerHooks({
        resolve(specifier, context, next) {
          const result = next(specifier, context);
          const hit = /audit\\/export\\/(?!start\\.ts)([^/]+\\.ts)/.exec(result.url);
          if (hit !== null) loaded.add(hit[1]);
          return result;
        },
      });
      await import("./src/servers/sidecar/build.ts");
      const { startDecisionExport } = await import("./src/audit/export/start.ts");
      const { createMetricsRegistry } = await import("./src/observability/metrics.ts");
      const deps = {
        fetch: async () => new Response(),
        registry: createMetricsRegistry({ collectDefaults: false }),
        metricPrefix: "t",
        serviceName: "t",
        logger: { warn() {} },
      };
      await startDecisionExport(undefined, deps);
      const off = [...loaded];
      const config = { url: "http://127.0.0.1:9/v1/logs", format: "otlp", maxBuffered: 1, batchSize: 1,
        intervalMs: 1, maskFields: [], allowSampleRate: 1 };
      const on = await startDecisionExport(config, deps);
      await on.close(10);
      console.log(JSON.stringify({ off, on: [...loaded] }));
    `;
    const { stdout } = await promisify(execFile)(process.execPath, ["--input-type=module", "-e", script], {
      cwd: process.cwd(),
      timeout: 60_000,
    });
    const { off, on } = JSON.parse(stdout.trim().split("\n").at(-1) ?? "{}");
    assert.deepEqual(off, [], "nothing of the exporter is loaded while the export is off");
    assert.ok(on.includes("exporter.ts") && on.includes("configured.ts"), JSON.stringify(on));
  });
});
