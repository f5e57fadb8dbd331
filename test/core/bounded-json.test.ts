import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import {
  checkJsonBounds,
  JSON_LIMITS,
  JsonLimitError,
  type JsonLimits,
  parseBoundedJson,
} from "../../src/core/bounded-json.ts";
import { canonicalJson } from "../../src/core/canonical-json.ts";
import { AuthorityError, toAuthorityError } from "../../src/errors.ts";

/** Reference: the deepest container nesting, the widest object and the longest pointer, recursively. */
function measure(value: unknown, depth = 1, pointer = 0): { depth: number; keys: number; pointer: number } {
  // A scalar's own pointer counts where it is a member of an object (its key), not as an array item.
  if (typeof value !== "object" || value === null) return { depth: 0, keys: 0, pointer: 0 };
  const out = { depth, keys: 0, pointer };
  const entries: [string, unknown][] = Array.isArray(value)
    ? value.map((v, i) => [String(i), v])
    : Object.entries(value);
  if (!Array.isArray(value)) out.keys = entries.length;
  for (const [key, child] of entries) {
    const childPointer = pointer + 1 + key.length;
    if (!Array.isArray(value) || (typeof child === "object" && child !== null))
      out.pointer = Math.max(out.pointer, childPointer);
    const inner = measure(child, depth + 1, childPointer);
    out.depth = Math.max(out.depth, inner.depth);
    out.keys = Math.max(out.keys, inner.keys);
    out.pointer = Math.max(out.pointer, inner.pointer);
  }
  return out;
}

const nested = (depth: number, open: string, close: string, leaf = ""): string =>
  `${open.repeat(depth)}${leaf}${close.repeat(depth)}`;

describe("bounded JSON (core/bounded-json.ts)", () => {
  it("refuses 100,000 levels of arrays or objects without overflowing, naming the limit", () => {
    for (const text of [nested(100_000, "[", "]"), nested(100_000, '{"a":', "}", "1")]) {
      assert.throws(
        () => parseBoundedJson(text),
        (error: unknown) =>
          error instanceof JsonLimitError &&
          error.reason === "depth" &&
          error.status === 400 &&
          error.code === "input_too_complex",
      );
    }
  });

  it("takes exactly the limits: depth 128, 10,000 keys, 4,096-character pointers", () => {
    assert.doesNotThrow(() => parseBoundedJson(nested(JSON_LIMITS.maxDepth, "[", "]")));
    assert.throws(() => parseBoundedJson(nested(JSON_LIMITS.maxDepth + 1, "[", "]")), /depth limit/);
    const wide = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, i]));
    assert.doesNotThrow(() => checkJsonBounds(wide(JSON_LIMITS.maxKeys)));
    assert.throws(() => checkJsonBounds({ inner: [wide(JSON_LIMITS.maxKeys + 1)] }), /keys limit/);
    assert.doesNotThrow(() => checkJsonBounds({ ["k".repeat(JSON_LIMITS.maxPointerLength - 1)]: 1 }));
    assert.throws(() => checkJsonBounds({ ["k".repeat(JSON_LIMITS.maxPointerLength)]: 1 }), /pointer limit/);
    // Long keys along one path add up.
    const path = { ["a".repeat(2048)]: { ["b".repeat(2048)]: { c: 1 } } };
    assert.throws(() => checkJsonBounds(path), /pointer limit/);
  });

  it("answers 400 input_too_complex through the one error table, without the value", () => {
    const error = toAuthorityError(
      (() => {
        try {
          parseBoundedJson(nested(200, '{"secret-looking-key":', "}", "1"));
        } catch (caught) {
          return caught;
        }
      })(),
    );
    assert.ok(error instanceof AuthorityError);
    assert.equal(error.status, 400);
    assert.deepEqual(error.toJSON().details, { reason: "depth", limit: 128, location: "body" });
    assert.doesNotMatch(JSON.stringify(error.toJSON()), /secret-looking-key/);
  });

  it("a text that is not JSON stays the parser's SyntaxError", () => {
    assert.throws(() => parseBoundedJson("{"), SyntaxError);
  });

  it("agrees with a recursive reference on any JSON value, and whatever passes can be serialized", () => {
    const small: JsonLimits = { maxDepth: 4, maxKeys: 3, maxPointerLength: 12 };
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 6 }), (value) => {
        const m = measure(value);
        const fits =
          m.depth <= small.maxDepth && m.keys <= small.maxKeys && m.pointer <= small.maxPointerLength;
        let threw: unknown;
        try {
          checkJsonBounds(value, "body", small);
        } catch (error) {
          threw = error;
        }
        if (fits) assert.equal(threw, undefined);
        else assert.ok(threw instanceof JsonLimitError, String(threw));
        if (threw === undefined) {
          assert.doesNotThrow(() => JSON.stringify(value));
          assert.doesNotThrow(() => canonicalJson(value));
        }
      }),
      { numRuns: 500 },
    );
  });
});
