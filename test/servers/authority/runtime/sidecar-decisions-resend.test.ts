/**
 * Decision 2751: a sidecar's decision batch sent again (its reply was lost: a timeout, a replica
 * killed after storing it) is stored once, and the replica's hash chain has no hole for it.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { logs } from "../../../../src/store/model.ts";
import { type Harness, startHarness } from "./harness.ts";

interface StoredRecord {
  readonly id: string;
  readonly requestId?: string;
  readonly chain?: { readonly stream: string; readonly n: number };
}

// A batch sent again is the same records, byte for byte (their time included).
const SENT_AT = new Date().toISOString();

const shipped = (i: number) => ({
  id: `dec_resend-${i}`,
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
  requestId: `req-resend-${i}`,
  time: SENT_AT,
});

describe("sidecar decision batches sent again", () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(() => h.close());

  it("stores each record once and keeps the replica's chain without a hole", async () => {
    const token = await h.token("sidecar-resend", { roles: ["sidecar", "sidecar_platform"] });
    const send = async (records: unknown[]) => {
      const reply = await fetch(`${h.url}/v1/sidecar/decisions`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ records }),
      });
      assert.equal(reply.status, 200, await reply.text());
      assert.equal(await h.service.context.decisions.recorder.flush(10_000), true);
    };
    await send([shipped(1), shipped(2)]);
    // The same batch again, with one record the first did not hold, then the whole batch again.
    await send([shipped(1), shipped(2), shipped(3)]);
    await send([shipped(1), shipped(2), shipped(3)]);

    const entries = await h.service.context.store.readLog<StoredRecord>(logs.audit, { limit: 1000 });
    const ids = entries.map((entry) => entry.value.id).filter((id) => id.startsWith("dec_resend-"));
    assert.deepEqual(ids.sort(), ["dec_resend-1", "dec_resend-2", "dec_resend-3"]);
    const requests = entries.filter((entry) => entry.value.requestId?.startsWith("req-resend-") === true);
    assert.equal(requests.length, 3, "no record stored under another id either");
    // Every link the replica made is stored: its places are 1..n without a gap.
    const places = entries.flatMap((entry) => (entry.value.chain ? [entry.value.chain.n] : []));
    assert.ok(places.length >= 3);
    assert.deepEqual(
      places,
      places.map((_, i) => i + 1),
    );
  });
});
