import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createWriteBackQueue, type WriteBackResult } from "../../../src/policy/cache/write-back-queue.ts";

const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

function queue(maxPendingChars = 1000, maxDeferMs = 60_000) {
  const state = { busy: false };
  const results: WriteBackResult[] = [];
  const ran: string[] = [];
  const writeBacks = createWriteBackQueue({
    maxPendingChars,
    busy: () => state.busy,
    maxDeferMs,
    onResult: (result) => results.push(result),
  });
  const job = (name: string, chars = 10, fail = false) => ({
    chars,
    run: async () => {
      ran.push(name);
      if (fail) throw new Error("redis refused");
      return true;
    },
  });
  return { state, results, ran, writeBacks, job };
}

describe("write-back queue", () => {
  test("nothing runs in the caller's turn; then one at a time, in order, a failure counted", async () => {
    const { results, ran, writeBacks, job } = queue();
    writeBacks.add("a", job("a"));
    writeBacks.add("b", job("b", 10, true));
    writeBacks.add("c", job("c"));
    assert.deepEqual(ran, []);
    await writeBacks.drained();
    assert.deepEqual(ran, ["a", "b", "c"]);
    assert.deepEqual(results, ["written", "failed", "written"]);
  });

  test("waits while policy loads run, and starts when told they ended", async () => {
    const { state, ran, writeBacks, job } = queue();
    state.busy = true;
    writeBacks.add("a", job("a"));
    for (let i = 0; i < 5; i++) await turn();
    assert.deepEqual(ran, []);
    state.busy = false;
    writeBacks.idle();
    await writeBacks.drained();
    assert.deepEqual(ran, ["a"]);
  });

  test("bounded by the characters it holds: past the bound a write-back is dropped and counted; a newer one of a subject replaces its pending one", async () => {
    const { state, results, ran, writeBacks, job } = queue(25);
    state.busy = true;
    writeBacks.add("a", job("a-old", 10));
    writeBacks.add("a", job("a-new", 10));
    writeBacks.add("b", job("b", 10));
    writeBacks.add("c", job("c", 10));
    assert.equal(writeBacks.pending, 2);
    assert.deepEqual(results, ["dropped"]);
    state.busy = false;
    writeBacks.idle();
    await writeBacks.drained();
    assert.deepEqual(ran, ["a-new", "b"]);
  });

  test("loads that never pause do not starve write-backs: one runs after maxDeferMs", async () => {
    const { state, ran, writeBacks, job } = queue(1000, 20);
    state.busy = true;
    writeBacks.add("a", job("a"));
    writeBacks.add("b", job("b"));
    await writeBacks.drained();
    assert.deepEqual(ran, ["a", "b"]);
  });

  test("clear drops what is pending", async () => {
    const { state, ran, writeBacks, job } = queue();
    state.busy = true;
    writeBacks.add("a", job("a"));
    writeBacks.clear();
    state.busy = false;
    writeBacks.idle();
    await writeBacks.drained();
    assert.deepEqual(ran, []);
  });
});
