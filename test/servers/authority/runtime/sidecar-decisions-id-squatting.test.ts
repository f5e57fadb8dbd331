/**
 * Attack: a record id squatted by another sidecar (receipts no longer disclose ids, but one that
 * leaked some other way must not hide a record either). A sidecar's Check answers its client with the
 * receipt (`x-authority-receipt`, carrying the record id) before the record is shipped; whoever
 * holds a sidecar credential of another partner could send a record with that id first, and the
 * id check that makes a re-sent batch stored once (decision 2751) would then drop the real
 * record — a deny hidden from its partner's audit. A held id only stands for a record when the
 * held record is that record; any other is a collision, and the shipped record is kept.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { receiptOf } from "../../../../src/audit/receipts.ts";
import { logs } from "../../../../src/store/model.ts";
import { type Harness, startHarness } from "./harness.ts";

interface StoredRecord {
  readonly id: string;
  readonly partner_id: string | null;
  readonly requestId: string;
  readonly decision: string;
  readonly shipped_id?: string;
}

const TIME = "2026-11-29T05:00:00.123Z";

const shipped = (
  id: string,
  partnerId: string | null,
  decision: "allowed" | "denied",
  requestId: string,
) => ({
  id,
  actor: "agent-victim",
  subject_id: "agent-victim",
  partner_id: partnerId,
  capability_id: "billing",
  method: "DELETE",
  path: "/users/1",
  permission_id: decision === "allowed" ? "billing:DELETE:/users/{id}" : null,
  decision,
  reason: decision === "allowed" ? null : "operation_not_allowed",
  transport: "grpc",
  requestId,
  time: TIME,
});

describe("sidecar decision ids squatted by another partner's sidecar", () => {
  let h: Harness;
  let attacker: string;
  let victim: string;
  let victimAdmin: string;

  const send = async (token: string, records: unknown[]) => {
    const reply = await fetch(`${h.url}/v1/sidecar/decisions`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ records }),
    });
    assert.equal(reply.status, 200, await reply.text());
    assert.equal(await h.service.context.decisions.recorder.flush(10_000), true);
  };
  const stored = async () =>
    (await h.service.context.store.readLog<StoredRecord>(logs.audit, { limit: 1000 })).map((e) => e.value);

  before(async () => {
    h = await startHarness();
    attacker = await h.token("sidecar-attacker", { roles: ["sidecar"], partnerId: "partner-attacker" });
    victim = await h.token("sidecar-victim", { roles: ["sidecar"], partnerId: "partner-victim" });
    victimAdmin = await h.token("pa-victim", { roles: ["partner_admin"], partnerId: "partner-victim" });
  });
  after(() => h.close());

  for (const [label, squatPartner] of [
    ["an allow of the attacker's partner", "partner-attacker"],
    ["a deny without a partner", null],
  ] as const) {
    it(`a deny shipped after ${label} with its id is still stored`, async () => {
      const id = `dec_squat-${squatPartner ?? "none"}`;
      const requestId = `req-victim-${squatPartner ?? "none"}`;
      // The attacker learnt the id from the receipt the victim's client was answered with.
      await send(attacker, [
        shipped(id, squatPartner, squatPartner === null ? "denied" : "allowed", "req-attacker"),
      ]);
      await send(victim, [shipped(id, "partner-victim", "denied", requestId)]);

      const victims = (await stored()).filter(
        (r) => r.partner_id === "partner-victim" && r.requestId === requestId,
      );
      assert.equal(victims.length, 1, "the victim's deny is in the audit log");
      assert.equal(victims[0]?.decision, "denied");
      assert.equal(victims[0]?.shipped_id, id, "the colliding record names the id it was shipped with");

      // The victim's receipt (as its sidecar makes it, and an older one naming the id itself)
      // finds the victim's record, never the attacker's.
      for (const receipt of [receiptOf(logs.audit, { id, time: TIME }), `r1.a.${Date.parse(TIME)}.${id}`]) {
        const found = await h.get(`/admin/audit/receipts/${encodeURIComponent(receipt)}`, victimAdmin);
        assert.equal(found.status, 200, receipt);
        assert.equal(found.body.requestId, requestId);
      }

      // The victim's batch sent again is not stored a second time.
      await send(victim, [shipped(id, "partner-victim", "denied", requestId)]);
      const again = (await stored()).filter((r) => r.requestId === requestId);
      assert.equal(again.length, 1, "a re-sent colliding record is stored once");
    });
  }
});
