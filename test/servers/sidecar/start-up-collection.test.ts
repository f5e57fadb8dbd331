import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { collectStartUpGarbage, takeExposedGc } from "../../../src/servers/sidecar/warm-decision.ts";

/**
 * Decision 3021: a start from the snapshot runs with `--expose-gc` for one collection before
 * ready; the blob's main takes V8's `gc` off the global first, so no other code can call it.
 */
describe("the start-up collection's gc", () => {
  it("is taken off the global and used only by collectStartUpGarbage", () => {
    const global = globalThis as { gc?: unknown };
    const before = global.gc;
    let calls = 0;
    global.gc = () => {
      calls++;
    };
    try {
      takeExposedGc();
      assert.equal(global.gc, undefined);
      collectStartUpGarbage();
      assert.equal(calls, 1);
    } finally {
      global.gc = before;
    }
  });
});
