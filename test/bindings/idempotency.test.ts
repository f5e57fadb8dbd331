import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { createIdempotency, readIdempotencyKey, type WorkResult } from "../../src/bindings/idempotency.ts";
import { hashCanonical } from "../../src/core/canonical-json.ts";
import { AuthorityError } from "../../src/errors.ts";
import { openStore } from "../../src/store/index.ts";
import type { Store } from "../../src/store/store.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

const hashA = hashCanonical({ request: "a" });
const hashB = hashCanonical({ request: "b" });

function counting(result: WorkResult, delayMs = 0) {
  let calls = 0;
  return {
    calls: () => calls,
    work: async () => {
      calls++;
      if (delayMs > 0) await sleep(delayMs);
      return result;
    },
  };
}

const ok = (n: number): WorkResult => ({ response: { status_code: 200, body: { n } }, keep: true });

function isCode(code: string) {
  return (error: unknown) => error instanceof AuthorityError && error.code === code;
}

describe("idempotency", () => {
  let dir: TempDir;
  let store: Store;
  before(async () => {
    dir = await makeTempDir("idempotency-");
    store = await openStore(`sqlite:${join(dir.path, "s.db")}`);
  });
  after(async () => {
    await store.close();
    await dir.cleanup();
  });

  it("requires a well-formed key", () => {
    assert.throws(() => readIdempotencyKey(undefined), isCode("idempotency_key_required"));
    assert.throws(() => readIdempotencyKey(""), isCode("idempotency_key_required"));
    assert.throws(() => readIdempotencyKey(["a", "b"]), isCode("invalid_request"));
    assert.throws(() => readIdempotencyKey(" padded "), isCode("invalid_request"));
    assert.throws(() => readIdempotencyKey("x".repeat(256)), isCode("invalid_request"));
    assert.equal(readIdempotencyKey("order-42 retry"), "order-42 retry");
  });

  it("runs once and replays the stored result", async () => {
    const idem = createIdempotency({ store });
    const counter = counting(ok(1));
    const first = await idem.run("b1", "k-replay", hashA, counter.work);
    const second = await idem.run("b1", "k-replay", hashA, counter.work);
    assert.equal(counter.calls(), 1);
    assert.deepEqual(first, { response: ok(1).response, replayed: false });
    assert.deepEqual(second, { response: ok(1).response, replayed: true });
  });

  it("refuses the same key with another request", async () => {
    const idem = createIdempotency({ store });
    await idem.run("b1", "k-conflict", hashA, counting(ok(1)).work);
    await assert.rejects(
      idem.run("b1", "k-conflict", hashB, counting(ok(2)).work),
      isCode("idempotency_conflict"),
    );
    // Keys are per binding.
    const other = await idem.run("b2", "k-conflict", hashB, counting(ok(3)).work);
    assert.equal(other.replayed, false);
  });

  it("lets concurrent duplicates share one execution, in one process and across two", async () => {
    const here = createIdempotency({ store });
    const there = createIdempotency({ store, pollMs: 5 });
    const counter = counting(ok(7), 100);
    const results = await Promise.all([
      here.run("b1", "k-concurrent", hashA, counter.work),
      here.run("b1", "k-concurrent", hashA, counter.work),
      there.run("b1", "k-concurrent", hashA, counter.work),
    ]);
    assert.equal(counter.calls(), 1);
    assert.deepEqual(
      results.map((r) => r.replayed),
      [false, true, true],
    );
    for (const result of results) assert.deepEqual(result.response, ok(7).response);
  });

  it("answers 409 when the first request is still running after the wait", async () => {
    const here = createIdempotency({ store });
    const there = createIdempotency({ store, waitMs: 50, pollMs: 5 });
    const slow = counting(ok(1), 300);
    const first = here.run("b1", "k-slow", hashA, slow.work);
    await sleep(20);
    await assert.rejects(there.run("b1", "k-slow", hashA, counting(ok(2)).work), isCode("conflict"));
    await first;
  });

  it("releases the key when the result is not kept or the work fails", async () => {
    const idem = createIdempotency({ store });
    const denied = counting({ response: { status_code: 403, body: {} }, keep: false });
    await idem.run("b1", "k-release", hashA, denied.work);
    await idem.run("b1", "k-release", hashA, denied.work);
    assert.equal(denied.calls(), 2);
    await assert.rejects(
      idem.run("b1", "k-fail", hashA, async () => {
        throw new Error("fault");
      }),
      /fault/,
    );
    const retried = await idem.run("b1", "k-fail", hashB, counting(ok(5)).work);
    assert.equal(retried.replayed, false);
  });

  it("marks a fault after `sending` unknown, unless the work says nothing was sent", async () => {
    const idem = createIdempotency({ store });
    const fault = (withdraw: boolean) => async (sending: () => Promise<void>, unsent: () => void) => {
      await sending();
      if (withdraw) unsent(); // what followed `sending` failed before any call left
      throw new Error("fault");
    };
    await assert.rejects(idem.run("b1", "k-sent-fault", hashA, fault(false)), /fault/);
    await assert.rejects(
      idem.run("b1", "k-sent-fault", hashA, counting(ok(6)).work),
      isCode("idempotency_outcome_unknown"),
    );
    await assert.rejects(idem.run("b1", "k-unsent-fault", hashA, fault(true)), /fault/);
    const retry = counting(ok(7));
    assert.equal((await idem.run("b1", "k-unsent-fault", hashA, retry.work)).replayed, false);
    assert.equal(retry.calls(), 1);
  });
});
