/**
 * POST /admin/audit/checkpoints (decision 2771): a platform admin seals this replica's chains
 * now — the decisions just answered included, without waiting for the interval — and no one
 * else may.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { chainOf } from "../../../../src/audit/chain.ts";
import { logs } from "../../../../src/store/model.ts";
import { type Harness, startHarness } from "./harness.ts";
import { CAPABILITY, PARTNER, seedAll } from "./seed.ts";

let h: Harness;
before(async () => {
  // An interval longer than the test: only the call seals what it records.
  h = await startHarness({ settings: { "audit-checkpoint-interval": "3600" } });
  await seedAll(h.service.context.store, h.service.context.protector);
});
after(() => h.close());

const seal = async (token: string) => {
  const response = await fetch(`${h.url}/admin/audit/checkpoints`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}` },
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
};

test("a checkpoint on demand seals every decision answered before it", async () => {
  const agent = await h.token("agent-7");
  for (const path of ["/users/1", "/users/2", "/nowhere"]) {
    await h.authorize({ capability_id: CAPABILITY, method: "GET", path }, agent);
  }
  const admin = await h.token("root", { roles: ["admin"] });
  const { status, body } = await seal(admin);
  assert.equal(status, 200, JSON.stringify(body));
  assert.equal(body.reason, "demand");
  const heads = body.heads as Record<string, { n: number; hash: string }>;
  const stored = await h.service.context.store.readLog(logs.audit, { limit: 1000 });
  const ours = stored.map((entry) => chainOf(entry.value)).filter((link) => link?.stream === body.stream);
  assert.ok(ours.length >= 3);
  assert.equal(heads.audit?.n, Math.max(...ours.map((link) => link?.n ?? 0)), "the newest record is sealed");
  const checkpoints = await h.service.context.store.readLog<{ reason: string; stream: string }>(
    logs.auditCheckpoints,
    { limit: 1000 },
  );
  assert.equal(checkpoints.at(-1)?.value.reason, "demand");
});

test("only a platform admin may seal", async () => {
  for (const roles of [["partner_admin"], ["auditor"], ["agent"]]) {
    const token = await h.token(`u-${roles[0]}`, { roles, partnerId: PARTNER });
    assert.equal((await seal(token)).status, 403, roles.join());
  }
  const anonymous = await fetch(`${h.url}/admin/audit/checkpoints`, { method: "POST" });
  assert.equal(anonymous.status, 401);
});
