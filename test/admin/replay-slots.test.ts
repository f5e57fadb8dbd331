/**
 * The replay slots (decision 2861): one running replay per partner, a few per replica, a slot
 * freed once however often its release is called, limits checked at construction.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { createReplaySlots } from "../../src/admin/replay-slots.ts";

describe("replay slots", () => {
  it("hold one replay per partner and at most `total` in all", () => {
    const slots = createReplaySlots({ perPartner: 1, total: 2 });
    const a = slots.acquire("partner-a");
    assert.ok(a);
    assert.equal(slots.acquire("partner-a"), undefined, "a second replay of the same partner");
    const b = slots.acquire("partner-b");
    assert.ok(b);
    assert.equal(slots.acquire("partner-c"), undefined, "a third replay on the replica");
    a();
    a();
    assert.equal(slots.acquire("partner-b"), undefined, "a double release frees one slot only");
    const c = slots.acquire("partner-c");
    assert.ok(c);
    b();
    c();
    assert.ok(slots.acquire("partner-a"));
  });

  it("refuses limits below one", () => {
    assert.throws(() => createReplaySlots({ perPartner: 0, total: 2 }), RangeError);
    assert.throws(() => createReplaySlots({ perPartner: 1, total: 1.5 }), RangeError);
  });
});
