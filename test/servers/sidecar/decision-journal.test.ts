import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { appendFileSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { ShippedDecision } from "../../../src/audit/shipped-decisions.ts";
import { openDecisionJournal } from "../../../src/servers/sidecar/decision-journal.ts";
import {
  auditedEngine,
  createDecisionShipper,
  settleDecision,
} from "../../../src/servers/sidecar/decision-log.ts";
import type { SidecarDecision, SidecarEngine, SidecarRequest } from "../../../src/servers/sidecar/engine.ts";
import { SidecarConfigError } from "../../../src/servers/sidecar/errors.ts";
import { makeTempDir, type TempDir } from "../../helpers/temp-dir.ts";

/**
 * The write-ahead journal of decision records (docs/decisions/2501-decision-records-written-ahead.md):
 * written before the decision is answered, released once delivered, read back by the next
 * process — each record once, as its last line — and never a second live owner.
 */

const request = (transport: "grpc" | "proxy", requestId: string): SidecarRequest => ({
  transport,
  authorization: undefined,
  capabilityId: "orders",
  host: "orders.internal",
  method: "GET",
  path: "/orders/1",
  requestId,
});

const allowOf = (requestId: string): SidecarDecision =>
  ({
    allow: true,
    requestId,
    subjectId: "agent-1",
    partnerId: "acme",
    capabilityId: "orders",
    permissionId: "orders:get:/orders/{orderId}",
  }) as SidecarDecision;

const segments = (dir: string): string[] => readdirSync(dir).filter((name) => name.endsWith(".jsonl"));
const lines = (dir: string): string[] =>
  segments(dir).flatMap((name) =>
    readFileSync(join(dir, name), "utf8")
      .split("\n")
      .filter((line) => line !== ""),
  );

describe("the decision journal", () => {
  let tmp: TempDir;
  before(async () => {
    tmp = await makeTempDir("decision-journal-");
  });
  after(async () => {
    await tmp.cleanup();
  });

  /** A shipper with a journal whose authority takes nothing until `open()` (records stay queued). */
  const setup = (dir: string) => {
    const delivered: ShippedDecision[] = [];
    let taking = false;
    const journal = openDecisionJournal({ dir, syncIntervalMs: 10 });
    const shipper = createDecisionShipper({
      journal,
      flushIntervalMs: 5,
      retryMs: 5,
      send: async (batch) => {
        if (!taking) throw Object.assign(new Error("authority away"), { status: 503 });
        delivered.push(...(JSON.parse(batch.toString("utf8")) as ShippedDecision[]));
      },
    });
    const decisions: SidecarDecision[] = [];
    const engine: SidecarEngine = {
      decide: (req) => {
        const decision = allowOf(req.requestId);
        decisions.push(decision);
        return decision;
      },
      authorize: async () => {
        throw new Error("unused");
      },
    };
    return {
      journal,
      shipper,
      engine: auditedEngine(engine, shipper),
      delivered,
      decisions,
      open: () => {
        taking = true;
      },
    };
  };

  it("writes each record before the decision is returned, and ships it from the next process", async () => {
    const dir = join(tmp.path, "ahead");
    const first = setup(dir);
    first.engine.decide(request("grpc", "grpc-allow-1"));
    // Written by the time the decision came back: nothing is answered before its record is on disk.
    assert.equal(lines(dir).length, 1);
    assert.equal(JSON.parse(lines(dir)[0] ?? "{}").requestId, "grpc-allow-1");
    first.engine.decide(request("proxy", "proxy-allow-1"));
    first.engine.decide(request("proxy", "proxy-refused-1"));
    const refused = first.decisions.at(-1);
    assert.ok(refused);
    settleDecision(refused, "upstream_unavailable");
    // The process dies here (no close, no flush): the next one opens the same directory.
    const second = setup(dir);
    assert.deepEqual(
      second.journal.recovered.map((r) => {
        const record = JSON.parse(r.json) as ShippedDecision;
        return [record.requestId, record.decision, record.reason];
      }),
      [
        ["grpc-allow-1", "allowed", null],
        // Written ahead, outcome never known: shipped as the allow that reached the upstream.
        ["proxy-allow-1", "allowed", null],
        // Written again with its outcome: the last line of its id wins.
        ["proxy-refused-1", "denied", "upstream_unavailable"],
      ],
    );
    second.open();
    assert.equal(await second.shipper.flush(5000), true);
    assert.deepEqual(
      second.delivered.map((r) => r.requestId),
      ["grpc-allow-1", "proxy-allow-1", "proxy-refused-1"],
    );
    // Delivered: the earlier process's segments are gone.
    assert.deepEqual(lines(dir), []);
    second.journal.close();
  });

  it("releases delivered records and deletes a segment once all of its records are delivered", async () => {
    const dir = join(tmp.path, "release");
    const journal = openDecisionJournal({ dir, segmentBytes: 200 });
    const tickets = Array.from({ length: 6 }, (_, i) =>
      journal.append(JSON.stringify({ id: `r${i}`, pad: "x".repeat(80) })),
    );
    assert.ok(segments(dir).length >= 3, `rotated: ${segments(dir).join(",")}`);
    for (const ticket of tickets.slice(0, 4)) journal.release(ticket);
    assert.deepEqual(
      lines(dir).map((line) => JSON.parse(line).id),
      ["r4", "r5"],
    );
    journal.close();
    const next = openDecisionJournal({ dir });
    assert.deepEqual(
      next.recovered.map((r) => JSON.parse(r.json).id),
      ["r4", "r5"],
    );
    next.close();
  });

  it("skips a line cut short by the death of the process", () => {
    const dir = join(tmp.path, "cut");
    const journal = openDecisionJournal({ dir });
    journal.append(JSON.stringify({ id: "whole" }));
    journal.close();
    const [name] = segments(dir);
    assert.ok(name);
    appendFileSync(join(dir, name), '{"id":"cut-sh');
    const next = openDecisionJournal({ dir });
    assert.deepEqual(
      next.recovered.map((r) => JSON.parse(r.json).id),
      ["whole"],
    );
    next.close();
  });

  it("an allow whose record cannot be written is answered 503 instead", async () => {
    const shipper = createDecisionShipper({ send: async () => undefined });
    const failing = {
      ...shipper,
      writeAhead: () => {
        throw new Error("ENOSPC");
      },
    };
    const errors: Error[] = [];
    const engine = auditedEngine(
      { decide: (req) => allowOf(req.requestId), authorize: async () => allowOf("x") },
      failing,
      undefined,
      (error) => errors.push(error),
    );
    for (const transport of ["grpc", "proxy"] as const) {
      const decision = engine.decide(request(transport, `${transport}-no-disk`)) as SidecarDecision;
      assert.equal(decision.allow, false);
      assert.equal(!decision.allow && decision.reason, "upstream_unavailable");
    }
    // Decided later (nothing cached): the same.
    const later = auditedEngine(
      { decide: async (req) => allowOf(req.requestId), authorize: async () => allowOf("x") },
      failing,
      undefined,
      (error) => errors.push(error),
    );
    const decided = await later.decide(request("grpc", "grpc-no-disk-later"));
    assert.equal(decided.allow, false);
    assert.equal(errors.length, 3);
  });

  it("one live process per directory; a dead owner's directory is taken over", async () => {
    const dir = join(tmp.path, "lock");
    const journal = openDecisionJournal({ dir });
    // Another live process holds it.
    const other = spawn(process.execPath, ["-e", "setTimeout(() => {}, 60000)"]);
    try {
      journal.close();
      writeFileSync(join(dir, "lock"), String(other.pid));
      assert.throws(() => openDecisionJournal({ dir }), SidecarConfigError);
    } finally {
      const exited = new Promise((resolve) => other.once("exit", resolve));
      other.kill("SIGKILL");
      await exited;
    }
    const taken = openDecisionJournal({ dir });
    assert.equal(readFileSync(join(dir, "lock"), "utf8"), String(process.pid));
    taken.close();
  });
});
