/**
 * Attacks on the decision write-ahead file (decision 2931): a symlinked path, a file damaged
 * by a short write, records a dead process could not have written. A start never truncates
 * or overwrites a file it does not own, never crash-loops on a damaged file, and a record
 * appended after damage is still replayed.
 */
import assert from "node:assert/strict";
import fs, { existsSync, readFileSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import {
  CHAINED_LOGS,
  type ChainedLog,
  type ChainHead,
  createChainLinker,
  EMPTY_HEAD,
} from "../../src/audit/chain.ts";
import {
  openStoreWriteAhead,
  openWriteAhead,
  type WriteAhead,
  writeAheadPathFor,
} from "../../src/audit/write-ahead.ts";
import { createAuditWriter } from "../../src/audit/writer.ts";
import { openStore } from "../../src/store/index.ts";
import type { Store } from "../../src/store/store.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

const ids = async (store: Store, log: string): Promise<string[]> =>
  (await store.readLog<{ id?: string }>(log)).map((entry) => entry.value.id ?? "");

const line = (log: string, value: unknown) => `${JSON.stringify({ log, value })}\n`;

describe("decision write-ahead file attacks", () => {
  let dir: TempDir;
  let n = 0;
  const dbPath = () => join(dir.path, `x-${++n}.db`);

  before(async () => {
    dir = await makeTempDir("write-ahead-attacks-");
  });
  after(() => dir.cleanup());

  test("a symlinked file or lock is refused: the file it points to is neither truncated nor overwritten", async () => {
    const path = dbPath();
    const victim = join(dir.path, `victim-${n}`);
    writeFileSync(victim, "precious\n");
    const store = await openStore(`sqlite:${path}`);
    const file = writeAheadPathFor(path, "replica-s");
    symlinkSync(victim, file);
    await assert.rejects(openStoreWriteAhead(store, "replica-s"));
    assert.equal(readFileSync(victim, "utf8"), "precious\n");
    // The lock too: a stale lock that is a symlink (even to a file that never ends) is replaced,
    // not written through.
    const other = join(dir.path, `other-${n}.wal`);
    symlinkSync(victim, `${other}.lock`);
    openWriteAhead(other).writeAhead.close();
    assert.equal(readFileSync(victim, "utf8"), "precious\n");
    symlinkSync("/dev/zero", `${other}.lock`);
    openWriteAhead(other).writeAhead.close();
    await store.close();
  });

  test("the file and its lock are readable by their owner only", async () => {
    const path = dbPath();
    const store = await openStore(`sqlite:${path}`);
    const writeAhead = await openStoreWriteAhead(store, "replica-m");
    assert.ok(writeAhead);
    const file = writeAheadPathFor(path, "replica-m");
    assert.equal(statSync(file).mode & 0o077, 0);
    assert.equal(statSync(`${file}.lock`).mode & 0o077, 0);
    writeAhead.close();
    await store.close();
  });

  test("a record appended after a short write's partial line is still replayed", async (t) => {
    const path = dbPath();
    const file = writeAheadPathFor(path, "replica-p");
    const { writeAhead } = openWriteAhead(file);
    writeAhead.append("audit", { id: "r1" });
    // The kernel takes part of the next line (the disk filled up), then space is freed.
    const write = fs.writeSync;
    t.after(() => {
      fs.writeSync = write;
      syncBuiltinESMExports();
    });
    fs.writeSync = ((fd: number, buffer: Buffer) => write(fd, buffer.subarray(0, 20))) as typeof fs.writeSync;
    syncBuiltinESMExports();
    assert.throws(() => writeAhead.append("audit", { id: "cut" }), /short write/);
    fs.writeSync = write;
    syncBuiltinESMExports();
    writeAhead.append("audit", { id: "r2" });
    writeAhead.close();
    const store = await openStore(`sqlite:${path}`);
    (await openStoreWriteAhead(store, "replica-p"))?.close();
    assert.deepEqual(await ids(store, "audit"), ["r1", "r2"]);
    await store.close();
  });

  test("records the writer never appends (other logs, bad names, no id, too deep to store) are skipped, not a failed start", async () => {
    const path = dbPath();
    const file = writeAheadPathFor(path, "replica-h");
    let deep = '{"id":"deep","x":';
    for (let i = 0; i < 100_000; i++) deep += "[";
    deep += "]".repeat(100_000);
    deep += "}";
    writeFileSync(
      file,
      line("audit", { id: "ok-1" }) +
        line("partners", { id: "acme" }) +
        line("Not A Log!", { id: "bad-name" }) +
        line("audit", { no: "id" }) +
        `{"log":"audit","value":${deep}}\n` +
        line("audit", { id: "ok-2" }),
    );
    const store = await openStore(`sqlite:${path}`);
    (await openStoreWriteAhead(store, "replica-h"))?.close();
    assert.deepEqual(await ids(store, "audit"), ["ok-1", "ok-2"]);
    assert.deepEqual(await ids(store, "partners"), []);
    assert.equal(statSync(file).size, 0);
    await store.close();
  });
});

describe("decision write-ahead file and chains", () => {
  let dir: TempDir;
  before(async () => {
    dir = await makeTempDir("write-ahead-chain-");
  });
  after(() => dir.cleanup());

  test("after an append fails, later records are not answered from the file either: a kill leaves no hole in a chain", async () => {
    const path = join(dir.path, "g.db");
    const store = await openStore(`sqlite:${path}`);
    const file = await openStoreWriteAhead(store, "replica-g");
    assert.ok(file);
    // The disk is full for one append, then has room again.
    let full = true;
    const writeAhead: WriteAhead = {
      append(log, value) {
        if (full) {
          full = false;
          throw new Error("ENOSPC");
        }
        file.append(log, value);
      },
      settled: () => file.settled(),
      close: () => file.close(),
    };
    const heads = Object.fromEntries(CHAINED_LOGS.map((log) => [log, EMPTY_HEAD])) as Record<
      ChainedLog,
      ChainHead
    >;
    const chain = createChainLinker({ stream: "replica-g", heads });
    const writer = createAuditWriter({ store, writeAhead, chain, lingerMs: 60_000 });
    let answered = 0;
    const first = writer.write({ log: { name: "audit", value: { id: "d1" } } }).then(() => answered++);
    const second = writer.write({ log: { name: "audit", value: { id: "d2" } } }).then(() => answered++);
    await Promise.resolve();
    // The process dies now: the next start stores what the file holds. d2 (n = 2) without d1
    // (n = 1, only in memory) would be a chain with a hole; so d2 was not answered either.
    const held = readFileSync(writeAheadPathFor(path, "replica-g"), "utf8")
      .split("\n")
      .filter((line) => line !== "")
      .map((line) => (JSON.parse(line) as { value: { chain: { n: number } } }).value.chain.n);
    assert.deepEqual({ held, answered }, { held: [], answered: 0 });
    await Promise.all([first, second]);
    assert.deepEqual(await ids(store, "audit"), ["d1", "d2"]);
    // Stored: records are written ahead again.
    await writer.write({ log: { name: "audit", value: { id: "d3" } } });
    assert.equal(writer.stats().writtenAhead, 1);
    await writer.close();
    file.close();
    await store.close();
  });
});

describe("decision write-ahead files of other replica ids", () => {
  let dir: TempDir;
  before(async () => {
    dir = await makeTempDir("write-ahead-orphans-");
  });
  after(() => dir.cleanup());

  test("a killed replica's file is stored by the next start under another replica id (a replaced pod's hostname); a live one's is left", async () => {
    const path = join(dir.path, "o.db");
    // The pod that died: its replica id was its hostname, which its replacement does not have.
    const dead = openWriteAhead(writeAheadPathFor(path, "authority-7d9f-abcde"));
    dead.writeAhead.append("audit", { id: "answered-1" });
    dead.writeAhead.append("audit", { id: "answered-2" });
    dead.writeAhead.close();
    // A replica that is running (here: held by this process).
    const live = openWriteAhead(writeAheadPathFor(path, "authority-live"));
    live.writeAhead.append("audit", { id: "live-1" });
    const store = await openStore(`sqlite:${path}`);
    const mine = await openStoreWriteAhead(store, "authority-7d9f-fghij");
    assert.ok(mine);
    assert.deepEqual(await ids(store, "audit"), ["answered-1", "answered-2"]);
    assert.equal(existsSync(writeAheadPathFor(path, "authority-7d9f-abcde")), false, "adopted, then removed");
    assert.ok(readFileSync(writeAheadPathFor(path, "authority-live"), "utf8").includes("live-1"));
    mine.close();
    live.writeAhead.close();
    await store.close();
  });
});
