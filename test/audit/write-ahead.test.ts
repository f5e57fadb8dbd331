/**
 * Decision records written ahead beside a SQLite store (decision 2931): a waited-for record
 * is taken once appended to the write-ahead file, stored with the next records, and a process
 * killed in between loses nothing — its next start stores what the file holds.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { createAuditRecorder } from "../../src/audit/recorder.ts";
import {
  openStoreWriteAhead,
  openWriteAhead,
  readingAfterRecords,
  WriteAheadLockedError,
  writeAheadPathFor,
} from "../../src/audit/write-ahead.ts";
import { createAuditWriter } from "../../src/audit/writer.ts";
import { resolveAuthorityConfig } from "../../src/config/authority.ts";
import { createLogger } from "../../src/observability/logger.ts";
import { buildAuthorityService } from "../../src/servers/authority/build.ts";
import { openStore } from "../../src/store/index.ts";
import type { Store } from "../../src/store/store.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));

const ids = async (store: Store, log: string): Promise<string[]> =>
  (await store.readLog<{ id?: string }>(log)).map((entry) => entry.value.id ?? "");

/** An allowed decision, as every runtime path records one. */
const allowed = (requestId: string) => ({
  actor: "agent-1",
  subject_id: "agent-1",
  partner_id: "acme",
  capability_id: "items",
  method: "GET",
  path: "/items/1",
  permission_id: "items:get:/items/{id}",
  decision: "allowed" as const,
  reason: null,
  transport: "mcp" as const,
  requestId,
  time: new Date(),
});

