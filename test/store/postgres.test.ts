import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { inspect } from "node:util";
import pg from "pg";
import { openStore, PostgresStore, StoreError } from "../../src/store/index.ts";
import { LATEST_VERSION, migrate, migrations } from "../../src/store/postgres/migrations.ts";
import { canary } from "../helpers/canary.ts";
import { startFaultProxy } from "../helpers/fault-proxy.ts";
import { type PostgresServerHandle, startPostgresServer } from "../helpers/postgres-server.ts";
import { stablePort } from "../helpers/stable-port.ts";
import { eventually, runStoreContract } from "./contract.ts";

let server: PostgresServerHandle;
let schemas = 0;
before(async () => {
  server = await startPostgresServer();
});
after(() => server.stop());

/** The server's URL with a password (a canary: trust authentication accepts any) and a fresh schema. */
async function freshSchemaUrl(password?: string): Promise<{ url: string; schema: string }> {
  schemas++;
  const schema = `s${schemas}`;
  await server.psql(`CREATE SCHEMA ${schema}`);
  const base = new URL(server.url);
  if (password !== undefined) base.password = password;
  base.searchParams.set("options", `-c search_path=${schema}`);
  return { url: base.toString(), schema };
}

async function rawClient(): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: server.url });
  await client.connect();
  return client;
}

/** Counts the document reads (by key) the process sends while `during` runs. */
async function countingGets<R>(during: () => Promise<R>): Promise<{ result: R; queries: number }> {
  const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = proto.query;
  let queries = 0;
  proto.query = function (this: unknown, ...args: unknown[]) {
    const text = typeof args[0] === "string" ? args[0] : (args[0] as { text?: string } | undefined)?.text;
    if (text?.includes("JOIN authority_documents")) queries++;
    return original.apply(this, args);
  };
  try {
    return { result: await during(), queries };
  } finally {
    proto.query = original;
  }
}

function assertUnavailable(secret?: string) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof StoreError, `expected a StoreError, got ${String(error)}`);
    assert.equal(error.code, "store_unavailable", error.message);
    if (secret !== undefined) {
      assert.ok(!error.message.includes(secret), "message must not reveal the password");
      assert.ok(
        !inspect(error, { depth: 8 }).includes(secret),
        "the error and its causes must not reveal it",
      );
    }
    return true;
  };
}

runStoreContract("postgres", async () => {
  const { url } = await freshSchemaUrl();
  const store = await PostgresStore.open({ url, sweepIntervalMs: 0 });
  return { store, cleanup: () => store.close() };
});

