import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { decodeHuffman, huffmanCodes } from "../../../../../src/servers/sidecar/grpc/h2/huffman.ts";

/** The encoder side, written plainly from the derived codes: only the tests need it. */
function encodeHuffman(bytes: Uint8Array): Buffer {
  const codes = huffmanCodes();
  let bits = "";
  for (const byte of bytes) {
    const { code, bits: length } = codes[byte] ?? { code: 0, bits: 0 };
    bits += code.toString(2).padStart(length, "0");
  }
  bits = bits.padEnd(Math.ceil(bits.length / 8) * 8, "1");
  return Buffer.from((bits.match(/.{8}/g) ?? []).map((octet) => Number.parseInt(octet, 2)));
}

const decode = (bytes: Buffer) => decodeHuffman(bytes, 0, bytes.length);

describe("HPACK Huffman code (RFC 7541 Appendix B)", () => {
  it("is a complete prefix code: the lengths satisfy Kraft's equality", () => {
    const sum = huffmanCodes().reduce((total, { bits }) => total + 2 ** (30 - bits), 0);
    assert.equal(sum, 2 ** 30);
  });

  it("derives the codes printed in the RFC", () => {
    const codes = huffmanCodes();
    const printed: Array<[number, number, number]> = [
      [0, 0x1ff8, 13],
      [10, 0x3ffffffc, 30],
      [32, 0x14, 6],
      [48, 0x0, 5],
      [92, 0x7fff0, 19],
      [97, 0x3, 5],
      [127, 0xffffffc, 28],
      [195, 0x7fff1, 19],
      [220, 0xffffffd, 28],
      [255, 0x3ffffee, 26],
      [256, 0x3fffffff, 30],
    ];
    for (const [symbol, code, bits] of printed)
      assert.deepEqual(codes[symbol], { code, bits }, `symbol ${symbol}`);
  });

  it("decodes the RFC's examples (C.4, C.6)", () => {
    const examples: Array<[string, string]> = [
      ["f1e3c2e5f23a6ba0ab90f4ff", "www.example.com"],
      ["a8eb10649cbf", "no-cache"],
      ["25a849e95ba97d7f", "custom-key"],
      ["25a849e95bb8e8b4bf", "custom-value"],
      ["6402", "302"],
      ["aec3771a4b", "private"],
      ["9d29ad171863c78f0b97c8e9ae82ae43d3", "https://www.example.com"],
    ];
    for (const [hex, text] of examples) {
      assert.equal(decode(Buffer.from(hex, "hex")), text);
      assert.equal(encodeHuffman(Buffer.from(text, "latin1")).toString("hex"), hex);
    }
  });

  it("round-trips any bytes", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) => {
        assert.equal(decode(encodeHuffman(bytes)), Buffer.from(bytes).toString("latin1"));
      }),
      { numRuns: 500 },
    );
  });

  it("refuses padding longer than 7 bits, padding that is not all ones, and EOS", () => {
    // "a" is 00011: padding 111 completes the octet; a whole extra octet of ones is too much.
    assert.equal(decode(Buffer.from([0b00011111])), "a");
    assert.equal(decode(Buffer.from([0b00011111, 0xff])), undefined);
    assert.equal(decode(Buffer.from([0b00011000])), undefined);
    // EOS (30 ones) inside the string.
    assert.equal(decode(Buffer.from([0xff, 0xff, 0xff, 0xff])), undefined);
  });
});
