import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import {
  encodeHeaderBlock,
  HpackDecoder,
  HpackError,
} from "../../../../../src/servers/sidecar/grpc/h2/hpack.ts";

function decoder(maxTableSize = 4096, maxHeaderListSize = 65_536): HpackDecoder {
  return new HpackDecoder({ maxTableSize, maxHeaderListSize });
}

function decodeAll(hpack: HpackDecoder, hex: string): Array<[string, string]> {
  const fields: Array<[string, string]> = [];
  hpack.decode(Buffer.from(hex.replaceAll(" ", ""), "hex"), (name, value) => fields.push([name, value]));
  return fields;
}

const first: Array<[string, string]> = [
  [":method", "GET"],
  [":scheme", "http"],
  [":path", "/"],
  [":authority", "www.example.com"],
];
const second: Array<[string, string]> = [...first, ["cache-control", "no-cache"]];
const third: Array<[string, string]> = [
  [":method", "GET"],
  [":scheme", "https"],
  [":path", "/index.html"],
  [":authority", "www.example.com"],
  ["custom-key", "custom-value"],
];

describe("HPACK decoder", () => {
  it("decodes RFC 7541 C.3: three requests sharing one dynamic table, plain strings", () => {
    const hpack = decoder();
    assert.deepEqual(decodeAll(hpack, "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d"), first);
    assert.deepEqual(decodeAll(hpack, "8286 84be 5808 6e6f 2d63 6163 6865"), second);
    assert.deepEqual(
      decodeAll(hpack, "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65"),
      third,
    );
  });

  it("decodes RFC 7541 C.4: the same requests with Huffman strings", () => {
    const hpack = decoder();
    assert.deepEqual(decodeAll(hpack, "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff"), first);
    assert.deepEqual(decodeAll(hpack, "8286 84be 5886 a8eb 1064 9cbf"), second);
    assert.deepEqual(decodeAll(hpack, "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf"), third);
  });

  it("evicts the oldest entries when the table is full, and follows size updates", () => {
    // Table of 64 bytes: each "x: 1234567890…" entry (1 + 20 + 32 = 53 bytes) evicts the one before.
    const hpack = decoder(64);
    const entry = (value: string) =>
      `40 01 78 ${value.length.toString(16).padStart(2, "0")} ${Buffer.from(value).toString("hex")}`;
    assert.deepEqual(decodeAll(hpack, entry("aaaaaaaaaaaaaaaaaaaa")), [["x", "aaaaaaaaaaaaaaaaaaaa"]]);
    assert.deepEqual(decodeAll(hpack, "be"), [["x", "aaaaaaaaaaaaaaaaaaaa"]]);
    assert.deepEqual(decodeAll(hpack, entry("bbbbbbbbbbbbbbbbbbbb")), [["x", "bbbbbbbbbbbbbbbbbbbb"]]);
    assert.deepEqual(decodeAll(hpack, "be"), [["x", "bbbbbbbbbbbbbbbbbbbb"]]);
    assert.throws(() => decodeAll(hpack, "bf"), HpackError);
    // Size update to 0 empties the table; then nothing is left to index.
    assert.throws(() => decodeAll(hpack, "20 be"), HpackError);
    // An entry larger than the table is not added, and not an error.
    const big = decoder(40);
    assert.deepEqual(decodeAll(big, entry("cccccccccccccccccccc")), [["x", "cccccccccccccccccccc"]]);
    assert.throws(() => decodeAll(big, "be"), HpackError);
  });

  it("refuses what is malformed or over the announced limits", () => {
    const bad = [
      "80", // index 0
      "ff 00", // index 127 beyond the static table, table empty
      "3f e2 1f", // size update to 4097, above the announced 4096
      "82 20", // size update after a field
      "00 05 61", // truncated name
      "0f ff ff ff ff ff 01", // integer too large
      "00 81 ff 01 61", // Huffman string that is all padding ones (8 bits)
      `3f ${"80 ".repeat(150)}00`, // an integer padded with zero-valued continuation bytes
      `00 7f ${"80 ".repeat(150)}00`, // the same as a string length
    ];
    for (const hex of bad) assert.throws(() => decodeAll(decoder(), hex), HpackError, hex);
    const small = decoder(4096, 64);
    assert.throws(
      () => decodeAll(small, encodeHeaderBlock([["a", "b".repeat(40)]]).toString("hex")),
      /too large/,
    );
  });

  it("any bytes either decode or fail with HpackError, and the decoder stays usable", () => {
    const hpack = decoder(256, 4096);
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (bytes) => {
        try {
          hpack.decode(bytes, () => undefined);
        } catch (error) {
          assert.ok(error instanceof HpackError, String(error));
        }
      }),
      { numRuns: 2000 },
    );
  });

  it("the encoder's blocks decode to what was encoded, long names and values included", () => {
    const fields: Array<[string, string]> = [
      [":status", "200"],
      ["content-type", "application/grpc+proto"],
      ["grpc-message", "x".repeat(300)],
    ];
    assert.deepEqual(decodeAll(decoder(), encodeHeaderBlock(fields).toString("hex")), fields);
  });
});
