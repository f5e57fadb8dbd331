import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs, {
  appendFileSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import { join } from "node:path";
import { after, before, describe, it, mock } from "node:test";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import type { ShippedDecision } from "../../../src/audit/shipped-decisions.ts";
import {
  denyOf,
  type SidecarDecision,
  type SidecarEngine,
  type SidecarRequest,
} from "../../../src/pipeline/check.ts";
import { auditedEngine } from "../../../src/pipeline/check-record.ts";
import {
  JournalFullError,
  type JournalTicket,
  openDecisionJournal,
} from "../../../src/servers/sidecar/decision-journal.ts";
import { createDecisionShipper } from "../../../src/servers/sidecar/decision-log.ts";
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

/** Counts the intervals alive (set and not cleared) until `restore()`. */
function watchIntervals() {
  const live = new Set<unknown>();
  const { setInterval: realSet, clearInterval: realClear } = globalThis;
  globalThis.setInterval = ((...args: Parameters<typeof setInterval>) => {
    const timer = realSet(...args);
    live.add(timer);
    return timer;
  }) as typeof setInterval;
  globalThis.clearInterval = ((timer: Parameters<typeof clearInterval>[0]) => {
    live.delete(timer);
    realClear(timer);
  }) as typeof clearInterval;
  const restore = (): void => {
    globalThis.setInterval = realSet;
    globalThis.clearInterval = realClear;
  };
  return { live, realSet, restore };
}

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

  it("a written line's ticket holds nothing of its turn's write until it is released", async () => {
    // The tickets live until the authority has the records (a flush interval or more): whatever
    // they hold outlives the young generation and is promoted, to be swept by a full collection.
    setFlagsFromString("--expose-gc");
    const collect = runInNewContext("gc") as () => void;
    const journal = openDecisionJournal({ dir: join(tmp.path, "written-tickets") });
    const first = journal.append('{"id":"dec_1"}');
    const second = journal.append('{"id":"dec_2"}');
    const turn = await (async () => {
      const landing = journal.written(first);
      assert.ok(landing !== undefined);
      await landing;
      return new WeakRef(landing);
    })();
    assert.equal(journal.written(first), undefined);
    await new Promise((resolve) => setImmediate(resolve));
    collect();
    assert.equal(turn.deref(), undefined, "the write's promise is still held by its unreleased tickets");
    journal.release(first);
    journal.release(second);
    journal.close();
  });

  it("writes each record before the decision is returned, and ships it from the next process", async () => {
    const dir = join(tmp.path, "ahead");
    const first = setup(dir);
    await first.engine.decide(request("grpc", "grpc-allow-1"));
    // Written by the time the decision came back: nothing is answered before its record is on disk.
    assert.equal(lines(dir).length, 1);
    assert.equal(JSON.parse(lines(dir)[0] ?? "{}").requestId, "grpc-allow-1");
    await first.engine.decide(request("proxy", "proxy-allow-1"));
    const refused = await first.engine.decide(request("proxy", "proxy-refused-1"));
    assert.ok(refused.allow && refused.settle !== undefined);
    refused.settle("upstream_unavailable");
    // The outcome's line is written at the end of the turn.
    await new Promise((resolve) => setImmediate(resolve));
    // The process dies here (no close, no flush): the next one opens the same directory.
    const second = setup(dir);
    assert.equal(second.journal.recoveredCount, 3);
    second.open();
    assert.equal(await second.shipper.flush(5000), true);
    assert.deepEqual(
      second.delivered.map((record) => [record.requestId, record.decision, record.reason]),
      [
        ["grpc-allow-1", "allowed", null],
        // Written ahead, outcome never known: shipped as the allow that reached the upstream.
        ["proxy-allow-1", "allowed", null],
        // Written again with its outcome: the last line of its id wins.
        ["proxy-refused-1", "denied", "upstream_unavailable"],
      ],
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
    await journal.written(tickets[5] as JournalTicket);
    for (const ticket of tickets.slice(0, 4)) journal.release(ticket);
    assert.deepEqual(
      lines(dir).map((line) => JSON.parse(line).id),
      ["r4", "r5"],
    );
    journal.close();
    const next = openDecisionJournal({ dir });
    assert.deepEqual(
      [...next.recovered].map((r) => JSON.parse(r.json).id),
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
      [...next.recovered].map((r) => JSON.parse(r.json).id),
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

  it("a segment larger than a string can hold does not stop the start; the records around it are replayed", () => {
    const dir = join(tmp.path, "huge");
    mkdirSync(dir, { recursive: true });
    // An earlier segment of 540 MB (sparse: no disk used) ending in two records, and one beside it.
    const huge = join(dir, "decisions-1.jsonl");
    writeFileSync(huge, '{"id":"before-the-gap"}\n');
    truncateSync(huge, 540 * 1024 * 1024);
    appendFileSync(huge, '\n{"id":"after-the-gap-1"}\n{"id":"after-the-gap-2"}\n');
    writeFileSync(join(dir, "decisions-2.jsonl"), '{"id":"next-segment"}\n');
    // Not a regular file: never read (it would never end).
    symlinkSync("/dev/zero", join(dir, "decisions-3.jsonl"));
    const journal = openDecisionJournal({ dir });
    assert.deepEqual(
      [...journal.recovered].map((r) => JSON.parse(r.json).id),
      ["before-the-gap", "after-the-gap-1", "after-the-gap-2", "next-segment"],
    );
    journal.close();
  });

  it("the journal stays within its byte cap: past it an allow is answered 503, a deny still answered (attack: an authority away made it grow without end)", async () => {
    const dir = join(tmp.path, "cap");
    const maxBytes = 64 * 1024;
    const journal = openDecisionJournal({ dir, maxBytes });
    // The authority takes nothing: every record stays, as in an outage.
    const shipper = createDecisionShipper({
      journal,
      maxPending: 1_000_000,
      send: async () => {
        throw Object.assign(new Error("authority away"), { status: 503 });
      },
    });
    const unwritten: Error[] = [];
    let allow = true;
    const engine = auditedEngine(
      {
        decide: (req) => (allow ? allowOf(req.requestId) : denyOf("missing_policy", req.requestId)),
        authorize: async () => allowOf("x"),
      },
      shipper,
      undefined,
      (error) => unwritten.push(error),
    );
    const answers: SidecarDecision[] = [];
    for (let i = 0; i < 1000; i++) answers.push(await engine.decide(request("grpc", `capped-${i}`)));
    const onDisk = segments(dir).reduce((sum, name) => sum + statSync(join(dir, name)).size, 0);
    assert.ok(onDisk <= maxBytes, `${onDisk} bytes on disk, cap ${maxBytes}`);
    assert.equal(journal.bytes(), onDisk);
    const allowed = answers.filter((answer) => answer.allow).length;
    assert.ok(allowed > 0 && allowed === lines(dir).length, "every allow has its line; no allow without one");
    assert.equal(answers.at(-1)?.allow, false);
    const refused = answers.at(-1);
    assert.equal(refused?.allow === false && refused.reason, "upstream_unavailable");
    assert.ok(unwritten.length > 0 && unwritten.every((error) => error instanceof JournalFullError));
    // A deny takes nothing away: still answered as decided.
    allow = false;
    const deny = await engine.decide(request("grpc", "capped-deny"));
    assert.equal(!deny.allow && deny.reason, "missing_policy");
    journal.close();
  });

  it("segments rotate below what a start can read; a larger segment or a cap below a segment is refused", () => {
    assert.throws(
      () => openDecisionJournal({ dir: join(tmp.path, "big"), segmentBytes: 65 * 1024 * 1024 }),
      SidecarConfigError,
    );
    assert.throws(
      () => openDecisionJournal({ dir: join(tmp.path, "small"), maxBytes: 1000 }),
      SidecarConfigError,
    );
  });

  it("records of one event-loop turn are written together, each decision answered only once its record is written", async () => {
    const dir = join(tmp.path, "group");
    const { engine, journal } = setup(dir);
    const pending = Array.from({ length: 20 }, (_, i) => engine.decide(request("grpc", `group-${i}`)));
    // Nothing is written within the turn, so nothing may be answered yet.
    assert.equal(lines(dir).length, 0);
    for (const decision of pending) {
      assert.ok(decision instanceof Promise, "an answer waits for its record's write");
      void decision.then(() => assert.equal(lines(dir).length, 20, "answered after the turn's write"));
    }
    const answered = await Promise.all(pending);
    assert.ok(answered.every((decision) => decision.allow));
    journal.close();
  });

  it("when the turn's write fails, every allow of that turn is answered 503", async () => {
    const dir = join(tmp.path, "group-full");
    mkdirSync(dir, { recursive: true });
    const { engine, journal } = setup(dir);
    // The segment the journal opens next is a disk that is always full.
    const [name] = segments(dir);
    assert.equal(name, undefined);
    symlinkSync("/dev/full", join(dir, "decisions-1.jsonl"));
    const answers = await Promise.all(
      Array.from({ length: 5 }, (_, i) => engine.decide(request("grpc", `full-${i}`))),
    );
    assert.deepEqual(
      answers.map((answer) => !answer.allow && answer.reason),
      Array(5).fill("upstream_unavailable"),
    );
    // The next turn writes to a fresh segment.
    const after = await engine.decide(request("grpc", "after-full"));
    assert.equal(after.allow, true);
    journal.close();
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
  it("an idle journal holds no timer: the periodic sync runs only while written bytes wait for it (issue 30, idle CPU)", async () => {
    const { live, realSet, restore } = watchIntervals();
    const dir = join(tmp.path, "idle-timer");
    mkdirSync(dir);
    const journal = openDecisionJournal({ dir, syncIntervalMs: 5 });
    try {
      assert.equal(live.size, 0, "opened, nothing written: no timer");
      const ticket = journal.append(JSON.stringify({ request_id: "r-1" }));
      await journal.written(ticket);
      assert.equal(live.size, 1, "written bytes: the sync timer runs");
      for (let i = 0; i < 100 && live.size > 0; i++) await new Promise((resolve) => realSet(resolve, 5));
      assert.equal(live.size, 0, "synced and nothing new: the timer stopped");
      journal.append(JSON.stringify({ request_id: "r-2" }));
      await new Promise((resolve) => setImmediate(resolve));
      assert.equal(live.size, 1, "the next write starts it again");
    } finally {
      journal.close();
      restore();
    }
    assert.equal(live.size, 0, "closed: no timer");
  });

  it("a periodic sync that fails is tried again, also when the timer stopped while it ran", async () => {
    const { live, realSet, restore } = watchIntervals();
    const realSync = fs.fdatasync;
    let held: ((error: NodeJS.ErrnoException | null) => void) | undefined;
    let syncs = 0;
    // The first sync is held (a slow disk), then fails (EIO); the others are real.
    const syncMock = mock.method(
      fs,
      "fdatasync",
      (fd: number, callback: (e: NodeJS.ErrnoException | null) => void) => {
        syncs++;
        if (syncs === 1) held = callback;
        else realSync(fd, callback);
      },
    );
    syncBuiltinESMExports();
    const dir = join(tmp.path, "failed-sync");
    mkdirSync(dir);
    const journal = openDecisionJournal({ dir, syncIntervalMs: 5 });
    try {
      await journal.written(journal.append(JSON.stringify({ request_id: "r-1" })));
      for (let i = 0; i < 200 && (held === undefined || live.size > 0); i++)
        await new Promise((resolve) => realSet(resolve, 5));
      assert.ok(held !== undefined, "the first sync started");
      assert.equal(live.size, 0, "nothing written since: the timer stopped while the sync ran");
      held(Object.assign(new Error("EIO: i/o error, fdatasync"), { code: "EIO" }));
      for (let i = 0; i < 200 && syncs < 2; i++) await new Promise((resolve) => realSet(resolve, 5));
      assert.equal(syncs >= 2, true, "the written bytes are synced again after the failure");
    } finally {
      journal.close();
      syncMock.mock.restore();
      syncBuiltinESMExports();
      restore();
    }
  });
});
