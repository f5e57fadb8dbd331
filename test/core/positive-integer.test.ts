import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { positiveIntegerOption } from "../../src/core/positive-integer.ts";

class OptionError extends Error {}
const fail = (message: string): never => {
  throw new OptionError(message);
};

describe("positiveIntegerOption", () => {
  it("gives the value, or the fallback when absent", () => {
    assert.equal(positiveIntegerOption(undefined, 5, "n"), 5);
    assert.equal(positiveIntegerOption(null, 5, "n"), 5);
    fc.assert(
      fc.property(fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }), (n) => {
        assert.equal(positiveIntegerOption(n, 1, "n", fail), n);
      }),
    );
  });

  it("refuses anything else through the caller's error, naming the option", () => {
    const bad = fc.oneof(
      fc.integer({ max: 0 }),
      fc.double().filter((d) => !Number.isSafeInteger(d)),
      fc.constantFrom(Number.MAX_SAFE_INTEGER + 2, Number.NaN, Number.POSITIVE_INFINITY),
      fc.string(),
      fc.boolean(),
      fc.object(),
    );
    fc.assert(
      fc.property(bad, (value) => {
        assert.throws(
          () => positiveIntegerOption(value, 1, "cache.max", fail),
          new OptionError("cache.max must be a positive integer"),
        );
      }),
    );
    assert.throws(() => positiveIntegerOption(0, 1, "n"), TypeError);
  });
});
