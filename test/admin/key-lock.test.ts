import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { withKeyLock } from "../../src/admin/key-lock.ts";

describe("withKeyLock", () => {
  it("runs work on one key one at a time, in order", async () => {
    const events: string[] = [];
    const step = (name: string) => async () => {
      events.push(`${name}:start`);
      await new Promise((resolve) => setImmediate(resolve));
      events.push(`${name}:end`);
      return name;
    };
    const results = await Promise.all([
      withKeyLock("k", step("a")),
      withKeyLock("k", step("b")),
      withKeyLock("k", step("c")),
    ]);
    assert.deepEqual(results, ["a", "b", "c"]);
    assert.deepEqual(events, ["a:start", "a:end", "b:start", "b:end", "c:start", "c:end"]);
  });

  it("lets different keys interleave and survives a failing holder", async () => {
    const events: string[] = [];
    const failing = withKeyLock("x", async () => {
      events.push("x1");
      throw new Error("boom");
    });
    const other = withKeyLock("y", async () => {
      events.push("y1");
      return "y";
    });
    const next = withKeyLock("x", async () => {
      events.push("x2");
      return "x";
    });
    await assert.rejects(failing, /boom/);
    assert.equal(await other, "y");
    assert.equal(await next, "x");
    assert.deepEqual(events.sort(), ["x1", "x2", "y1"]);
  });
});
