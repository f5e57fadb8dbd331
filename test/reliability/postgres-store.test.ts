/**
 * The authority service on a PostgreSQL store, end to end: the same runtime paths the SQLite
 * and Redis systems serve (authorize, invoke with an idempotency key, admin writes, the audit
 * view), every decision's record in PostgreSQL; a server that drops every connection
 * mid-run, and a statement stuck behind a lock: requests fail closed within the statement
 * timeout, the service recovers by itself. `serve` with an unreachable PostgreSQL never
 * becomes ready and never prints the URL's password.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import pg from "pg";
import type { DecisionAuditRecord } from "../../src/audit/records.ts";
import { logs } from "../../src/store/model.ts";
import { canary } from "../helpers/canary.ts";
import { type PostgresServerHandle, startPostgresServer } from "../helpers/postgres-server.ts";
import { stablePort } from "../helpers/stable-port.ts";
import { ALLOWED, CAPABILITY, PARTNER, SECOND_AGENT, type System, startSystem } from "../helpers/system.ts";
import { eventually } from "../store/contract.ts";

const allowedOp = { capability_id: CAPABILITY, method: "GET", path: "/items/7" };
const deniedOp = { capability_id: CAPABILITY, method: "GET", path: "/items" };

describe("the authority service on a PostgreSQL store", () => {
  let server: PostgresServerHandle;
  let system: System;
  let password: string;

  before(async () => {
    server = await startPostgresServer();
    password = canary("pg-");
    const url = new URL(server.url);
    url.password = password; // trust authentication accepts it; the leak watch looks for it
    system = await startSystem({ storeUrl: url.toString() });
  });

  after(async () => {
    await system?.close();
    await server?.stop();
  });

  test("serves decisions, invokes, admin writes and the audit view, each record in PostgreSQL", async () => {
    assert.equal(system.store.backend, "postgres");
    const agent = await system.agentToken();
    const before = await system.store.logLength(logs.audit);
    assert.equal((await system.authorize(allowedOp, agent)).status, 200);
    assert.equal((await system.authorize(deniedOp, agent)).status, 403);
    const key = `key-${Date.now()}`;
    const first = await system.invoke(allowedOp, { key });
    assert.equal(first.status, 200);
    const replay = await system.invoke(allowedOp, { key });
    assert.equal(replay.status, 200);
    const admin = await system.adminToken();
    const grant = await system.call(
      "PUT",
      `${system.url}/partners/${PARTNER}/caab/subjects/${SECOND_AGENT}/policies/${CAPABILITY}`,
      { token: admin, json: { allowed_permission_ids: [...ALLOWED], ttl_seconds: 1800 } },
    );
    assert.equal(grant.status, 200, grant.text);
    assert.equal(await system.recorder.flush(10_000), true);
    const entries = await system.store.readLog<DecisionAuditRecord>(logs.audit, {
      afterSeq: before,
      limit: 1000,
    });
    const decisions = entries.map((e) => e.value).filter((v) => v.kind === "decision");
    assert.ok(decisions.some((d) => d.decision === "allowed"));
    assert.ok(decisions.some((d) => d.decision === "denied"));
    assert.ok(entries.some((e) => (e.value as { kind: string }).kind === "policy_change"));
    const view = await system.call("GET", `${system.url}/admin/audit?kind=policy_change&limit=5`, {
      token: admin,
    });
    assert.equal(view.status, 200, view.text);
    assert.ok(Number(await server.psql("SELECT count(*) FROM authority_logs")) >= entries.length);
  });

  test("fails closed while PostgreSQL drops every connection, then recovers by itself", async () => {
    const agent = await system.agentToken();
    assert.equal((await system.authorize(allowedOp, agent)).status, 200);
    await server.psql(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'",
    );
    // A read retries once on a fresh connection, a write never (it may have committed): a
    // decision whose record meets a pooled connection not yet known dead fails closed (503),
    // and the pool replaces the dead connections by itself.
    await eventually(async () => {
      const status = (await system.authorize(allowedOp, agent)).status;
      assert.ok(status === 200 || status === 503, `status ${status}`);
      return status === 200;
    }, "allowed again");
    await eventually(async () => {
      const ready = await system.call("GET", `${system.url}/readyz`);
      return ready.status === 200;
    }, "ready again");
    system.scanLogs();
  });
});

describe("a PostgreSQL statement stuck behind a lock", () => {
  test("fails the decision closed (503 upstream_unavailable) within the statement timeout, then serves again", async () => {
    const server = await startPostgresServer();
    const url = new URL(server.url);
    const system = await startSystem({ storeUrl: url.toString() });
    const holder = new pg.Client({ connectionString: server.url });
    try {
      const agent = await system.agentToken();
      assert.equal((await system.authorize(allowedOp, agent)).status, 200);
      await holder.connect();
      await holder.query("BEGIN");
      await holder.query("LOCK TABLE authority_documents IN ACCESS EXCLUSIVE MODE");
      const stuck = await system.authorize(allowedOp, agent, 30_000);
      assert.equal(stuck.status, 503, stuck.text);
      assert.deepEqual([stuck.json.status, stuck.json.reason], ["denied", "upstream_unavailable"]);
      // The default statement timeout (5 s) plus the client's margin; never an unbounded wait.
      assert.ok(stuck.elapsedMs < 12_000, `answered in ${stuck.elapsedMs} ms`);
      await holder.query("ROLLBACK");
      assert.equal((await system.authorize(allowedOp, agent)).status, 200);
    } finally {
      await holder.end().catch(() => undefined);
      await system.close();
      await server.stop();
    }
  });
});

describe("authority serve with an unreachable PostgreSQL", () => {
  test("exits at start, never ready, naming the server but not the password", async () => {
    const password = canary("pg-");
    const port = await stablePort("127.0.0.1");
    const wrapper = fileURLToPath(new URL("../../bin/authority", import.meta.url));
    const outcome = await promisify(execFile)(
      wrapper,
      [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--policy-protection",
        "embedded",
        "--store",
        `postgres://authority:${password}@127.0.0.1:${port}/authority`,
      ],
      { timeout: 60_000, env: { ...process.env, AUTHORITY_KEK: Buffer.alloc(32, 7).toString("base64") } },
    ).then(
      ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
      (error: { code: number; stdout: string; stderr: string }) => error,
    );
    assert.equal(outcome.code, 1);
    assert.match(
      outcome.stderr,
      new RegExp(`PostgreSQL at 127\\.0\\.0\\.1:${port}/authority is unavailable`),
    );
    assert.doesNotMatch(outcome.stdout, /listening/);
    assert.ok(!`${outcome.stdout}${outcome.stderr}`.includes(password));
  });
});