describe("decision records written ahead", () => {
  let dir: TempDir;
  let n = 0;
  const dbPath = () => join(dir.path, `a-${++n}.db`);

  before(async () => {
    dir = await makeTempDir("write-ahead-");
  });
  after(() => dir.cleanup());

  test("a record is taken once written ahead, stored with the next ones, then the file is emptied", async () => {
    const path = dbPath();
    const store = await openStore(`sqlite:${path}`);
    const writeAhead = await openStoreWriteAhead(store, "replica-a");
    assert.ok(writeAhead);
    const recorder = createAuditRecorder({ store, writeAhead, lingerMs: 60_000 });
    const first = await recorder.record(allowed("req_1"));
    const second = await recorder.record(allowed("req_2"));
    // Answered on the write-ahead file: not in the store yet, both lines in the file.
    assert.deepEqual(await ids(store, "audit"), []);
    const file = writeAheadPathFor(path, "replica-a");
    const lines = readFileSync(file, "utf8").trim().split("\n");
    assert.deepEqual(
      lines.map((line) => (JSON.parse(line) as { value: { id: string } }).value.id),
      [first.id, second.id],
    );
    assert.equal(recorder.stats().writtenAhead, 2);
    assert.equal(await recorder.flush(5000), true);
    assert.deepEqual(await ids(store, "audit"), [first.id, second.id]);
    assert.equal(statSync(file).size, 0, "emptied once everything written ahead is stored");
    await recorder.close();
    writeAhead.close();
    await store.close();
  });

  test("a log read through the store its readers get stores what waits first", async () => {
    const store = await openStore(`sqlite:${dbPath()}`);
    const writeAhead = await openStoreWriteAhead(store, "replica-b");
    assert.ok(writeAhead);
    const recorder = createAuditRecorder({ store, writeAhead, lingerMs: 60_000 });
    const readers = readingAfterRecords(store, () => recorder.flush(5000));
    const record = await recorder.record(allowed("req_read"));
    assert.deepEqual(
      (await readers.queryLog<{ id: string }>("audit", {})).entries.map((entry) => entry.value.id),
      [record.id],
    );
    assert.deepEqual(await readers.logIdsHeld("audit", [record.id]), [record.id]);
    await recorder.close();
    writeAhead.close();
    await store.close();
  });

  test("a record that cannot be written ahead waits for the store instead", async () => {
    const store = await openStore(`sqlite:${dbPath()}`);
    const writeAhead = await openStoreWriteAhead(store, "replica-c");
    assert.ok(writeAhead);
    writeAhead.close(); // every append now fails
    const writer = createAuditWriter({ store, writeAhead, lingerMs: 60_000 });
    await writer.write({ log: { name: "audit", value: { id: "rec-1" } } });
    assert.deepEqual(await ids(store, "audit"), ["rec-1"], "stored before write resolved");
    assert.equal(writer.stats().writtenAhead, 0);
    await writer.close();
    await store.close();
  });

  test("records left by a dead process are stored once, in order, however often the file is replayed", async () => {
    const path = dbPath();
    const file = writeAheadPathFor(path, "replica-d");
    const line = (id: string) => `${JSON.stringify({ log: "audit", value: { id, kind: "decision" } })}\n`;
    // A damaged line longer than a read (1 MiB) and one that is not JSON are skipped, r2 is read
    // across a chunk boundary, and the last line, cut by a crash of the machine, is skipped.
    const mib = 1 << 20;
    writeFileSync(
      file,
      `${line("r1")}${"x".repeat(mib + 500)}\n${"y".repeat(mib - 600)}\n${line("r2")}{"log":"audit","val`,
    );
    const store = await openStore(`sqlite:${path}`);
    (await openStoreWriteAhead(store, "replica-d"))?.close();
    assert.deepEqual(await ids(store, "audit"), ["r1", "r2"]);
    assert.equal(statSync(file).size, 0);
    // r1 stored but still in the file (the process died before emptying it): not stored twice.
    writeFileSync(file, `${line("r1")}${line("r3")}`);
    (await openStoreWriteAhead(store, "replica-d"))?.close();
    assert.deepEqual(await ids(store, "audit"), ["r1", "r2", "r3"]);
    await store.close();
  });

  test("a file held by a live process is not opened by another", async (t) => {
    const file = join(dir.path, "held.wal");
    const sleeper = spawn(process.execPath, ["-e", "setTimeout(() => {}, 60000)"], { stdio: "ignore" });
    t.after(() => sleeper.kill("SIGKILL"));
    writeFileSync(`${file}.lock`, String(sleeper.pid));
    assert.throws(() => openWriteAhead(file), WriteAheadLockedError);
    sleeper.kill("SIGKILL");
    await new Promise((resolve) => sleeper.once("exit", resolve));
    // Its owner is gone: taken over.
    const { writeAhead } = openWriteAhead(file);
    assert.equal(readFileSync(`${file}.lock`, "utf8").split(" ")[0], String(process.pid));
    // Nor twice in one process (two authorities of one replica on one file).
    assert.throws(() => openWriteAhead(file), WriteAheadLockedError);
    writeAhead.close();
    // A lock naming this pid that this process does not hold is an earlier one's (pid reused).
    writeFileSync(`${file}.lock`, String(process.pid));
    openWriteAhead(file).writeAhead.close();
  });

  test("SIGKILL right after an allowed decision was answered loses no record: the next start stores it", async () => {
    const path = dbPath();
    // The process records through the store, write-ahead file and recorder the authority
    // composes, with a linger long enough that the store cannot have the record when it dies.
    const script = `
      import { openStore } from ${JSON.stringify(join(ROOT, "src/store/index.ts"))};
      import { openStoreWriteAhead } from ${JSON.stringify(join(ROOT, "src/audit/write-ahead.ts"))};
      import { createAuditRecorder } from ${JSON.stringify(join(ROOT, "src/audit/recorder.ts"))};
      import { createChainLinker, EMPTY_HEAD } from ${JSON.stringify(join(ROOT, "src/audit/chain.ts"))};
      const store = await openStore(${JSON.stringify(`sqlite:${path}`)});
      const writeAhead = await openStoreWriteAhead(store, "replica-1");
      const chain = createChainLinker({ stream: "replica-1", heads: { audit: EMPTY_HEAD, mcp_audit: EMPTY_HEAD, evidence: EMPTY_HEAD } });
      const recorder = createAuditRecorder({ store, writeAhead, chain, lingerMs: 600000 });
      const record = await recorder.record(${JSON.stringify(allowed("req_killed"))});
      process.stdout.write("answered " + record.id + "\\n");
      setInterval(() => {}, 1000);
    `;
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: "pipe" });
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    let output = "";
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const id = await new Promise<string>((resolve, reject) => {
      child.stdout.on("data", (chunk: Buffer) => {
        output += chunk.toString();
        const match = /answered (\S+)\n/.exec(output);
        if (match?.[1] !== undefined) {
          child.kill("SIGKILL");
          resolve(match[1]);
        }
      });
      child.once("exit", () => reject(new Error(`the recording process ended: ${stderr}`)));
    });
    await exited;
    const store = await openStore(`sqlite:${path}`);
    try {
      assert.deepEqual(await ids(store, "audit"), [], "the store never had it: the process died first");
    } finally {
      await store.close();
    }
    // The authority's next start on the same file stores it before it serves.
    const config = resolveAuthorityConfig({
      flags: {
        listen: "127.0.0.1:0",
        store: `sqlite:${path}`,
        "kek-file": join(dir.path, "kek"),
        "init-kek": "true",
        "policy-protection": "embedded",
        issuer: "http://127.0.0.1:9/issuer",
        "service-identity": "write-ahead-test",
      },
      env: { AUTHORITY_REPLICA_ID: "replica-1" },
    });
    const authority = await buildAuthorityService(config, { logger: createLogger("write-ahead", "silent") });
    try {
      const stored = await authority.context.store.readLog<{ id: string; decision: string; chain?: unknown }>(
        "audit",
      );
      assert.deepEqual(
        stored.map((entry) => [entry.value.id, entry.value.decision]),
        [[id, "allowed"]],
      );
      assert.ok(stored[0]?.value.chain, "stored as it was linked into its chain");
    } finally {
      await authority.close();
    }
  });
});
