import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, statSync, watch } from "node:fs";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import { after, before, describe, it } from "node:test";
import { Worker } from "node:worker_threads";
import { openStore, SqliteStore, StoreError } from "../../src/store/index.ts";
import { createCheckpointer } from "../../src/store/sqlite/checkpointer.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";
import { eventually, runStoreContract } from "./contract.ts";

let dir: TempDir;
let files = 0;
before(async () => {
  dir = await makeTempDir("store-sqlite-");
});
after(() => dir.cleanup());

function freshPath(): string {
  files++;
  return join(dir.path, `store-${files}.db`);
}

runStoreContract("sqlite", async () => {
  const store = new SqliteStore({ path: freshPath() });
  return { store, cleanup: () => store.close() };
});

describe("SqliteStore specifics", () => {
  it("writeAll: a write the database refuses undoes the whole batch", async () => {
    const path = freshPath();
    const store = new SqliteStore({ path });
    const raw = new DatabaseSync(path);
    raw.exec(`CREATE TRIGGER refuse_boom BEFORE INSERT ON logs WHEN NEW.value LIKE '%boom%'
      BEGIN SELECT RAISE(ABORT, 'boom'); END`);
    raw.close();
    try {
      await assert.rejects(
        store.writeAll([
          { op: "put", collection: "assignments", id: "a", value: 1 },
          { op: "increment", counters: "n", key: "k" },
          { op: "append", log: "audit", value: "boom" },
        ]),
        StoreError,
      );
      assert.equal(await store.get("assignments", "a"), undefined);
      assert.deepEqual(await store.readCounters("n"), {});
      await store.writeAll([{ op: "put", collection: "assignments", id: "a", value: 2 }]);
      assert.equal(await store.get("assignments", "a"), 2);
    } finally {
      await store.close();
    }
  });

  it("migrates a version 1 file with entries forward: old entries are indexed like new ones", async () => {
    const path = freshPath();
    const raw = new DatabaseSync(path);
    raw.exec(`
      CREATE TABLE store_meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;
      CREATE TABLE documents (collection TEXT NOT NULL, id TEXT NOT NULL, value TEXT NOT NULL,
        expires_at INTEGER, PRIMARY KEY (collection, id)) WITHOUT ROWID;
      CREATE TABLE logs (log TEXT NOT NULL, seq INTEGER NOT NULL, value TEXT NOT NULL,
        PRIMARY KEY (log, seq)) WITHOUT ROWID;
      CREATE TABLE counters (name TEXT NOT NULL, key TEXT NOT NULL, value INTEGER NOT NULL,
        PRIMARY KEY (name, key)) WITHOUT ROWID;
      INSERT INTO store_meta VALUES ('schema_version', '1');
      INSERT INTO documents VALUES
        ('policies', 'p1', '{"large":"${"x".repeat(5000)}"}', NULL),
        ('policies', 'p2', '{"small":true}', NULL),
        ('idempotency', 'k1', '{"kept":1}', 4102444800000),
        ('idempotency', 'k0', '{"gone":1}', 1000);
      INSERT INTO logs VALUES
        ('audit', 1, '{"id":"dec_old","partner_id":"p1","subject_id":"s1","decision":"denied","time":"2026-05-01T00:00:02Z"}'),
        ('audit', 2, '{"id":"dec_old","partner_id":"p2","subject_id":"s2","decision":"allowed","time":"2026-05-01T00:00:01Z"}'),
        ('audit', 3, '"not an object"');
    `);
    raw.close();
    const store = new SqliteStore({ path });
    try {
      assert.equal(
        await store.append("audit", { partner_id: "p1", subject_id: "s1", time: "2026-05-01T00:00:00Z" }),
        4,
      );
      const page = await store.queryLog("audit", { where: { partner_id: "p1" } });
      assert.deepEqual(
        page.entries.map((e) => [e.seq, e.time]),
        [
          [4, Date.parse("2026-05-01T00:00:00Z")],
          [1, Date.parse("2026-05-01T00:00:02Z")],
        ],
      );
      const allowed = await store.queryLog("audit", { where: { decision: "allowed" } });
      assert.deepEqual(
        allowed.entries.map((e) => e.seq),
        [2],
      );
      // An id written before version 3 (even twice) is checked from then on: its first entry holds it.
      assert.equal(await store.append("audit", { id: "dec_old" }), 1);
      assert.equal(await store.logLength("audit"), 4);
      // Version 4 copied the documents into a rowid table: every row, its expiry kept.
      assert.deepEqual(await store.get("policies", "p1"), { large: "x".repeat(5000) });
      assert.deepEqual(
        (await store.list("policies")).items.map((entry) => entry.id),
        ["p1", "p2"],
      );
      assert.deepEqual(await store.get("idempotency", "k1"), { kept: 1 });
      assert.equal(await store.get("idempotency", "k0"), undefined);
      await store.put("policies", "p3", { added: true });
      assert.equal(await store.create("policies", "p2", { again: true }), false);
    } finally {
      await store.close();
    }
    const check = new DatabaseSync(path);
    assert.equal(
      check.prepare("SELECT value FROM store_meta WHERE key = 'schema_version'").get()?.value,
      "4",
    );
    const documents = check.prepare("SELECT sql FROM sqlite_schema WHERE name = 'documents'").get()?.sql;
    assert.doesNotMatch(String(documents), /WITHOUT ROWID/);
    assert.deepEqual(
      check
        .prepare(
          "SELECT name FROM sqlite_schema WHERE tbl_name = 'documents' AND type = 'index' ORDER BY name",
        )
        .all()
        .map((row) => row.name),
      ["documents_expiry", "sqlite_autoindex_documents_1"],
    );
    check.close();
  });

  /** A version 1 file (the schema before any migration) holding `rows` documents of about 3 KB. */
  function versionOneFile(rows: number): string {
    const path = freshPath();
    const raw = new DatabaseSync(path);
    raw.exec(`
      PRAGMA journal_mode = WAL;
      CREATE TABLE store_meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;
      CREATE TABLE documents (collection TEXT NOT NULL, id TEXT NOT NULL, value TEXT NOT NULL,
        expires_at INTEGER, PRIMARY KEY (collection, id)) WITHOUT ROWID;
      CREATE TABLE logs (log TEXT NOT NULL, seq INTEGER NOT NULL, value TEXT NOT NULL,
        PRIMARY KEY (log, seq)) WITHOUT ROWID;
      CREATE TABLE counters (name TEXT NOT NULL, key TEXT NOT NULL, value INTEGER NOT NULL,
        PRIMARY KEY (name, key)) WITHOUT ROWID;
      INSERT INTO store_meta VALUES ('schema_version', '1');`);
    const insert = raw.prepare("INSERT INTO documents VALUES ('policies', ?, ?, NULL)");
    raw.exec("BEGIN");
    for (let i = 0; i < rows; i++) insert.run(`p${i}`, JSON.stringify({ n: i, pad: "x".repeat(3000) }));
    raw.exec("COMMIT");
    raw.close();
    return path;
  }

  const storeUrl = new URL("../../src/store/sqlite/sqlite-store.ts", import.meta.url).href;

  async function allDocuments(path: string): Promise<number[]> {
    const store = new SqliteStore({ path, checkpoint: "inline" });
    try {
      const found: number[] = [];
      let after: string | undefined;
      do {
        const page = await store.list<{ n: number }>("policies", {
          limit: 1000,
          ...(after === undefined ? {} : { after }),
        });
        for (const item of page.items) found.push(item.value.n);
        after = page.next;
      } while (after !== undefined);
      return found.sort((a, b) => a - b);
    } finally {
      await store.close();
    }
  }

  it("attack: two processes opening a file that needs the rowid migration at once both open it, every row once (decision 3181)", async () => {
    const rows = 2000;
    const path = versionOneFile(rows);
    const code = (name: string) => `
      const { SqliteStore } = await import(${JSON.stringify(storeUrl)});
      const store = new SqliteStore({ path: ${JSON.stringify(path)}, checkpoint: "inline" });
      await store.put("policies", ${JSON.stringify(name)}, { n: -1 });
      await store.close();`;
    const children = ["a", "b"].map((name) =>
      spawn(process.execPath, ["--input-type=module", "-e", code(name)], {
        stdio: ["ignore", "inherit", "inherit"],
      }),
    );
    const codes = await Promise.all(
      children.map(async (child) => ((await once(child, "exit")) as [number | null])[0]),
    );
    assert.deepEqual(codes, [0, 0]);
    const found = await allDocuments(path);
    assert.deepEqual(found, [-1, -1, ...Array.from({ length: rows }, (_, i) => i)]);
    const check = new DatabaseSync(path);
    assert.equal(
      check.prepare("SELECT value FROM store_meta WHERE key = 'schema_version'").get()?.value,
      "4",
    );
    check.close();
  });

  it("attack: a process killed during the rowid migration leaves the file at one version or the other, every row readable (decision 3181)", async () => {
    const rows = 4000;
    const path = versionOneFile(rows);
    const child = spawn(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        `const { SqliteStore } = await import(${JSON.stringify(storeUrl)}); new SqliteStore({ path: ${JSON.stringify(path)}, checkpoint: "inline" }); process.stdout.write("open\\n"); setInterval(() => {}, 1000);`,
      ],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    // Killed once the migration has written a part of its copy to the WAL (or, on a fast machine, once it finished).
    const walBytes = () => (existsSync(`${path}-wal`) ? statSync(`${path}-wal`).size : 0);
    let opened = false;
    child.stdout.on("data", () => {
      opened = true;
    });
    await eventually(async () => walBytes() > 2_000_000 || opened, "the migration under way");
    child.kill("SIGKILL");
    await once(child, "exit");
    const raw = new DatabaseSync(path);
    assert.equal(raw.prepare("PRAGMA integrity_check").get()?.integrity_check, "ok");
    assert.ok(
      ["1", "4"].includes(
        String(raw.prepare("SELECT value FROM store_meta WHERE key = 'schema_version'").get()?.value),
      ),
    );
    assert.equal(raw.prepare("SELECT COUNT(*) AS n FROM documents").get()?.n, rows);
    raw.close();
    assert.equal((await allDocuments(path)).length, rows);
  });

  it("a migrated file marked back to version 3 (an older build's way back) is migrated again, every row kept (decision 3181)", async () => {
    const rows = 50;
    const path = versionOneFile(rows);
    assert.equal((await allDocuments(path)).length, rows);
    const raw = new DatabaseSync(path);
    raw.exec("UPDATE store_meta SET value = '3' WHERE key = 'schema_version'");
    raw.close();
    assert.equal((await allDocuments(path)).length, rows);
    const check = new DatabaseSync(path);
    assert.equal(
      check.prepare("SELECT value FROM store_meta WHERE key = 'schema_version'").get()?.value,
      "4",
    );
    assert.doesNotMatch(
      String(check.prepare("SELECT sql FROM sqlite_schema WHERE name = 'documents'").get()?.sql),
      /WITHOUT ROWID/,
    );
    check.close();
  });

  it("attack: a process killed mid-batch (statement journals in memory) keeps every acknowledged batch whole and no part of another (decision 3181)", async () => {
    const path = freshPath();
    // Batches that spill a statement journal past 64 KiB: 40 documents of 3 KB, an append and a count each.
    const code = `
      const { SqliteStore } = await import(${JSON.stringify(storeUrl)});
      const store = new SqliteStore({ path: ${JSON.stringify(path)}, checkpoint: "inline" });
      for (let b = 1; ; b++) {
        const writes = Array.from({ length: 40 }, (_, i) => ({ op: "put", collection: "results", id: "b" + b + "-" + i, value: { b, pad: "x".repeat(3000) } }));
        writes.push({ op: "append", log: "evidence", value: { b } }, { op: "increment", counters: "batches", key: "n" });
        await store.writeAll(writes);
        process.stdout.write(b + "\\n");
      }`;
    const acknowledged = await killedOnceAcknowledged(code, 60, "60 batches acknowledged");
    const store = new SqliteStore({ path, checkpoint: "inline" });
    try {
      const batches = (await store.readCounters("batches")).n ?? 0;
      assert.ok(batches >= acknowledged, `${batches} batches stored, ${acknowledged} acknowledged`);
      assert.equal(await store.logLength("evidence"), batches);
      assert.equal(
        await store.count("results"),
        batches * 40,
        "every stored batch whole, no part of another",
      );
    } finally {
      await store.close();
    }
  });

  it("refuses a file of a newer schema version and leaves it as it was (decision 3181)", async () => {
    const path = freshPath();
    (await openStore(`sqlite://${path}`)).close();
    const raw = new DatabaseSync(path);
    raw.exec("UPDATE store_meta SET value = '99' WHERE key = 'schema_version'");
    raw.close();
    assert.throws(
      () => new SqliteStore({ path, checkpoint: "inline" }),
      (error: unknown) => error instanceof StoreError && /newer than this build/.test(error.message),
    );
    const after = new DatabaseSync(path);
    assert.equal(
      after.prepare("SELECT value FROM store_meta WHERE key = 'schema_version'").get()?.value,
      "99",
    );
    after.close();
  });

  it("keeps data in the file across close and reopen, in WAL mode", async () => {
    const path = freshPath();
    const first = new SqliteStore({ path });
    await first.put("docs", "a", { kept: true });
    await first.append("log", "one");
    await first.increment("usage", "k", 4);
    await first.close();
    assert.ok(existsSync(path));
    const raw = new DatabaseSync(path);
    assert.equal(raw.prepare("PRAGMA journal_mode").get()?.journal_mode, "wal");
    raw.close();
    const second = new SqliteStore({ path });
    assert.deepEqual(await second.get("docs", "a"), { kept: true });
    assert.equal(await second.append("log", "two"), 2);
    assert.deepEqual(await second.readCounters("usage"), { k: 4 });
    await second.close();
  });

  it("shares one file between connections: seqs, counters and creates stay exact", async () => {
    const path = freshPath();
    const a = new SqliteStore({ path });
    const b = new SqliteStore({ path });
    const seqs = await Promise.all(
      Array.from({ length: 100 }, (_, i) => (i % 2 ? a : b).append("shared", i)),
    );
    assert.deepEqual(
      [...seqs].sort((x, y) => x - y),
      Array.from({ length: 100 }, (_, i) => i + 1),
    );
    assert.equal(await a.create("c", "once", "a"), true);
    assert.equal(await b.create("c", "once", "b"), false);
    assert.equal(await b.get("c", "once"), "a");
    await a.close();
    await b.close();
  });

  it("keeps seqs, counters and creates exact across worker threads writing at once", async () => {
    const path = freshPath();
    await new SqliteStore({ path, sweepIntervalMs: 0 }).close();
    const workers = 4;
    const count = 100;
    const results = await Promise.all(
      Array.from(
        { length: workers },
        (_, worker) =>
          new Promise<number[]>((resolve, reject) => {
            const thread = new Worker(new URL("./sqlite-worker.ts", import.meta.url), {
              workerData: { path, count, worker },
            });
            thread.once("message", resolve);
            thread.once("error", reject);
          }),
      ),
    );
    const all = results.flat().sort((x, y) => x - y);
    assert.deepEqual(
      all,
      Array.from({ length: workers * count }, (_, i) => i + 1),
    );
    for (const seqs of results) {
      assert.deepEqual(
        seqs,
        [...seqs].sort((x, y) => x - y),
        "each writer sees its own seqs increase",
      );
    }
    const store = new SqliteStore({ path });
    assert.equal(await store.logLength("shared"), workers * count);
    assert.deepEqual(await store.readCounters("shared"), { total: count * (1 + 2 + 3 + 4) });
    assert.equal(await store.count("winners"), count);
    await store.close();
  });

  it("fails with StoreUnavailableError while another connection holds the write lock", async () => {
    const path = freshPath();
    const store = new SqliteStore({ path, busyTimeoutMs: 50 });
    const holder = new DatabaseSync(path);
    holder.exec("BEGIN IMMEDIATE");
    try {
      await assert.rejects(store.put("c", "k", 1), (error: unknown) => {
        assert.ok(error instanceof StoreError);
        assert.equal(error.code, "store_unavailable");
        return true;
      });
      assert.equal(await store.get("c", "k"), undefined, "reads still work in WAL mode");
    } finally {
      holder.exec("ROLLBACK");
      holder.close();
    }
    await store.put("c", "k", 1);
    assert.equal(await store.get("c", "k"), 1);
    await store.close();
  });

  it("sweeps expired rows out of the file", async () => {
    const path = freshPath();
    const store = new SqliteStore({ path, sweepIntervalMs: 0 });
    for (let i = 0; i < 1200; i++) await store.put("tmp", `t${i}`, i, { ttlMs: 20 });
    await store.put("tmp", "stay", 1);
    await eventually(async () => (await store.count("tmp")) === 1, "documents expire");
    assert.equal(store.sweepExpired(), 1200);
    const raw = new DatabaseSync(path);
    assert.equal(raw.prepare("SELECT COUNT(*) AS n FROM documents").get()?.n, 1);
    raw.close();
    await store.close();
  });

  it("opens from a sqlite: URL, creating parent directories", async () => {
    const path = join(dir.path, "nested", "deeper", "authority.db");
    const store = await openStore(`sqlite:${path}`);
    assert.equal(store.backend, "sqlite");
    await store.put("c", "k", "v");
    await store.close();
    assert.ok(existsSync(path));
    const again = await openStore(`sqlite://${path}`);
    assert.equal(await again.get("c", "k"), "v");
    await again.close();
  });

  it("refuses unknown store URLs without echoing them", async () => {
    for (const url of ["mysql://user:hunter2@db/x", "sqlite:", "sqlite://relative.db", ""]) {
      await assert.rejects(openStore(url), (error: unknown) => {
        assert.ok(error instanceof StoreError);
        assert.equal(error.code, "store_invalid_argument");
        assert.ok(!error.message.includes("hunter2"));
        return true;
      });
    }
  });

  it("checkpoints on a thread of its own, and what was written stays in the file", async () => {
    const path = freshPath();
    const store = new SqliteStore({ path, walAutocheckpointPages: 16 });
    for (let i = 0; i < 200; i++) await store.appendMany("audit", [{ id: `r${i}`, n: i }]);
    await eventually(async () => store.checkpointStats().completed > 0, "a checkpoint on the thread");
    assert.ok(store.checkpointStats().requested >= store.checkpointStats().completed);
    await store.close();
    const reopened = new SqliteStore({ path, checkpoint: "inline" });
    assert.equal(await reopened.logLength("audit"), 200);
    assert.deepEqual(reopened.checkpointStats(), { requested: 0, completed: 0 });
    await reopened.close();
  });

  it("attack: a process killed while its checkpoint thread works keeps every append it acknowledged", async () => {
    const path = freshPath();
    const storeUrl = new URL("../../src/store/sqlite/sqlite-store.ts", import.meta.url).href;
    // Appends one record at a time (a checkpoint on the thread every 2 transactions) and says each seq once stored.
    const code = `
      const { SqliteStore } = await import(${JSON.stringify(storeUrl)});
      const store = new SqliteStore({ path: ${JSON.stringify(path)}, walAutocheckpointPages: 16 });
      for (let i = 1; ; i++) process.stdout.write(String(await store.appendMany("audit", [{ id: "r" + i }])) + "\\n");`;
    const acknowledged = await killedOnceAcknowledged(code, 1000, "1,000 appends acknowledged");
    const reopened = new SqliteStore({ path, checkpoint: "inline" });
    assert.ok((await reopened.logLength("audit")) >= acknowledged, "no acknowledged append is lost");
    await reopened.close();
  });

  it("a batch transaction writes no temporary file (statement journals stay in memory)", async () => {
    const path = freshPath();
    const tmp = await makeTempDir("store-sqlite-tmp-");
    try {
      const storeUrl = new URL("../../src/store/sqlite/sqlite-store.ts", import.meta.url).href;
      // Batches of records that each touch every log index: the statement journals of one
      // transaction pass SQLite's 64 KiB spill threshold, which used to write them to a file.
      const code = `
        const { SqliteStore } = await import(${JSON.stringify(storeUrl)});
        const store = new SqliteStore({ path: ${JSON.stringify(path)}, checkpoint: "inline" });
        const record = (b, i) => ({ id: "r" + b + "-" + i, partner_id: "p" + i, subject_id: "s" + (i * 7919 % 1000),
          capability_id: "c" + (i % 13), decision: i % 2 ? "allowed" : "denied", reason: "r" + (i % 5), pad: "x".repeat(400) });
        for (let b = 0; b < 10; b++) {
          await store.appendAcross(Array.from({ length: 100 }, (_, i) => ({ log: i % 2 ? "audit" : "evidence", value: record(b, i) })));
          await store.writeAll(Array.from({ length: 50 }, (_, i) => ({ op: "put", collection: "docs", id: "d" + b + "-" + i, value: { pad: "y".repeat(600) } })));
        }
        await store.close();`;
      const created: string[] = [];
      const watcher = watch(tmp.path, (_event, name) => created.push(String(name)));
      try {
        const child = spawn(process.execPath, ["--input-type=module", "-e", code], {
          stdio: ["ignore", "inherit", "inherit"],
          // Where SQLite puts its temporary files (read once, when the process starts it).
          env: { ...process.env, SQLITE_TMPDIR: tmp.path },
        });
        const [exitCode] = (await once(child, "exit")) as [number | null];
        assert.equal(exitCode, 0);
      } finally {
        watcher.close();
      }
      assert.deepEqual(created, [], "no temporary file was created");
      const reopened = new SqliteStore({ path, checkpoint: "inline" });
      assert.equal(await reopened.logLength("audit"), 500);
      await reopened.close();
    } finally {
      await tmp.cleanup();
    }
  });

  it("a checkpoint thread that cannot open the file hands the checkpoints back to the writer", async () => {
    let failed = 0;
    const checkpointer = createCheckpointer({
      path: join(dir.path, "missing-dir", "none.db"),
      busyTimeoutMs: 100,
      everyPages: 1,
      onFailure: () => failed++,
    });
    checkpointer.wrote(1);
    await eventually(async () => failed === 1, "the failure reported");
    checkpointer.wrote(5);
    assert.equal(checkpointer.stats().requested, 1, "nothing more is asked of a failed thread");
    await checkpointer.close();
  });

  it("validates its options", () => {
    assert.throws(() => new SqliteStore({ path: "" }), StoreError);
    assert.throws(() => new SqliteStore({ path: freshPath(), busyTimeoutMs: -1 }), StoreError);
    assert.throws(() => new SqliteStore({ path: freshPath(), sweepIntervalMs: 1.5 }), StoreError);
    assert.throws(() => new SqliteStore({ path: freshPath(), walAutocheckpointPages: 0 }), StoreError);
    assert.throws(() => new SqliteStore({ path: freshPath(), checkpoint: "later" as "thread" }), StoreError);
  });
});

/**
 * Runs `code` in a child that prints one acknowledged count per line, kills it with SIGKILL once
 * `count` are acknowledged, and returns the highest it printed.
 */
async function killedOnceAcknowledged(code: string, count: number, what: string): Promise<number> {
  const child = spawn(process.execPath, ["--input-type=module", "-e", code], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  let acknowledged = 0;
  let buffered = "";
  child.stdout.on("data", (chunk: Buffer) => {
    buffered += chunk.toString();
    const lines = buffered.split("\n");
    buffered = lines.pop() ?? "";
    for (const line of lines) acknowledged = Math.max(acknowledged, Number(line));
  });
  await eventually(async () => acknowledged >= count, what);
  child.kill("SIGKILL");
  await once(child, "exit");
  return acknowledged;
}
