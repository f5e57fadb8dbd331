import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { ShippedDecision } from "../../../src/audit/shipped-decisions.ts";
import type { SidecarDecision, SidecarEngine, SidecarRequest } from "../../../src/pipeline/check.ts";
import { auditedEngine, shippedDecision } from "../../../src/pipeline/check-record.ts";
import { createAuthorityClient } from "../../../src/servers/sidecar/authority-client.ts";
import { createDecisionShipper } from "../../../src/servers/sidecar/decision-log.ts";
import { staticTokenSource } from "../../../src/servers/sidecar/service-token.ts";
import { type FaultProxy, startFaultProxy } from "../../helpers/fault-proxy.ts";
import { checkMethod, type Decoded, envoyCheckRequest, unary } from "./grpc/helpers.ts";
import { AGENT, CAPABILITY, type SidecarHandle, startWorld, UPSTREAM_HOST, type World } from "./world.ts";

interface AuditItem {
  readonly id: string;
  readonly actor: string | null;
  readonly subject_id: string | null;
  readonly capability_id: string | null;
  readonly permission_id: string | null;
  readonly partner_id: string | null;
  readonly method: string | null;
  readonly path: string | null;
  readonly decision: string;
  readonly reason: string | null;
  readonly transport: string;
  readonly requestId: string;
}

