/**
 * Faults with real processes, part 1: Redis. The authority service runs on a real Redis
 * store (append-only file, so a restarted server has its data back, as a real one would);
 * the sidecar keeps its verified-policy cache in a second Redis. Each Redis is stopped,
 * frozen (SIGSTOP) and brought back while every runtime path is exercised: during the
 * fault every affected request is denied with its documented answer within its bound,
 * after it the system recovers by itself within the bound of docs/security.md, and no
 * audit record of a decision made during the outage is lost.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { DecisionAuditRecord } from "../../src/audit/records.ts";
import { USAGE_COUNTERS } from "../../src/audit/usage.ts";
import { logs } from "../../src/store/model.ts";
import type { HttpReply } from "../helpers/http-client.ts";
import { type RedisServerHandle, startRedisServer } from "../helpers/redis-server.ts";
import { assertNoLeaks, assertWithin, newCounts, report } from "../helpers/suite-report.ts";
import {
  ALLOWED,
  CAPABILITY,
  type ExtAuthzAnswer,
  PARTNER,
  recoveryTime,
  SECOND_AGENT,
  type System,
  startSystem,
} from "../helpers/system.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

/** docs/security.md, "Recovery bounds". */
const STORE_DOWN_ANSWER_MS = 5_000;
const STORE_HUNG_ANSWER_MS = 12_000;
const STORE_RECOVERY_MS = 10_000;
const SIDECAR_ANSWER_MS = 3_000;
const SIDECAR_STALENESS_MS = 1_000;
const SIDECAR_RECOVERY_MS = 5_000;
const AUDIT_FLUSH_MS = 20_000;

const counts = newCounts();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const allowedOp = { capability_id: CAPABILITY, method: "GET", path: "/items/7" };
const deniedOp = { capability_id: CAPABILITY, method: "GET", path: "/items" };
const unknownOp = { capability_id: CAPABILITY, method: "GET", path: "/nowhere" };
const invokeOp = { capability_id: CAPABILITY, method: "GET", path: "/items/7" };

/** The request id an ext_authz answer carries (allow: its header; deny: its body). */
function checkRequestId(answer: ExtAuthzAnswer): string | undefined {
  if (answer.allowed) {
    const headers: Array<{ header?: { key?: string; value?: string } }> =
      answer.response?.ok_response?.headers ?? [];
    return headers.find((option) => option.header?.key === "x-authority-request-id")?.header?.value;
  }
  return (JSON.parse(answer.response?.denied_response?.body ?? "{}") as { requestId?: string }).requestId;
}

