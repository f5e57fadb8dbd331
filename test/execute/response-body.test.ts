import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import {
  decodeTextLeniently,
  looksLikeJson,
  RedactionDecodeError,
  readForRedaction,
} from "../../src/execute/response-body.ts";

const DOC = { card_number: "4111111111111111", password: "hunter2-hunter2" };
const TEXT = JSON.stringify(DOC);
const BOM8 = Buffer.from([0xef, 0xbb, 0xbf]);

function utf16be(text: string): Buffer {
  return Buffer.from(text, "utf16le").swap16();
}

function refused(bytes: Uint8Array, type: string | undefined, rules = false): string {
  try {
    readForRedaction(bytes, type, rules);
  } catch (error) {
    assert.ok(error instanceof RedactionDecodeError, String(error));
    return error.issue;
  }
  assert.fail("expected RedactionDecodeError");
}

describe("readForRedaction", () => {
  it("decodes JSON behind a byte-order mark or in a declared or detected UTF-16", () => {
    const cases: Array<[string, Buffer, string | undefined]> = [
      ["UTF-8", Buffer.from(TEXT), "application/json"],
      ["UTF-8 BOM", Buffer.concat([BOM8, Buffer.from(TEXT)]), "application/json"],
      [
        "UTF-16LE BOM",
        Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(TEXT, "utf16le")]),
        "application/json",
      ],
      ["UTF-16BE BOM", Buffer.concat([Buffer.from([0xfe, 0xff]), utf16be(TEXT)]), "text/plain"],
      ["charset=utf-16le", Buffer.from(TEXT, "utf16le"), "application/json; charset=UTF-16LE"],
      ['charset="utf-16be"', utf16be(TEXT), 'application/json; charset="utf-16be"'],
      ["UTF-16LE without BOM or charset", Buffer.from(TEXT, "utf16le"), "application/json"],
      ["UTF-16BE, no type", utf16be(TEXT), undefined],
      ["latin1 charset", Buffer.from(TEXT, "latin1"), "application/json; charset=iso-8859-1"],
    ];
    for (const [name, bytes, type] of cases) {
      const read = readForRedaction(bytes, type, false);
      assert.equal(read.kind, "json", name);
      if (read.kind === "json") assert.deepEqual(read.value, DOC, name);
    }
    const plain = readForRedaction(Buffer.from(TEXT), "application/json", false);
    assert.ok(plain.kind === "json" && plain.plainUtf8);
    const bom = readForRedaction(Buffer.concat([BOM8, Buffer.from(TEXT)]), "application/json", false);
    assert.ok(bom.kind === "json" && !bom.plainUtf8);
  });

  it("reads NDJSON line by line and refuses a line that is not JSON", () => {
    const body = Buffer.from(`${TEXT}\r\n\n${JSON.stringify({ password: "x2" })}\n`);
    const read = readForRedaction(body, "application/x-ndjson", false);
    assert.equal(read.kind, "ndjson");
    if (read.kind === "ndjson") assert.deepEqual(read.values, [DOC, { password: "x2" }]);
    assert.equal(refused(Buffer.from(`${TEXT}\nnot json\n`), "application/x-ndjson"), "not_json");
    // NDJSON under a JSON type is not one document: refused.
    assert.equal(refused(Buffer.from(`${TEXT}\n${TEXT}`), "application/json"), "not_json");
  });

  it("refuses what is not JSON when redaction applies: trailing bytes, NaN, JSONP, bad bytes, unknown charset", () => {
    assert.equal(refused(Buffer.from(`${TEXT} trailing`), "application/json"), "not_json");
    assert.equal(refused(Buffer.from(`${TEXT}}`), "text/plain"), "not_json");
    assert.equal(refused(Buffer.from('{"n":NaN,"password":"x"}'), "application/json"), "not_json");
    assert.equal(refused(Buffer.from(`cb(${TEXT});`), "application/json"), "not_json");
    assert.equal(refused(Buffer.from(`cb(${TEXT});`), "application/javascript", true), "content_type");
    assert.equal(refused(Buffer.from(`<p>${TEXT}</p>`), "text/html", true), "content_type");
    assert.equal(
      refused(
        Buffer.concat([Buffer.from(TEXT.slice(0, -1)), Buffer.from([0xff]), Buffer.from("}")]),
        "text/plain",
      ),
      "charset",
    );
    assert.equal(refused(Buffer.from(TEXT), "application/json; charset=x-unknown-42"), "charset");
  });

  it("with rules, a body not declared (ND)JSON is refused even when it parses", () => {
    for (const type of [
      "text/plain",
      "text/html",
      "application/octet-stream",
      "application/javascript",
      undefined,
    ]) {
      assert.equal(refused(Buffer.from(TEXT), type, true), "content_type", String(type));
    }
    assert.equal(readForRedaction(Buffer.from(TEXT), "application/problem+json", true).kind, "json");
    assert.equal(readForRedaction(Buffer.from(`${TEXT}\n`), "application/x-ndjson", true).kind, "ndjson");
  });

  it("without rules, bodies that are not JSON by type or content pass as they are", () => {
    assert.equal(
      readForRedaction(Buffer.from(`cb(${TEXT});`), "application/javascript", false).kind,
      "other",
    );
    assert.equal(readForRedaction(Buffer.from("<html>hi</html>"), "text/html", false).kind, "other");
    assert.equal(readForRedaction(Buffer.from([0x89, 0x50, 0x4e, 0x47]), "image/png", false).kind, "other");
    assert.equal(readForRedaction(new Uint8Array(0), "application/json", true).kind, "empty");
    // JSON under a binary type is still redacted.
    assert.equal(readForRedaction(Buffer.from(` ${TEXT}`), "application/octet-stream", false).kind, "json");
  });

  it("looksLikeJson sees the first significant character through whitespace, BOMs and NULs", () => {
    assert.equal(looksLikeJson(Buffer.from("  \n[1]")), "yes");
    assert.equal(looksLikeJson(Buffer.concat([Buffer.from([0xfe, 0xff]), utf16be("{}")])), "yes");
    assert.equal(looksLikeJson(Buffer.from("<html>")), "no");
    assert.equal(looksLikeJson(Buffer.from("   ")), "unknown");
  });

  it("decodeTextLeniently honours a BOM and the charset", () => {
    assert.equal(
      decodeTextLeniently(
        Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from("hé", "utf16le")]),
        "text/plain",
      ),
      "hé",
    );
    assert.equal(decodeTextLeniently(Buffer.from("hé", "latin1"), "text/plain; charset=iso-8859-1"), "hé");
    assert.equal(decodeTextLeniently(Buffer.from("hé"), "text/plain; charset=nonsense"), "hé");
  });

  it("property: any JSON document in any supported encoding reads back as the same value", () => {
    const encodings: Record<string, (text: string) => [Buffer, string]> = {
      utf8: (t) => [Buffer.from(t), "application/json"],
      utf8Bom: (t) => [Buffer.concat([BOM8, Buffer.from(t)]), "application/json"],
      utf16leBom: (t) => [
        Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(t, "utf16le")]),
        "text/plain",
      ],
      utf16beBom: (t) => [Buffer.concat([Buffer.from([0xfe, 0xff]), utf16be(t)]), "application/problem+json"],
      utf16leCharset: (t) => [Buffer.from(t, "utf16le"), "application/json; charset=utf-16le"],
    };
    fc.assert(
      fc.property(
        fc.oneof(fc.array(fc.jsonValue()), fc.dictionary(fc.string(), fc.jsonValue())),
        fc.constantFrom(...Object.keys(encodings)),
        (value, name) => {
          const [bytes, type] = (encodings[name] as (t: string) => [Buffer, string])(JSON.stringify(value));
          const read = readForRedaction(bytes, type, false);
          return read.kind === "json" && JSON.stringify(read.value) === JSON.stringify(value);
        },
      ),
      { numRuns: 300 },
    );
  });

  it("property: with rules, random bytes are JSON or refused, never passed through", () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 1, maxLength: 64 }),
        fc.constantFrom("text/html", "application/octet-stream", undefined),
        (bytes, type) => {
          try {
            const read = readForRedaction(bytes, type, true);
            return read.kind === "json";
          } catch (error) {
            return error instanceof RedactionDecodeError;
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});