async function sidecarAudit(world: World, transport: string, count: number): Promise<AuditItem[]> {
  const deadline = Date.now() + 5000;
  for (;;) {
    const response = await fetch(`${world.authorityUrl}/admin/audit?kind=decision&transport=${transport}`, {
      headers: { authorization: `Bearer ${world.tokens.admin}` },
    });
    assert.equal(response.status, 200);
    const { items } = (await response.json()) as { items: AuditItem[] };
    if (items.length >= count || Date.now() > deadline) return items;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

function postDecisions(world: World, token: string, body: unknown): Promise<Response> {
  return fetch(`${world.authorityUrl}/v1/sidecar/decisions`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

function shipped(n: number): ShippedDecision {
  return {
    id: `dec_test-${n}`,
    actor: AGENT,
    subject_id: AGENT,
    partner_id: "acme",
    capability_id: CAPABILITY,
    method: "GET",
    path: `/orders/${n}`,
    permission_id: `${CAPABILITY}:get:/orders/{orderId}`,
    decision: "allowed",
    reason: null,
    transport: "grpc",
    requestId: `req-${n}`,
    time: new Date().toISOString(),
  };
}

describe("sidecar decisions reach the authority's audit log", () => {
  let world: World;
  let sidecar: SidecarHandle;
  before(async () => {
    world = await startWorld();
    sidecar = await world.startSidecar();
  });
  after(() => world.close());

  test("Check allows and denies, and proxied requests, each become one decision record", async () => {
    await sidecar.check({});
    await sidecar.check({ method: "POST", path: "/orders" });
    await sidecar.check({ token: null });
    assert.equal((await sidecar.proxy({ target: `http://${UPSTREAM_HOST}/orders/7` })).status, 200);

    const grpc = await sidecarAudit(world, "grpc", 3);
    assert.equal(grpc.length, 3);
    const byReason = new Map(grpc.map((item) => [item.reason, item]));
    const allowed = byReason.get(null);
    assert.equal(allowed?.decision, "allowed");
    assert.equal(allowed?.subject_id, AGENT);
    assert.equal(allowed?.actor, AGENT);
    assert.equal(allowed?.partner_id, "acme");
    assert.equal(allowed?.capability_id, CAPABILITY);
    assert.equal(allowed?.permission_id, `${CAPABILITY}:get:/orders/{orderId}`);
    const notAllowed = byReason.get("operation_not_allowed");
    assert.equal(notAllowed?.decision, "denied");
    assert.equal(notAllowed?.subject_id, AGENT);
    assert.equal(notAllowed?.capability_id, CAPABILITY);
    assert.equal(notAllowed?.method, "POST");
    assert.equal(notAllowed?.path, "/orders");
    const anonymous = byReason.get("missing_subject");
    assert.equal(anonymous?.decision, "denied");
    assert.equal(anonymous?.subject_id, null);

    const proxy = await sidecarAudit(world, "proxy", 1);
    assert.equal(proxy.length, 1);
    assert.equal(proxy[0]?.decision, "allowed");
    assert.equal(proxy[0]?.path, "/orders/7");
    assert.match(
      await sidecar.metricsText(),
      /authority_sidecar_audit_records_total\{result="delivered"\} [1-9]/,
    );
    // Usage is counted from the same records.
    const usage = await fetch(`${world.authorityUrl}/admin/usage?subject=${AGENT}`, {
      headers: { authorization: `Bearer ${world.tokens.admin}` },
    });
    assert.equal(usage.status, 200);
    assert.match(JSON.stringify(await usage.json()), /allowed/);
  });

  test("only sidecars may write records, and only well-formed batches", async () => {
    const agentAnswer = await postDecisions(world, world.tokens.agent, { records: [shipped(1)] });
    assert.equal(agentAnswer.status, 403);
    assert.equal(((await agentAnswer.json()) as { error: string }).error, "insufficient_role");
    for (const body of [
      {},
      { records: [] },
      { records: [{ ...shipped(2), transport: "http" }] },
      { records: [{ ...shipped(3), reason: "made_up" }] },
      { records: [{ ...shipped(4), id: "not-a-record-id" }] },
      { records: [{ ...shipped(5), extra: 1 }] },
      { records: [{ ...shipped(9), time: "yesterday" }] },
      { records: [{ ...shipped(10), decision: "maybe" }] },
      { records: Array.from({ length: 501 }, (_, i) => shipped(100 + i)) },
    ]) {
      const answer = await postDecisions(world, world.tokens.sidecar, body);
      assert.equal(answer.status, 400, JSON.stringify(body).slice(0, 80));
    }
    const ok = await postDecisions(world, world.tokens.sidecar, { records: [shipped(6), shipped(7)] });
    assert.equal(ok.status, 200);
    assert.deepEqual(await ok.json(), { accepted: 2 });
  });

  test("a sidecar token bound to a partner writes only that partner's records", async () => {
    const bound = (
      await world.idp.issueToken({
        subject: "sidecar-other",
        roles: ["sidecar"],
        claims: { partner_id: "other-partner" },
        lifetimeSec: 300,
      })
    ).accessToken;
    const refused = await postDecisions(world, bound, { records: [shipped(20)] });
    assert.equal(refused.status, 403);
    // An allow always has a partner: one without is not taken from a partner-bound token.
    const unowned = await postDecisions(world, bound, { records: [{ ...shipped(22), partner_id: null }] });
    assert.equal(unowned.status, 403);
    const anonymous = { ...shipped(21), partner_id: null, subject_id: null, actor: null };
    const taken = await postDecisions(world, bound, {
      records: [{ ...anonymous, decision: "denied", reason: "missing_subject", permission_id: null }],
    });
    assert.equal(taken.status, 200);
    // Filed under the reporting sidecar's partner: it cannot be made to look like another partner's.
    const filed = (await sidecarAudit(world, "grpc", 1)).find((item) => item.requestId === "req-21");
    assert.equal(filed?.partner_id, "other-partner");
  });

  test("a request id another request already used names a second record; it overwrites nothing", async () => {
    // The caller's x-request-id is a correlation field: a victim's id sent again (to hide or
    // replace the victim's record) makes a record of its own, under its own record id.
    const victimId = `victim-${Date.now()}-0001`;
    const send = (path: string, method = "GET") =>
      unary(
        sidecar.client,
        checkMethod,
        envoyCheckRequest({
          method,
          path,
          host: UPSTREAM_HOST,
          headers: { authorization: `Bearer ${world.tokens.agent}` },
          contextExtensions: {},
          id: victimId,
        }),
      );
    assert.equal((await send("/orders/1")).status.code, 0);
    assert.notEqual((await send("/orders", "POST")).status.code, 0);
    let same: AuditItem[] = [];
    const deadline = Date.now() + 5000;
    while (same.length < 2 && Date.now() < deadline) {
      same = (await sidecarAudit(world, "grpc", 0)).filter((item) => item.requestId === victimId);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    assert.deepEqual(same.map((item) => item.decision).sort(), ["allowed", "denied"]);
    const [first, second] = same;
    assert.ok(first?.id !== undefined && first.id !== second?.id, "each record has its own id");
  });
});

describe("sidecar decision records while the authority is unreachable (fault proxy)", () => {
  let world: World;
  let proxy: FaultProxy;
  let sidecar: SidecarHandle;
  const MAX_PENDING = 20;
  before(async () => {
    world = await startWorld();
    proxy = await startFaultProxy(Number(new URL(world.authorityUrl).port));
    sidecar = await world.startSidecar({
      authority: createAuthorityClient({
        baseUrl: proxy.url,
        token: staticTokenSource(world.tokens.sidecar),
      }),
      auditMaxPending: MAX_PENDING,
      // The cached policy stays usable for the whole outage: only the records need the authority.
      policyTtlMs: 60_000,
    });
  });
  after(async () => {
    await proxy.close();
    await world.close();
  });

  const requestIdOf = (response: Decoded): string | undefined =>
    (response.ok_response?.headers ?? []).find(
      (option: { header?: { key?: string } }) => option.header?.key === "x-authority-request-id",
    )?.header?.value;
  const ready = async (): Promise<{ status: number; audit: unknown }> => {
    const response = await fetch(`http://127.0.0.1:${sidecar.ports.metrics}/readyz`);
    const body = (await response.json()) as { checks?: { audit?: unknown } };
    return { status: response.status, audit: body.checks?.audit };
  };

  test("decisions go on while records queue; a full queue is 503 and not ready; all delivered once the authority is back", async () => {
    assert.equal((await sidecar.check({})).http_response, "ok_response");
    assert.equal(await sidecar.sidecar.flushAudit(5000), true);

    proxy.mode = "reset";
    proxy.dropAll();
    const attemptsBefore = proxy.accepted();
    const outage: string[] = [];
    for (let i = 0; i < MAX_PENDING; i++) {
      const response = await sidecar.check({});
      assert.equal(response.http_response, "ok_response", "decided from the cached policy");
      const id = requestIdOf(response);
      assert.ok(id !== undefined);
      outage.push(id);
    }
    // A delivery was tried (and reset) before the queue is judged full.
    for (let waited = 0; proxy.accepted() === attemptsBefore && waited < 5000; waited += 20) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    assert.ok(proxy.accepted() > attemptsBefore, "the sidecar tried to deliver during the outage");
    // The queue is full: nothing is evaluated, nothing is allowed without a record.
    const refused = await sidecar.check({});
    assert.equal(refused.http_response, "denied_response");
    assert.equal(refused.denied_response.status.code, "ServiceUnavailable");
    assert.equal(JSON.parse(refused.denied_response.body).reason, "upstream_unavailable");
    assert.deepEqual(await ready(), { status: 503, audit: false });

    proxy.mode = "pass";
    assert.equal(
      await sidecar.sidecar.flushAudit(10_000),
      true,
      "the backlog is delivered (retries ≤ 2 s apart)",
    );
    assert.deepEqual(await ready(), { status: 200, audit: true });
    assert.equal((await sidecar.check({})).http_response, "ok_response");

    const records = await sidecarAudit(world, "grpc", outage.length + 2);
    for (const id of outage) {
      assert.equal(records.filter((record) => record.requestId === id).length, 1, `one record for ${id}`);
    }
  });
});

describe("decision shipper", () => {
  const request: SidecarRequest = {
    transport: "grpc",
    authorization: undefined,
    capabilityId: CAPABILITY,
    host: "orders.internal",
    method: "GET",
    path: "/orders/1?secret=x",
    requestId: "req-1",
  };
  const deny: SidecarDecision = {
    allow: false,
    httpStatus: 401,
    reason: "missing_subject",
    requestId: "req-1",
  };

  test("sends in batches of at most batchSize, in order, each record once", async () => {
    const batches: ShippedDecision[][] = [];
    const parse = (records: Buffer) => JSON.parse(records.toString("utf8")) as ShippedDecision[];
    const shipper = createDecisionShipper({
      batchSize: 4,
      flushIntervalMs: 5,
      send: async (records) => {
        batches.push(parse(records));
      },
    });
    for (let i = 0; i < 10; i++) shipper.push(shipped(i));
    assert.equal(await shipper.flush(2000), true);
    assert.deepEqual(
      batches.map((batch) => batch.length),
      [4, 4, 2],
    );
    assert.deepEqual(
      batches.flat().map((record) => record.id),
      Array.from({ length: 10 }, (_, i) => `dec_test-${i}`),
    );
    assert.equal(shipper.pending(), 0);
  });

  test("a failed send is retried with back-off; the state change is reported once each way", async () => {
    let failuresLeft = 2;
    const delivered: string[] = [];
    const states: string[] = [];
    const errors: unknown[] = [];
    const shipper = createDecisionShipper({
      flushIntervalMs: 5,
      retryMs: 5,
      send: async (records) => {
        if (failuresLeft-- > 0) throw new Error("authority away");
        delivered.push(
          ...(JSON.parse(records.toString("utf8")) as ShippedDecision[]).map((record) => record.id),
        );
      },
      onStateChange: (state, _pending, error) => {
        states.push(state);
        if (error !== undefined) errors.push(error);
      },
    });
    shipper.push(shipped(1));
    shipper.push(shipped(2));
    assert.equal(await shipper.flush(2000), true);
    assert.deepEqual(delivered, ["dec_test-1", "dec_test-2"]);
    assert.deepEqual(states, ["failing", "ok"]);
    assert.deepEqual(
      errors.map((error) => (error as Error).message),
      ["authority away"],
    );
  });

  test("a record the authority refuses (400) is found by halving the batch and set aside; the rest go through", async () => {
    const delivered: string[] = [];
    const refused: unknown[] = [];
    const shipper = createDecisionShipper({
      flushIntervalMs: 5,
      send: async (batch) => {
        const records = JSON.parse(batch.toString("utf8")) as ShippedDecision[];
        if (records.some((record) => record.id === "dec_test-13")) {
          throw Object.assign(new Error("the authority service answered 400"), { status: 400 });
        }
        delivered.push(...records.map((record) => record.id));
      },
      onRefused: (error) => refused.push(error),
    });
    for (let i = 0; i < 40; i++) shipper.push(shipped(i));
    assert.equal(await shipper.flush(5000), true);
    assert.deepEqual(
      delivered,
      Array.from({ length: 40 }, (_, i) => `dec_test-${i}`).filter((id) => id !== "dec_test-13"),
    );
    assert.equal(refused.length, 1);
  });

  test("fields are bounded to what the authority's route takes; empty ones are null", () => {
    const record = shippedDecision(
      { ...request, path: `/${"a".repeat(5000)}?q=1`, capabilityId: "", method: "X".repeat(40) },
      { ...deny, context: { subjectId: "s".repeat(3000) } },
      new Date(),
    );
    assert.equal(record.path?.length, 1024);
    assert.equal(record.capability_id, null);
    assert.equal(record.method?.length, 16);
    assert.equal(record.subject_id?.length, 1024);
  });

  test("a full queue refuses decisions: the engine is not asked and the answer is 503", async () => {
    let asked = 0;
    const engine: SidecarEngine = {
      decide: () => {
        asked++;
        return deny;
      },
      authorize: async () => deny,
    };
    const shipper = createDecisionShipper({
      maxPending: 2,
      retryMs: 1000,
      send: async () => {
        throw new Error("authority away");
      },
    });
    const audited = auditedEngine(engine, shipper);
    audited.decide(request);
    audited.decide(request);
    assert.equal(shipper.accepting(), false);
    const refused = await audited.authorize(request);
    assert.equal(refused.allow, false);
    assert.equal(refused.allow === false && refused.reason, "upstream_unavailable");
    assert.equal(refused.allow === false && refused.httpStatus, 503);
    assert.equal(asked, 2);
    assert.deepEqual(await shipper.close(50), { flushed: false, lost: 2 });
  });

  test("a decision that settles after the transport answered is recorded as the 503 that was sent", async () => {
    const records: ShippedDecision[] = [];
    let settle: (decision: SidecarDecision) => void = () => undefined;
    const engine: SidecarEngine = {
      decide: () =>
        new Promise<SidecarDecision>((resolve) => {
          settle = resolve;
        }),
      authorize: async () => deny,
    };
    const shipper = createDecisionShipper({
      flushIntervalMs: 5,
      send: async (batch) => {
        records.push(...(JSON.parse(batch.toString("utf8")) as ShippedDecision[]));
      },
    });
    const answered = new AbortController();
    const pending = auditedEngine(engine, shipper).decide({ ...request, signal: answered.signal });
    answered.abort(); // the transport's deadline passed: it sent a 503
    settle({
      allow: true,
      requestId: "req-1",
      subjectId: AGENT,
      partnerId: "acme",
      capabilityId: CAPABILITY,
      permissionId: `${CAPABILITY}:get:/orders/{orderId}`,
    } as SidecarDecision);
    assert.equal((await pending).allow, true);
    await shipper.close(2000);
    assert.equal(records.length, 1);
    assert.equal(records[0]?.decision, "denied");
    assert.equal(records[0]?.reason, "upstream_unavailable");
    assert.equal(records[0]?.subject_id, AGENT);
    assert.equal(records[0]?.permission_id, null);
  });

  test("records carry what the engine knew, and never a query string", async () => {
    const records: ShippedDecision[] = [];
    const engine: SidecarEngine = {
      decide: () => ({
        ...deny,
        httpStatus: 403,
        reason: "operation_not_allowed",
        context: { subjectId: AGENT, partnerId: "acme", capabilityId: CAPABILITY },
      }),
      authorize: async () => deny,
    };
    const shipper = createDecisionShipper({
      flushIntervalMs: 5,
      send: async (batch) => {
        records.push(...(JSON.parse(batch.toString("utf8")) as ShippedDecision[]));
      },
    });
    auditedEngine(engine, shipper).decide(request);
    await shipper.close(2000);
    assert.equal(records.length, 1);
    const [record] = records;
    assert.equal(record?.subject_id, AGENT);
    assert.equal(record?.actor, AGENT);
    assert.equal(record?.partner_id, "acme");
    assert.equal(record?.reason, "operation_not_allowed");
    assert.equal(record?.path, "/orders/1");
    assert.match(record?.id ?? "", /^dec_/);
  });
});
