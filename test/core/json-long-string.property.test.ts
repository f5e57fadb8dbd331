/**
 * jsonParserTakingString (the sidecar's reading of the authority's policy answer): whatever the
 * bytes, the result is what JSON.parse makes of their UTF-8 text — the same value, or a refusal.
 * The shortcut takes the value of the top-level key from the bytes; every way of placing,
 * repeating, spelling or breaking that key or its value must come out as JSON.parse decides.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { base64BytesDecoded, jsonParserDecodingBase64 } from "../../src/core/json-long-string.ts";

const parse = jsonParserDecodingBase64("signed_policy");

function outcome<T>(run: () => T): { value: T } | { refused: string } {
  try {
    return { value: run() };
  } catch (error) {
    return { refused: error instanceof Error ? error.name : String(error) };
  }
}

/** The parse gives JSON.parse's value (its signed_policy decoded from base64 when it says so), or the same refusal. */
function assertAsJsonParse(bytes: Buffer): void {
  const where = bytes.toString("latin1").slice(0, 300);
  const expected = outcome(() => JSON.parse(bytes.toString("utf8")) as unknown);
  const actual = outcome(() => parse(bytes));
  if ("value" in actual && actual.value.decoded !== undefined) {
    assert.ok("value" in expected, where);
    const object = expected.value as Record<string, unknown>;
    assert.equal(typeof object.signed_policy, "string", where);
    assert.ok(actual.value.decoded.equals(Buffer.from(object.signed_policy as string, "base64")), where);
    assert.deepStrictEqual(actual.value.json, { ...object, signed_policy: "" }, where);
    return;
  }
  assert.deepStrictEqual("value" in actual ? { value: actual.value.json } : actual, expected, where);
}

const BLOB = Buffer.alloc(3000, 7).toString("base64");
const FACTS = '"subject":{"partner_id":"p","identity":"platform_vouched"},"policy":{"head":1}';

