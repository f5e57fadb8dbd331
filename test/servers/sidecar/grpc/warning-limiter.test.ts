import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { createWarningLimiter } from "../../../../src/servers/sidecar/grpc/warning-limiter.ts";

function recorder() {
  const lines: Array<{ obj: Record<string, unknown>; msg: string }> = [];
  return { lines, logger: { warn: (obj: Record<string, unknown>, msg: string) => lines.push({ obj, msg }) } };
}

test("one line per kind per interval; the next one counts what was left out", () => {
  let now = 0;
  const { lines, logger } = recorder();
  const limiter = createWarningLimiter(logger, 10_000, () => now);
  for (let i = 0; i < 900; i++) limiter.warn("incomplete", { requestId: `r${i}` }, "denied");
  limiter.warn("malformed", { requestId: "m" }, "denied");
  assert.deepEqual(lines, [
    { obj: { requestId: "r0" }, msg: "denied" },
    { obj: { requestId: "m" }, msg: "denied" },
  ]);
  now = 9_999;
  limiter.warn("incomplete", { requestId: "late" }, "denied");
  assert.equal(lines.length, 2);
  now = 10_000;
  limiter.warn("incomplete", { requestId: "next" }, "denied");
  assert.deepEqual(lines.at(-1), { obj: { requestId: "next", suppressed: 900 }, msg: "denied" });
  now = 30_000;
  limiter.warn("incomplete", { requestId: "quiet" }, "denied");
  assert.deepEqual(lines.at(-1), { obj: { requestId: "quiet" }, msg: "denied" });
});

test("property: lines written never exceed one per interval per kind, and nothing is lost from the count", () => {
  fc.assert(
    fc.property(
      fc.array(fc.record({ gap: fc.integer({ min: 0, max: 5_000 }), kind: fc.constantFrom("a", "b") }), {
        maxLength: 300,
      }),
      (events) => {
        let now = 0;
        const { lines, logger } = recorder();
        const limiter = createWarningLimiter(logger, 1_000, () => now);
        const written: Record<string, number[]> = { a: [], b: [] };
        const leftOutSinceLastLine: Record<string, number> = { a: 0, b: 0 };
        for (const { gap, kind } of events) {
          now += gap;
          const before = lines.length;
          limiter.warn(kind, { kind }, "w");
          if (lines.length > before) {
            written[kind]?.push(now);
            leftOutSinceLastLine[kind] = 0;
          } else {
            leftOutSinceLastLine[kind] = (leftOutSinceLastLine[kind] ?? 0) + 1;
          }
        }
        for (const times of Object.values(written)) {
          for (let i = 1; i < times.length; i++) assert.ok((times[i] ?? 0) - (times[i - 1] ?? 0) >= 1_000);
        }
        // Every event is a line, counted in a later line's `suppressed`, or left out since the last line.
        for (const kind of ["a", "b"]) {
          const total = events.filter((event) => event.kind === kind).length;
          const kindLines = lines.filter((line) => line.obj.kind === kind);
          const reported = kindLines.reduce((sum, line) => sum + 1 + Number(line.obj.suppressed ?? 0), 0);
          assert.equal(reported + (leftOutSinceLastLine[kind] ?? 0), total);
        }
      },
    ),
  );
});
