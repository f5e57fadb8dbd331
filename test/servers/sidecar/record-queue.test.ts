import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import { createRecordQueue } from "../../../src/servers/sidecar/record-queue.ts";

type Op =
  | { readonly kind: "push"; readonly value: unknown }
  | { readonly kind: "drop"; readonly count: number }
  | { readonly kind: "peek"; readonly count: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc
      .oneof(
        fc.jsonValue({ maxDepth: 2 }),
        // Large records make the buffer grow and compact.
        fc.string({ unit: "grapheme", minLength: 1000, maxLength: 40_000 }),
      )
      .map((value) => ({ kind: "push" as const, value })),
  },
  { weight: 2, arbitrary: fc.nat(6).map((count) => ({ kind: "drop" as const, count })) },
  { weight: 2, arbitrary: fc.nat(8).map((count) => ({ kind: "peek" as const, count })) },
);

describe("record queue (decision records outside the JS heap)", () => {
  test("property: behaves as an array of JSON texts under any sequence of pushes, drops and peeks", () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 80 }), (ops) => {
        const queue = createRecordQueue();
        const model: unknown[] = [];
        for (const step of ops) {
          if (step.kind === "push") {
            queue.push(JSON.stringify(step.value));
            model.push(JSON.parse(JSON.stringify(step.value)));
          } else if (step.kind === "drop") {
            queue.drop(step.count);
            model.splice(0, step.count);
          } else {
            const bytes = queue.peekArray(step.count);
            assert.deepEqual(JSON.parse(bytes.toString("utf8")), model.slice(0, step.count));
            // countWithin: the most leading records whose array fits, never fewer than one.
            const limit = 2_000 + step.count * 3_000;
            const fits = queue.countWithin(step.count, limit);
            const expected = Math.min(step.count, model.length);
            if (expected > 0) {
              assert.ok(fits >= 1 && fits <= expected);
              if (fits > 1) assert.ok(queue.peekArray(fits).length <= limit);
              if (fits < expected) assert.ok(queue.peekArray(fits + 1).length > limit);
            }
          }
          assert.equal(queue.length, model.length);
        }
        assert.deepEqual(JSON.parse(queue.peekArray(model.length).toString("utf8")), model);
      }),
      { numRuns: 300 },
    );
  });

  test("a long stream through a small window keeps its order (the buffer compacts and grows)", () => {
    const queue = createRecordQueue();
    let next = 0;
    let expected = 0;
    for (let round = 0; round < 2000; round++) {
      for (let i = 0; i < 7; i++) queue.push(JSON.stringify({ n: next++, pad: "é".repeat(200) }));
      const batch = JSON.parse(queue.peekArray(5).toString("utf8")) as Array<{ n: number }>;
      assert.deepEqual(
        batch.map((record) => record.n),
        [0, 1, 2, 3, 4].map((i) => expected + i),
      );
      queue.drop(5);
      expected += 5;
    }
    assert.equal(queue.length, next - expected);
    queue.drop(queue.length);
    assert.equal(queue.length, 0);
    assert.equal(queue.peekArray(3).toString(), "[]");
  });
});