describe("jsonParserDecodingBase64", () => {
  it("decodes the top-level key's base64 from the bytes, the rest as JSON.parse gives it", () => {
    const body = Buffer.from(`{${FACTS},"signed_policy":"${BLOB}"}`);
    const { json, decoded } = parse(body);
    assert.ok(decoded?.equals(Buffer.alloc(3000, 7)));
    assert.deepStrictEqual(json, { ...JSON.parse(body.toString()), signed_policy: "" });
    assertAsJsonParse(body);
  });

  it("decides as JSON.parse where the key is placed, repeated, spelled or broken otherwise", () => {
    const bodies = [
      // the key nested, and the top-level one spelled with spaces or an escape
      `{"a":{"signed_policy":"${BLOB}"},"signed_policy" : ""}`,
      `{"a":{"signed_policy":"${BLOB}"},"signed\\u005fpolicy":""}`,
      `{"signed_policy":"${BLOB}","signed\\u005fpolicy":"b"}`,
      `{"signed_policy":"${BLOB}","signed_policy":"b"}`,
      `{"signed_policy":"x","signed_policy":"${BLOB}"}`,
      `{"signed_policy":"${BLOB}","a":{"signed_policy":""}}`,
      // another member equal to whatever could stand in for the value while the rest is parsed
      ...["", "a", "b", "x"].flatMap((other) => [
        `{"a":{"signed_policy":"${BLOB}"},"signed\\u005fpolicy":"${other}"}`,
        `{"a":{"signed_policy":"${BLOB}"},"signed_policy" :"${other}"}`,
      ]),
      // the token inside another string, or as a key
      `{"a":"\\"signed_policy\\":\\"${BLOB}","signed_policy":""}`,
      `{"signed_policy":"${BLOB}":1}`,
      `{"x":"signed_policy","signed_policy":"${BLOB}"}`,
      // the value with escapes, control characters, non-ASCII, or not a string
      `{"signed_policy":"${BLOB}\\u0041"}`,
      `{"signed_policy":"${BLOB}\\n"}`,
      `{"signed_policy":"${BLOB}\n"}`,
      `{"signed_policy":"${BLOB}\t"}`,
      `{"signed_policy":"${BLOB}\u0000"}`,
      `{"signed_policy":"${BLOB}é"}`,
      `{"signed_policy":null}`,
      `{"signed_policy":"${BLOB}`,
      `{"signed_policy":"${BLOB}"`,
      `{"signed_policy":"${BLOB}"}}`,
      `{"signed_policy":"${BLOB}"} x`,
      `["signed_policy","${BLOB}"]`,
      `{"a":["signed_policy":"${BLOB}"]}`,
      `\uFEFF{"signed_policy":"${BLOB}"}`,
      `{"__proto__":{"signed_policy":"x"},"signed_policy":"${BLOB}"}`,
      `{"signed_policy":""}`,
      `{}`,
      ``,
    ];
    for (const body of bodies) assertAsJsonParse(Buffer.from(body));
    // invalid UTF-8 around the value
    assertAsJsonParse(
      Buffer.concat([
        Buffer.from('{"a":"'),
        Buffer.from([0xc3]),
        Buffer.from(`","signed_policy":"${BLOB}"}`),
      ]),
    );
    assertAsJsonParse(
      Buffer.concat([Buffer.from(`{"signed_policy":"${BLOB}`), Buffer.from([0xff, 0x22, 0x7d])]),
    );
  });

  it("finds a control character or a backslash wherever it stands in a long value", () => {
    for (const bad of ["\u0000", "\u0001", "\n", "\u001f", "\\"]) {
      for (const at of [
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        100,
        BLOB.length - 3,
        BLOB.length - 2,
        BLOB.length - 1,
        BLOB.length,
      ]) {
        for (const shift of ["", " ", "  ", "   "]) {
          assertAsJsonParse(
            Buffer.from(`{${shift}"signed_policy":"${BLOB.slice(0, at)}${bad}${BLOB.slice(at)}"}`),
          );
        }
      }
    }
    // not base64, but a string JSON.parse takes: parsed whole
    const spaced = `${BLOB.slice(0, 9)} !${BLOB.slice(9)}`;
    const { json, decoded } = parse(Buffer.from(`{"signed_policy":"${spaced}"}`));
    assert.equal(decoded, undefined);
    assert.equal((json as { signed_policy: string }).signed_policy, spaced);
  });

  it("gives JSON.parse's result for bodies built from the pieces an answer can go wrong with (property)", () => {
    const piece = fc.constantFrom(
      '"signed_policy":"',
      '"signed_policy"',
      '"signed\\u005fpolicy"',
      '"',
      ":",
      ",",
      "{",
      "}",
      "[",
      "]",
      " ",
      "\\",
      '\\"',
      "\\u0041",
      "\n",
      "\u0001",
      "é",
      "null",
      "1",
      '"a"',
      BLOB.slice(0, 40),
      FACTS,
    );
    fc.assert(
      fc.property(fc.array(piece, { maxLength: 14 }), fc.uint8Array({ maxLength: 3 }), (pieces, raw) => {
        assertAsJsonParse(Buffer.from(pieces.join("")));
        assertAsJsonParse(Buffer.concat([Buffer.from(pieces.join("")), raw]));
      }),
      { numRuns: 3000 },
    );
  });

  it("gives JSON.parse's result for any JSON object with the key set anywhere (property)", () => {
    const base64 = fc.string({ unit: fc.constantFrom(..."ABCxyz019+/="), maxLength: 60 });
    fc.assert(
      fc.property(
        fc.dictionary(fc.string({ maxLength: 6 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 }),
        base64,
        fc.nat(),
        (object, value, at) => {
          const text = JSON.stringify({ ...object, signed_policy: value });
          assertAsJsonParse(Buffer.from(text));
          // the same key again at another place (JSON.parse keeps the last)
          const cut = at % (text.length + 1);
          assertAsJsonParse(
            Buffer.from(`${text.slice(0, cut)}"signed_policy":"${value}",${text.slice(cut)}`),
          );
        },
      ),
      { numRuns: 2000 },
    );
  });

  it("refuses a key that would need escaping", () => {
    assert.throws(() => jsonParserDecodingBase64('a"b'), TypeError);
    assert.throws(() => jsonParserDecodingBase64(""), TypeError);
  });
});

describe("base64BytesDecoded", () => {
  const decodedAsNode = (text: string) => {
    const decoded = base64BytesDecoded(Buffer.from(text, "latin1"));
    if (decoded !== undefined) assert.ok(decoded.equals(Buffer.from(text, "base64")), text.slice(0, 80));
    return decoded;
  };

  it("decodes strict base64 of any length as Buffer.from does, across its chunks", () => {
    for (const size of [0, 1, 2, 3, 4, 5, 49_151, 49_152, 49_153, 200_000]) {
      const bytes = Buffer.from(Buffer.alloc(size, 0).map((_, i) => (i * 7919) % 251));
      assert.ok(decodedAsNode(bytes.toString("base64"))?.equals(bytes), String(size));
    }
  });

  it("gives undefined for anything but strict base64, never other bytes (property)", () => {
    const big = Buffer.from(Buffer.alloc(150_000).map((_, i) => (i * 31) % 256)).toString("base64");
    const junk = fc.constantFrom("=", "==", "===", " ", "!", "-", "_", "\u007f", "é", "A", "AA", "AAA");
    fc.assert(
      fc.property(
        fc.uint8Array({ maxLength: 40 }),
        junk,
        fc.nat(),
        fc.boolean(),
        (bytes, inserted, at, long) => {
          const text = long ? big : Buffer.from(bytes).toString("base64");
          // a character inserted, one removed, or the edge of a chunk (65,536 characters)
          const cut = long ? 65_536 + (at % 9) - 4 : at % (text.length + 1);
          decodedAsNode(`${text.slice(0, cut)}${inserted}${text.slice(cut)}`);
          decodedAsNode(`${text.slice(0, cut)}${text.slice(cut + 1)}`);
          const withPad = `${text.slice(0, cut)}=${text.slice(cut + 1)}`;
          if (cut < text.length - 2) assert.equal(decodedAsNode(withPad), undefined, "a = inside");
        },
      ),
      { numRuns: 400 },
    );
  });
});