describe("faults: Redis under the authority store and the sidecar cache", () => {
  let aof: TempDir;
  let storeRedis: RedisServerHandle;
  let cacheRedis: RedisServerHandle;
  let system: System;
  let agent: string;
  let getItemTool: string;

  before(async () => {
    aof = await makeTempDir("reliability-aof-");
    storeRedis = await startRedisServer({
      args: ["--appendonly", "yes", "--appendfsync", "always", "--dir", aof.path],
    });
    cacheRedis = await startRedisServer();
    system = await startSystem({ storeUrl: storeRedis.url, sidecar: { redisUrl: cacheRedis.url } });
    agent = await system.agentToken();
    const listed = await system.mcp("tools/list", {}, agent);
    const names: string[] = listed.json.result.tools.map((tool: { name: string }) => tool.name);
    const found = names.find((name) => name.startsWith("getItem"));
    assert.ok(found, `getItem tool listed: ${names.join(", ")}`);
    getItemTool = found;
    // Warm every path once, so the faults below hit a running system.
    assert.equal((await system.authorize(allowedOp, agent)).status, 200);
    assert.equal((await system.invoke(invokeOp)).status, 200);
    assert.equal((await system.check({ token: agent })).allowed, true);
  });

  after(async () => {
    await system?.close();
    await storeRedis?.stop();
    await cacheRedis?.stop();
    await aof?.cleanup();
  });

  /** Decision records after `afterSeq`, once Redis took the buffered ones. */
  async function decisionsAfter(afterSeq: number): Promise<DecisionAuditRecord[]> {
    // The sidecar hands its records to the authority within ≈ 100 ms; then the authority's buffer drains.
    assert.equal(
      await system.sidecar?.sidecar.flushAudit(AUDIT_FLUSH_MS),
      true,
      "the sidecar's records are sent",
    );
    assert.equal(await system.recorder.flush(AUDIT_FLUSH_MS), true, "the audit buffer drains after recovery");
    const entries = await system.store.readLog<DecisionAuditRecord>(logs.audit, { afterSeq, limit: 5000 });
    return entries.map((entry) => entry.value).filter((value) => value.kind === "decision");
  }

  /** Every request that makes a decision on the authority, while the store is unusable. */
  async function duringStoreFault(boundMs: number): Promise<{ decisions: HttpReply[] }> {
    const admin = await system.adminToken();
    const [allowed, denied, unknown, anonymous, mismatch, invoke, mcpCall, mcpList, adminRead, adminWrite] =
      await Promise.all([
        system.authorize(allowedOp, agent),
        system.authorize(deniedOp, agent),
        system.authorize(unknownOp, agent),
        system.authorize(allowedOp),
        system.authorize({ ...allowedOp, subject: { subject_id: SECOND_AGENT } }, agent),
        system.invoke(invokeOp),
        system.mcp("tools/call", { name: getItemTool, arguments: { path: { itemId: "7" } } }, agent),
        system.mcp("tools/list", {}, agent),
        system.call("GET", `${system.url}/partners`, { token: admin }),
        system.call(
          "PUT",
          `${system.url}/partners/${PARTNER}/caab/subjects/${SECOND_AGENT}/policies/${CAPABILITY}`,
          {
            token: admin,
            json: { allowed_permission_ids: [...ALLOWED], ttl_seconds: 1800 },
          },
        ),
      ]);
    const all = {
      allowed,
      denied,
      unknown,
      anonymous,
      mismatch,
      invoke,
      mcpCall,
      mcpList,
      adminRead,
      adminWrite,
    };
    for (const [name, reply] of Object.entries(all)) assertWithin(reply.elapsedMs, boundMs, name);

    // Decisions that need the store: the 503 deny of docs/authorize.md, never an allow.
    for (const reply of [allowed, denied, unknown]) {
      assert.equal(reply.status, 503, reply.text);
      assert.deepEqual(reply.json, {
        status: "denied",
        reason: "upstream_unavailable",
        requestId: reply.json.requestId,
        rule: "service/unavailable",
        remedy: { action: "retry_later" },
      });
      assert.equal(reply.headers["retry-after"], "1");
    }
    // Decisions that need nothing of the store are made as usual.
    assert.equal(anonymous.status, 401);
    assert.equal(anonymous.json.reason, "missing_subject");
    assert.equal(mismatch.status, 403);
    assert.equal(mismatch.json.reason, "subject_mismatch");
    // Invoke: the workload client cannot be read — an error, nothing sent upstream.
    assert.equal(invoke.status, 503, invoke.text);
    assert.equal(invoke.json.error, "upstream_unavailable");
    // MCP: the call is an error result, the list an error, never a tool.
    assert.equal(mcpCall.status, 200);
    assert.equal(mcpCall.json.result.isError, true);
    assert.match(JSON.stringify(mcpCall.json.result), /upstream_unavailable/);
    assert.equal(mcpList.json.result, undefined, mcpList.text);
    assert.ok(mcpList.json.error !== undefined, mcpList.text);
    // Admin: reads and writes refused with 503.
    assert.equal(adminRead.status, 503);
    assert.equal(adminWrite.status, 503);
    assert.equal(adminWrite.json.error, "upstream_unavailable");
    return { decisions: [allowed, denied, unknown, anonymous, mismatch] };
  }

  async function recovered(): Promise<number> {
    const took = await recoveryTime(
      async () => (await system.authorize(allowedOp, agent)).status === 200,
      STORE_RECOVERY_MS,
    );
    assert.ok(took !== undefined, `authorize-invocation allowed again within ${STORE_RECOVERY_MS} ms`);
    assert.equal((await system.invoke(invokeOp)).status, 200, "invoke works again");
    const admin = await system.call("GET", `${system.url}/partners`, { token: await system.adminToken() });
    assert.equal(admin.status, 200, "admin routes work again");
    const call = await system.mcp(
      "tools/call",
      { name: getItemTool, arguments: { path: { itemId: "7" } } },
      agent,
    );
    assert.notEqual(call.json.result?.isError, true, call.text);
    return took;
  }

  test("store stopped: 503 denies fast, never an allow; recovery after restart; every decision recorded", async (t) => {
    assert.equal(await system.recorder.flush(5000), true);
    const before = await system.store.logLength(logs.audit);
    const usageBefore = Object.values(await system.store.readCounters(USAGE_COUNTERS, "d|")).reduce(
      (a, b) => a + b,
      0,
    );

    await storeRedis.stop();
    counts.faultsInjected++;
    const { decisions } = await duringStoreFault(STORE_DOWN_ANSWER_MS);
    // The sidecar decides a cached, fresh policy on its own while its lease over the authority's
    // change log lasts (2 s; the authority cannot renew it without its store), then 503 — never
    // a deny of another kind. A subject it must fetch from the authority is a 503.
    const cached = await system.check({ token: agent });
    if (!cached.allowed) assert.equal(cached.status, 503, "past the lease: 503, nothing else");
    const uncached = await system.check({ token: await system.agentToken(SECOND_AGENT) });
    assert.equal(uncached.allowed, false);
    assert.equal(uncached.status, 503);
    assertWithin(uncached.elapsedMs, SIDECAR_ANSWER_MS, "sidecar check of an uncached subject");
    assert.equal(system.recorder.dropped(), 0);
    assert.ok(system.recorder.pending() >= decisions.length, "decisions wait in the audit buffer");

    await storeRedis.start();
    const took = await recovered();
    t.diagnostic(`store restart → first allow after ${Math.round(took)} ms (bound ${STORE_RECOVERY_MS} ms)`);

    const records = await decisionsAfter(before);
    const byRequest = new Map<string, number>();
    for (const record of records) byRequest.set(record.requestId, (byRequest.get(record.requestId) ?? 0) + 1);
    const missing = decisions.filter((reply) => byRequest.get(reply.json.requestId) !== 1);
    // The sidecar's two decisions of the outage reached the authority's audit log too.
    const sidecarRecords = [checkRequestId(cached), checkRequestId(uncached)].map((id) =>
      records.filter((record) => record.requestId === id && record.transport === "grpc"),
    );
    assert.deepEqual(
      sidecarRecords.map((found) => found.map((record) => [record.decision, record.reason])),
      [
        [cached.allowed ? ["allowed", null] : ["denied", "upstream_unavailable"]],
        [["denied", "upstream_unavailable"]],
      ],
      "one record per sidecar decision",
    );
    counts.recordsLost += missing.length;
    assert.deepEqual(
      missing.map((reply) => reply.json.requestId),
      [],
      "one record per outage decision",
    );
    assert.equal(new Set(records.map((record) => record.id)).size, records.length, "no record twice");
    assert.equal(system.recorder.dropped(), 0);
    assert.equal(system.recorder.lost(), 0);
    await sleep(300); // usage counts are summed for up to 250 ms
    assert.equal(await system.recorder.flush(AUDIT_FLUSH_MS), true);
    const usageAfter = Object.values(await system.store.readCounters(USAGE_COUNTERS, "d|")).reduce(
      (a, b) => a + b,
      0,
    );
    assert.equal(usageAfter - usageBefore, records.length, "one usage count per decision record");
  });

  test("store frozen (SIGSTOP): every request answers within its bound, denied; recovery after SIGCONT", async (t) => {
    assert.equal(await system.recorder.flush(5000), true);
    const before = await system.store.logLength(logs.audit);
    storeRedis.pause();
    counts.faultsInjected++;
    let decisions: HttpReply[];
    try {
      ({ decisions } = await duringStoreFault(STORE_HUNG_ANSWER_MS));
    } finally {
      storeRedis.resume();
    }
    const took = await recovered();
    t.diagnostic(`store resumed → first allow after ${Math.round(took)} ms (bound ${STORE_RECOVERY_MS} ms)`);
    // A write whose reply was lost may land twice (docs/authorize.md): distinct record ids count.
    const records = await decisionsAfter(before);
    const seen = new Set(records.map((record) => record.requestId));
    const missing = decisions.filter((reply) => !seen.has(reply.json.requestId));
    counts.recordsLost += missing.length;
    assert.deepEqual(
      missing.map((reply) => reply.json.requestId),
      [],
    );
    const distinct = new Map(records.map((record) => [record.id, record.requestId]));
    assert.equal(
      new Set(distinct.values()).size,
      distinct.size,
      "twins (same record id) aside, one record per decision",
    );
    assert.equal(system.recorder.dropped(), 0);
  });

  test("sidecar cache Redis frozen, then stopped: allows end at the staleness bound (503), recovery is automatic", async (t) => {
    const other = await system.agentToken(SECOND_AGENT);
    // After the store outages above, the sidecar renews its lease on its own first.
    const ready = await recoveryTime(
      async () => (await system.check({ token: agent })).allowed,
      SIDECAR_RECOVERY_MS,
    );
    assert.ok(ready !== undefined, "the sidecar allows before the fault");
    for (const fault of ["frozen", "stopped"] as const) {
      if (fault === "frozen") cacheRedis.pause();
      else await cacheRedis.stop();
      counts.faultsInjected++;
      await sleep(SIDECAR_STALENESS_MS + 500);
      const answers = await Promise.all([
        system.check({ token: agent }),
        system.check({ token: agent, path: "/items" }),
        system.check({ token: other }),
      ]);
      for (const answer of answers) {
        assert.equal(answer.allowed, false, `${fault}: never an allow past the staleness bound`);
        assert.equal(answer.status, 503);
        assertWithin(answer.elapsedMs, SIDECAR_ANSWER_MS, `${fault}: ext_authz Check`);
      }
      const proxied = await system.proxy("/items/7", agent, { timeoutMs: SIDECAR_ANSWER_MS + 2000 });
      assert.equal(proxied.status, 503, proxied.text);
      assert.equal(proxied.json.reason, "upstream_unavailable");
      assertWithin(proxied.elapsedMs, SIDECAR_ANSWER_MS, `${fault}: forward proxy`);
      const hits = system.upstream.count("/items/7");
      assert.equal((await system.proxy("/items/7", agent)).status, 503);
      assert.equal(
        system.upstream.count("/items/7"),
        hits,
        "a denied proxy request never reaches the upstream",
      );

      if (fault === "frozen") cacheRedis.resume();
      else await cacheRedis.start();
      const took = await recoveryTime(
        async () => (await system.check({ token: agent })).allowed,
        SIDECAR_RECOVERY_MS,
      );
      assert.ok(took !== undefined, `${fault}: sidecar allows again within ${SIDECAR_RECOVERY_MS} ms`);
      assert.equal((await system.proxy("/items/7", agent)).status, 200);
      // The authority never depended on the sidecar's cache.
      assert.equal((await system.authorize(allowedOp, agent)).status, 200);
      t.diagnostic(
        `sidecar cache ${fault} → allows again after ${Math.round(took)} ms (bound ${SIDECAR_RECOVERY_MS} ms)`,
      );
    }
  });

  test("audit buffer full: requests are refused with the 503 deny, never answered without a record", async () => {
    const redis = await startRedisServer();
    const small = await startSystem({ storeUrl: redis.url, auditBuffer: 3, binding: false });
    try {
      const token = await small.agentToken();
      assert.equal((await small.authorize(allowedOp, token)).status, 200);
      assert.equal(await small.recorder.flush(5000), true);
      await redis.stop();
      counts.faultsInjected++;
      const replies: HttpReply[] = [];
      for (let i = 0; i < 6; i++) replies.push(await small.authorize(allowedOp, token));
      for (const reply of replies) {
        assert.equal(reply.status, 503);
        assert.equal(reply.json.reason, "upstream_unavailable");
      }
      assert.equal(small.recorder.pending(), 3, "the buffer holds its bound");
      assert.equal(small.recorder.dropped(), 3, "refused beyond it, and counted");
      // Sidecar records are refused whole (503, the sidecar keeps them) and count as nothing.
      const sidecarToken = await small.agentToken("sidecar-reliability", {
        roles: ["sidecar", "sidecar_platform"],
      });
      const batch = await small.call("POST", `${small.url}/v1/sidecar/decisions`, {
        token: sidecarToken,
        json: {
          records: [
            {
              id: "dec_reliability-1",
              actor: null,
              subject_id: null,
              partner_id: null,
              capability_id: null,
              method: "GET",
              path: "/items",
              permission_id: null,
              decision: "denied",
              reason: "missing_subject",
              transport: "grpc",
              requestId: "req-reliability-1",
              time: new Date().toISOString(),
            },
          ],
        },
      });
      assert.equal(batch.status, 503);
      assert.equal(small.recorder.pending(), 3);
      assert.equal(small.recorder.dropped(), 3);
      await redis.start();
      assert.equal(await small.recorder.flush(AUDIT_FLUSH_MS), true);
      const records = (await small.store.readLog<DecisionAuditRecord>(logs.audit, { limit: 100 }))
        .map((entry) => entry.value)
        .filter((value) => value.kind === "decision");
      // Redis restarted empty (no persistence): what it holds is exactly the buffered three.
      assert.equal(records.length, 3);
      const recorded = new Set(records.map((record) => record.requestId));
      assert.equal(replies.filter((reply) => recorded.has(reply.json.requestId)).length, 3);
      assertNoLeaks(small);
    } finally {
      await small.close();
      await redis.stop();
    }
  });

  test("no canary, secret or token in any log line or response; summary", (t) => {
    const scanned = assertNoLeaks(system);
    report(
      t,
      "faults-store",
      counts,
      `responses scanned: ${scanned.responses}, log lines scanned: ${scanned.logLines}`,
    );
  });
});
