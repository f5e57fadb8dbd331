import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { describe, it } from "node:test";
import fc from "fast-check";
import {
  CanonicalJsonError,
  canonicalJson,
  compareCodePoints,
  hashCanonical,
  sha256Hex,
} from "../../src/core/canonical-json.ts";

/** Rebuilds a JSON value with its object keys inserted in a random order. */
function shuffleKeys(value: unknown, random: () => number): unknown {
  if (Array.isArray(value)) return value.map((v) => shuffleKeys(v, random));
  if (typeof value === "object" && value !== null) {
    const entries = Object.entries(value);
    for (let i = entries.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      const a = entries[i];
      const b = entries[j];
      if (a !== undefined && b !== undefined) {
        entries[i] = b;
        entries[j] = a;
      }
    }
    const out: Record<string, unknown> = {};
    for (const [k, v] of entries) {
      Object.defineProperty(out, k, {
        value: shuffleKeys(v, random),
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
    return out;
  }
  return value;
}

function expectInvalid(value: unknown, pointer: string): void {
  assert.throws(
    () => canonicalJson(value),
    (error: unknown) =>
      error instanceof CanonicalJsonError &&
      error.code === "canonical_json_invalid" &&
      error.pointer === pointer,
  );
}

describe("canonicalJson", () => {
  it("sorts keys and uses compact separators", () => {
    assert.equal(canonicalJson({ b: 1, a: { d: [1, 2], c: null } }), '{"a":{"c":null,"d":[1,2]},"b":1}');
    assert.equal(canonicalJson([]), "[]");
    assert.equal(canonicalJson({}), "{}");
    assert.equal(canonicalJson("x\ny\u2028"), JSON.stringify("x\ny\u2028"));
    assert.equal(canonicalJson(true), "true");
    assert.equal(canonicalJson(null), "null");
  });

  it("sorts keys by code point, not by UTF-16 code unit", () => {
    // U+FFFF sorts before U+10000 by code point; by code unit "\uD800..." would come first.
    assert.equal(canonicalJson({ "\u{10000}": 1, "\uffff": 2 }), '{"\uffff":2,"\u{10000}":1}');
    assert.ok(compareCodePoints("\uffff", "\u{10000}") < 0);
    assert.ok(compareCodePoints("a", "ab") < 0);
    assert.equal(compareCodePoints("\u{1F600}x", "\u{1F600}x"), 0);
  });

  it("writes -0 as 0 and numbers in shortest form", () => {
    assert.equal(canonicalJson(-0), "0");
    assert.equal(canonicalJson({ a: -0 }), '{"a":0}');
    assert.equal(canonicalJson(1e21), "1e+21");
    assert.equal(canonicalJson(0.1), "0.1");
  });

  it("keeps a __proto__ key as data", () => {
    const value = JSON.parse('{"__proto__":{"x":1},"a":2}');
    assert.equal(canonicalJson(value), '{"__proto__":{"x":1},"a":2}');
  });

  it("refuses values JSON cannot hold, naming where", () => {
    expectInvalid(Number.NaN, "");
    expectInvalid({ a: [1, Number.POSITIVE_INFINITY] }, "/a/1");
    expectInvalid({ a: Number.NEGATIVE_INFINITY }, "/a");
    expectInvalid({ a: undefined }, "/a");
    expectInvalid([undefined], "/0");
    expectInvalid(undefined, "");
    expectInvalid({ n: 10n }, "/n");
    expectInvalid({ f: () => 1 }, "/f");
    expectInvalid({ s: Symbol("x") }, "/s");
    expectInvalid({ "a/b": { d: new Date(0) } }, "/a~1b/d");
    expectInvalid(new Map(), "");
    expectInvalid({ set: new Set([1]) }, "/set");
    expectInvalid({ r: /x/ }, "/r");
    expectInvalid({ u: new Uint8Array(2) }, "/u");
    expectInvalid({ b: new String("x") }, "/b");
    class Point {
      x = 1;
    }
    expectInvalid(new Point(), "");
    expectInvalid({ [Symbol("k")]: 1 }, "");
    // biome-ignore lint/suspicious/noSparseArray: a hole is what is being tested
    expectInvalid([1, , 3], "/1");
  });

  it("refuses cycles but accepts shared references", () => {
    const shared = { x: 1 };
    assert.equal(canonicalJson({ a: shared, b: shared }), '{"a":{"x":1},"b":{"x":1}}');
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic.self = cyclic;
    expectInvalid(cyclic, "/self");
    const list: unknown[] = [];
    list.push([list]);
    expectInvalid(list, "/0/0");
  });

  it("refuses nesting deeper than the bound instead of overflowing", () => {
    let deep: unknown = 1;
    for (let i = 0; i < 5000; i++) deep = [deep];
    assert.throws(() => canonicalJson(deep), CanonicalJsonError);
  });

  it("accepts null-prototype objects", () => {
    const bare = Object.create(null) as Record<string, unknown>;
    bare.z = 1;
    bare.a = 2;
    assert.equal(canonicalJson(bare), '{"a":2,"z":1}');
  });

  it("property: output parses back to the same value and re-canonicalizes identically", () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        const text = canonicalJson(value);
        const parsed: unknown = JSON.parse(text);
        assert.equal(canonicalJson(parsed), text);
        // JSON.parse round trip: same value (with -0 normalized to 0 as JSON does).
        assert.deepEqual(parsed, JSON.parse(JSON.stringify(value)));
      }),
      { numRuns: 300 },
    );
  });

  it("property: key insertion order does not matter", () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.integer({ min: 1, max: 2 ** 31 - 1 }), (value, seed) => {
        let state = seed;
        const random = () => {
          state = (state * 48271) % 2147483647;
          return state / 2147483647;
        };
        assert.equal(canonicalJson(shuffleKeys(value, random)), canonicalJson(value));
      }),
      { numRuns: 300 },
    );
  });

  it("property: agrees with JSON.stringify of a code-point-sorted copy", () => {
    const sorted = (value: unknown): unknown => {
      if (Array.isArray(value)) return value.map(sorted);
      if (typeof value === "object" && value !== null) {
        const out: Record<string, unknown> = {};
        for (const key of Object.keys(value).sort(compareCodePoints)) {
          const v = sorted((value as Record<string, unknown>)[key]);
          Object.defineProperty(out, key, { value: v, enumerable: true, writable: true, configurable: true });
        }
        return out;
      }
      return value;
    };
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        // Integer-like keys are the one place JSON.stringify reorders on its own.
        fc.pre(!JSON.stringify(value).match(/"\d+":/));
        assert.equal(canonicalJson(value), JSON.stringify(sorted(value)));
      }),
      { numRuns: 300 },
    );
  });
});

describe("hashing", () => {
  it("sha256Hex hashes strings as UTF-8 and bytes as given", () => {
    assert.equal(sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    assert.equal(sha256Hex("é"), createHash("sha256").update(Buffer.from("é", "utf8")).digest("hex"));
    assert.equal(sha256Hex(new Uint8Array([0x61, 0x62, 0x63])), sha256Hex("abc"));
  });

  it("hashCanonical is the sha256 of the canonical form, independent of key order", () => {
    const h = hashCanonical({ b: 2, a: 1 });
    assert.match(h, /^sha256:[0-9a-f]{64}$/);
    assert.equal(h, `sha256:${sha256Hex('{"a":1,"b":2}')}`);
    assert.equal(hashCanonical({ a: 1, b: 2 }), h);
    assert.notEqual(hashCanonical({ a: 1, b: 3 }), h);
  });
});
