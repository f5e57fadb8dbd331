import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { ShippedDecision } from "../../../src/audit/shipped-decisions.ts";
import type { SidecarDecision, SidecarEngine, SidecarRequest } from "../../../src/pipeline/check.ts";
import { auditedEngine } from "../../../src/pipeline/check-record.ts";
import { createDecisionShipper } from "../../../src/servers/sidecar/decision-log.ts";
import { AGENT, CAPABILITY, type SidecarHandle, startWorld, UPSTREAM_HOST, type World } from "./world.ts";

/**
 * The forward proxy's records tell what became of an allow: a refusal after the decision
 * (whatever step refused) is recorded — and counted in usage — as a deny with its reason.
 */
describe("proxy allows are recorded with their outcome", () => {
  const request: SidecarRequest = {
    transport: "proxy",
    authorization: undefined,
    capabilityId: CAPABILITY,
    host: UPSTREAM_HOST,
    method: "GET",
    path: "/orders/1",
    requestId: "req-1",
  };
  const allow = (): SidecarDecision =>
    ({
      allow: true,
      requestId: "req-1",
      subjectId: AGENT,
      partnerId: "acme",
      capabilityId: CAPABILITY,
      permissionId: `${CAPABILITY}:get:/orders/{orderId}`,
    }) as SidecarDecision;

  async function recorded(outcome: (decision: SidecarDecision) => void): Promise<ShippedDecision[]> {
    const records: ShippedDecision[] = [];
    const shipper = createDecisionShipper({
      flushIntervalMs: 5,
      send: async (batch) => {
        records.push(...(JSON.parse(batch.toString("utf8")) as ShippedDecision[]));
      },
    });
    const engine: SidecarEngine = { decide: () => allow(), authorize: async () => allow() };
    const decision = auditedEngine(engine, shipper).decide(request);
    assert.ok(!(decision instanceof Promise));
    outcome(decision);
    await shipper.close(2000);
    return records;
  }

  test("a refusal after the allow is the record's deny, with the reason and the permission", async () => {
    const records = await recorded((decision) => {
      assert.ok(decision.allow);
      decision.settle?.("upstream_error");
      decision.settle?.(null); // once only
    });
    assert.deepEqual(
      records.map((r) => [r.decision, r.reason, r.permission_id, r.transport]),
      [["denied", "upstream_error", `${CAPABILITY}:get:/orders/{orderId}`, "proxy"]],
    );
  });

  test("an answered allow is recorded as allowed, once", async () => {
    const records = await recorded((decision) => {
      assert.ok(decision.allow);
      decision.settle?.(null);
    });
    assert.deepEqual(
      records.map((r) => [r.decision, r.reason]),
      [["allowed", null]],
    );
  });

  test("end to end: an upstream the proxy cannot reach is a denied record (audit and usage)", async () => {
    let world: World | undefined;
    try {
      world = await startWorld();
      const sidecar: SidecarHandle = await world.startSidecar();
      await world.upstream.close();
      const reply = await sidecar.proxy({ target: `http://${UPSTREAM_HOST}/orders/7` });
      assert.equal(reply.status, 503);
      const items = await proxyAudit(world);
      assert.deepEqual(
        items.map((item) => [item.decision, item.reason, item.permission_id]),
        [["denied", "upstream_unavailable", `${CAPABILITY}:get:/orders/{orderId}`]],
      );
      assert.deepEqual(await usageTotals(world), { allowed: 0, denied: 1 });
    } finally {
      await world?.close().catch(() => undefined);
    }
  });
});

interface AuditItem {
  readonly decision: string;
  readonly reason: string | null;
  readonly permission_id: string | null;
}

async function proxyAudit(world: World): Promise<AuditItem[]> {
  const deadline = Date.now() + 5000;
  for (;;) {
    const response = await fetch(`${world.authorityUrl}/admin/audit?kind=decision&transport=proxy`, {
      headers: { authorization: `Bearer ${world.tokens.admin}` },
    });
    assert.equal(response.status, 200);
    const { items } = (await response.json()) as { items: AuditItem[] };
    if (items.length >= 1 || Date.now() > deadline) return items;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The agent's usage totals, once the record's counts are in (or after 5 s). */
async function usageTotals(world: World): Promise<{ allowed: number; denied: number }> {
  const deadline = Date.now() + 5000;
  for (;;) {
    const response = await fetch(`${world.authorityUrl}/admin/usage?subject=${AGENT}`, {
      headers: { authorization: `Bearer ${world.tokens.admin}` },
    });
    assert.equal(response.status, 200);
    const { totals } = (await response.json()) as { totals: { allowed: number; denied: number } };
    if (totals.allowed + totals.denied > 0 || Date.now() > deadline) return totals;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