describe("PostgresStore specifics", () => {
  it("opens from postgres:// and postgresql:// URLs and records its migrations once", async () => {
    const { url, schema } = await freshSchemaUrl();
    const store = await openStore(url);
    assert.equal(store.backend, "postgres");
    await store.put("c", "k", "v");
    await store.close();
    const again = await openStore(url.replace(/^postgres:/, "postgresql:"));
    assert.equal(await again.get("c", "k"), "v");
    assert.match((await again.health()).detail, new RegExp(`ready \\(schema v${LATEST_VERSION}\\)`));
    await again.close();
    assert.equal(
      await server.psql(
        `SELECT string_agg(version::text, ',' ORDER BY version) FROM ${schema}.authority_schema_migrations`,
      ),
      migrations.map((m) => m.version).join(","),
    );
  });

  it("migrates once when several replicas start at the same moment", async () => {
    const { url, schema } = await freshSchemaUrl();
    const replicas = Array.from({ length: 5 }, () => new PostgresStore({ url, sweepIntervalMs: 0 }));
    try {
      const results = await Promise.all(replicas.map((replica) => replica.migrate()));
      assert.deepEqual(
        results.map((r) => r.version),
        Array.from({ length: 5 }, () => LATEST_VERSION),
      );
      assert.equal(results.filter((r) => r.applied.length > 0).length, 1, "exactly one replica applied");
      assert.equal(
        await server.psql(`SELECT count(*) FROM ${schema}.authority_schema_migrations`),
        String(migrations.length),
      );
      assert.deepEqual(
        await Promise.all(replicas.map((r, i) => r.append("log", i))).then((s) => s.sort()),
        [1, 2, 3, 4, 5],
      );
    } finally {
      await Promise.all(replicas.map((replica) => replica.close()));
    }
  });

  it("migrates a version 1 database with entries forward: old entries are indexed like new ones", async () => {
    const { url, schema } = await freshSchemaUrl();
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await migrate(client as unknown as pg.PoolClient, 30_000, migrations.slice(0, 1));
      await client.query(
        `INSERT INTO authority_log_heads (log, seq) VALUES ('audit', 3);
         INSERT INTO authority_logs (log, seq, value) VALUES
           ('audit', 1, '{"id":"dec_old","partner_id":"p1","subject_id":"s1","decision":"denied","time":"2026-05-01T00:00:02Z"}'),
           ('audit', 2, '{"id":"dec_old","partner_id":"p2","subject_id":"s2","decision":"allowed","time":"2026-05-01T00:00:01Z"}'),
           ('audit', 3, '"not an object"')`,
      );
    } finally {
      await client.end();
    }
    const store = await PostgresStore.open({ url, sweepIntervalMs: 0 });
    try {
      assert.deepEqual(
        store.migration?.applied,
        migrations.slice(1).map((m) => m.version),
      );
      assert.equal(
        await store.append("audit", { partner_id: "p1", subject_id: "s1", time: "2026-05-01T00:00:00Z" }),
        4,
      );
      const page = await store.queryLog<{ subject_id: string }>("audit", { where: { partner_id: "p1" } });
      assert.deepEqual(
        page.entries.map((e) => [e.seq, e.time]),
        [
          [4, Date.parse("2026-05-01T00:00:00Z")],
          [1, Date.parse("2026-05-01T00:00:02Z")],
        ],
      );
      assert.deepEqual(
        (await store.queryLog("audit", { where: { decision: "allowed" } })).entries.map((e) => e.seq),
        [2],
      );
      assert.equal(
        await server.psql(`SELECT count(*) FROM ${schema}.authority_logs WHERE time_ms = 0`),
        "1",
        "only the entry without a time has none",
      );
      // An id written before version 3 (even twice) is checked from then on: its first entry holds it.
      assert.equal(await store.append("audit", { id: "dec_old" }), 1);
      assert.equal(await store.logLength("audit"), 4);
    } finally {
      await store.close();
    }
  });

  it("groups concurrent gets into few queries; a get asked after a write committed sees it", async () => {
    const { url } = await freshSchemaUrl();
    const store = await PostgresStore.open({ url, sweepIntervalMs: 0, poolSize: 2 });
    try {
      await Promise.all(Array.from({ length: 50 }, (_, i) => store.put("docs", `d${i}`, { i })));
      const { result: values, queries } = await countingGets(() =>
        Promise.all(Array.from({ length: 200 }, (_, i) => store.get("docs", `d${i % 60}`))),
      );
      assert.deepEqual(
        values,
        Array.from({ length: 200 }, (_, i) => (i % 60 < 50 ? { i: i % 60 } : undefined)),
      );
      // One query in flight at most (half the pool of 2): the other reads went in groups.
      assert.ok(queries >= 1 && queries < 20, `${queries} queries for 200 reads`);
      // A read asked while others are in flight, after a write answered, sees the write.
      const racing = Array.from({ length: 20 }, () => store.get("docs", "d1"));
      await store.put("docs", "d1", { i: "revoked" });
      assert.deepEqual(await store.get("docs", "d1"), { i: "revoked" });
      await Promise.all(racing);
    } finally {
      await store.close();
    }
  });

  it("writeAll: a write the database refuses undoes the whole batch", async () => {
    const { url, schema } = await freshSchemaUrl();
    const store = await PostgresStore.open({ url, sweepIntervalMs: 0 });
    try {
      await server.psql(`
        CREATE FUNCTION ${schema}.refuse_boom() RETURNS trigger LANGUAGE plpgsql AS
          $$ BEGIN IF NEW.value LIKE '%boom%' THEN RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END $$;
        CREATE TRIGGER refuse_boom BEFORE INSERT ON ${schema}.authority_logs
          FOR EACH ROW EXECUTE FUNCTION ${schema}.refuse_boom();`);
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
      assert.equal(await store.logLength("audit"), 0, "the log head rolled back too");
      await store.writeAll([
        { op: "put", collection: "assignments", id: "a", value: 2 },
        { op: "append", log: "audit", value: "fine" },
      ]);
      assert.equal(await store.get("assignments", "a"), 2);
      assert.deepEqual(await store.readLog("audit"), [{ seq: 1, value: "fine" }]);
    } finally {
      await store.close();
    }
  });

  it("writeAll: puts to distinct documents are one statement, all or none; a repeated document runs as a transaction", async () => {
    const { url, schema } = await freshSchemaUrl();
    const store = await PostgresStore.open({ url, sweepIntervalMs: 0 });
    const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
    const original = proto.query;
    const sent: string[] = [];
    try {
      await server.psql(`
        CREATE FUNCTION ${schema}.refuse_boom() RETURNS trigger LANGUAGE plpgsql AS
          $$ BEGIN IF NEW.value LIKE '%boom%' THEN RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END $$;
        CREATE TRIGGER refuse_boom BEFORE INSERT OR UPDATE ON ${schema}.authority_documents
          FOR EACH ROW EXECUTE FUNCTION ${schema}.refuse_boom();`);
      proto.query = function (this: unknown, ...args: unknown[]) {
        const text = typeof args[0] === "string" ? args[0] : (args[0] as { text?: string }).text;
        sent.push(String(text).trim().split(/\s+/)[0] ?? "");
        return original.apply(this, args);
      };
      await store.writeAll([
        { op: "put", collection: "results", id: "k1", value: { done: 1 }, ttlMs: 60_000 },
        { op: "put", collection: "evidence", id: "e1", value: { ok: true } },
      ]);
      assert.deepEqual(sent, ["INSERT"], "one statement, no BEGIN/COMMIT");
      assert.deepEqual(await store.get("results", "k1"), { done: 1 });
      assert.deepEqual(await store.get("evidence", "e1"), { ok: true });
      assert.equal(
        await server.psql(`SELECT expires_at IS NOT NULL FROM ${schema}.authority_documents WHERE id = 'k1'`),
        "t",
      );
      await assert.rejects(
        store.writeAll([
          { op: "put", collection: "results", id: "k2", value: 2 },
          { op: "put", collection: "evidence", id: "e1", value: "boom" },
        ]),
        StoreError,
      );
      assert.equal(await store.get("results", "k2"), undefined, "nothing of the refused batch");
      assert.deepEqual(await store.get("evidence", "e1"), { ok: true });
      sent.length = 0;
      await store.writeAll([
        { op: "put", collection: "results", id: "k3", value: 1 },
        { op: "put", collection: "results", id: "k3", value: 2 },
      ]);
      assert.equal(sent[0], "BEGIN");
      assert.equal(await store.get("results", "k3"), 2, "in order: the last put wins");
    } finally {
      proto.query = original;
      await store.close();
    }
  });

  it("refuses a database migrated by a newer build", async () => {
    const { url, schema } = await freshSchemaUrl();
    await (await openStore(url)).close();
    await server.psql(
      `INSERT INTO ${schema}.authority_schema_migrations (version, name) VALUES (999, 'future')`,
    );
    await assert.rejects(openStore(url), (error: unknown) => {
      assert.ok(error instanceof StoreError);
      assert.match(error.message, /version 999, newer than this build/);
      return true;
    });
  });

  it("fails a statement stuck behind a lock with store_unavailable, then serves again", async () => {
    const { url, schema } = await freshSchemaUrl();
    const store = await PostgresStore.open({ url, statementTimeoutMs: 500, sweepIntervalMs: 0 });
    const holder = await rawClient();
    try {
      await store.put("c", "k", 1);
      await holder.query("BEGIN");
      await holder.query(`LOCK TABLE ${schema}.authority_documents IN ACCESS EXCLUSIVE MODE`);
      await assert.rejects(store.put("c", "k", 2), assertUnavailable());
      await assert.rejects(store.get("c", "k"), assertUnavailable());
      await holder.query("ROLLBACK");
      assert.equal(await store.get("c", "k"), 1);
      await store.put("c", "k", 3);
      assert.equal(await store.get("c", "k"), 3);
    } finally {
      await holder.end();
      await store.close();
    }
  });

  it("recovers when the server drops its connections mid-run", async () => {
    const { url } = await freshSchemaUrl();
    const store = await PostgresStore.open({ url, applicationName: "authority-drop", sweepIntervalMs: 0 });
    try {
      await Promise.all(Array.from({ length: 8 }, (_, i) => store.put("c", `k${i}`, i)));
      const killed = await server.psql(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'authority-drop') t",
      );
      assert.ok(Number(killed) >= 1, `terminated ${killed} sessions`);
      // Reads retry past every dropped connection the pool still holds: no caller sees them.
      assert.deepEqual(
        await Promise.all(Array.from({ length: 8 }, (_, i) => store.get("c", `k${i}`))),
        [0, 1, 2, 3, 4, 5, 6, 7],
      );
      await eventually(async () => {
        try {
          return (await store.append("log", "after")) >= 1;
        } catch {
          return false;
        }
      }, "writes work again");
      assert.equal((await store.health()).ok, true);
    } finally {
      await store.close();
    }
  });

  it("a read passes every pooled connection that died unnoticed, then runs on a fresh one", async () => {
    const { url } = await freshSchemaUrl();
    const proxy = await startFaultProxy(server.port);
    const proxied = new URL(url);
    proxied.port = String(proxy.port);
    const store = await PostgresStore.open({ url: proxied.toString(), poolSize: 4, sweepIntervalMs: 0 });
    try {
      await Promise.all(Array.from({ length: 8 }, (_, i) => store.put("c", `k${i}`, i)));
      assert.ok(proxy.accepted() >= 3, `${proxy.accepted()} connections opened`);
      // Every pooled connection is dead, and the pool has not noticed any of them.
      proxy.cutAllSilently();
      assert.equal(await store.get("c", "k5"), 5);
      assert.equal(await store.count("c"), 8);
      // A write on a dead connection is not retried: it may have committed.
      proxy.cutAllSilently();
      await assert.rejects(store.put("c", "k9", 9), assertUnavailable());
    } finally {
      await store.close();
      await proxy.close();
    }
  });

  it("keeps to its pool size under concurrent load", async () => {
    const { url } = await freshSchemaUrl();
    const store = await PostgresStore.open({ url, poolSize: 2, applicationName: "authority-pool" });
    try {
      const sessions = async () =>
        Number(
          await server.psql(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'authority-pool'",
          ),
        );
      let most = 0;
      let done = false;
      const load = Promise.all(Array.from({ length: 200 }, (_, i) => store.append("log", i))).finally(() => {
        done = true;
      });
      while (!done) most = Math.max(most, await sessions());
      await load;
      assert.ok(most <= 2, `at most 2 sessions, saw ${most}`);
      assert.equal(await store.logLength("log"), 200);
    } finally {
      await store.close();
    }
  });

  it("fails at open when the server is unreachable, never naming the password", async () => {
    const password = canary("pg-");
    const port = await stablePort("127.0.0.1");
    const url = `postgres://authority:${password}@127.0.0.1:${port}/authority`;
    await assert.rejects(
      openStore(url, { postgres: { connectTimeoutMs: 500 } }),
      assertUnavailable(password),
    );
  });

  it("bounds calls to a server that stops answering, and never names the password", async () => {
    const password = canary("pg-");
    const { url } = await freshSchemaUrl(password);
    const proxy = await startFaultProxy(server.port);
    const proxied = new URL(url);
    proxied.port = String(proxy.port);
    const store = await PostgresStore.open({
      url: proxied.toString(),
      // Generous enough for a loaded machine while the proxy passes, short while it hangs.
      statementTimeoutMs: 1000,
      connectTimeoutMs: 1000,
      sweepIntervalMs: 0,
    });
    try {
      await store.put("c", "k", 1);
      const up = await store.health();
      assert.equal(up.ok, true);
      assert.ok(!up.detail.includes(password), up.detail);
      proxy.mode = "hang";
      proxy.dropAll();
      await assert.rejects(store.get("c", "k"), assertUnavailable(password));
      await assert.rejects(store.append("log", 1), assertUnavailable(password));
      const down = await store.health();
      assert.equal(down.ok, false);
      assert.ok(!down.detail.includes(password), down.detail);
      proxy.mode = "pass";
      await eventually(async () => (await store.health()).ok, "answers again");
      assert.equal(await store.get("c", "k"), 1);
    } finally {
      await store.close();
      await proxy.close();
    }
  });

  it("validates its options and URL without echoing it", async () => {
    assert.throws(() => new PostgresStore({ url: "postgres://h/db", poolSize: 0 }), StoreError);
    assert.throws(() => new PostgresStore({ url: "postgres://h/db", statementTimeoutMs: 1.5 }), StoreError);
    assert.throws(
      () => new PostgresStore({ url: "postgres://h/db", applicationName: "bad name" }),
      StoreError,
    );
    for (const url of ["postgres://user:hunter2@", "postgres://user:hunter2@:5432/x"]) {
      await assert.rejects(openStore(url), (error: unknown) => {
        assert.ok(error instanceof StoreError);
        assert.equal(error.code, "store_invalid_argument");
        assert.ok(!error.message.includes("hunter2"));
        return true;
      });
    }
  });
});
