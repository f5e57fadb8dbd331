import assert from "node:assert/strict";
import { test } from "node:test";
import type { MethodDefinition } from "@grpc/proto-loader";
import { encodeCheckResponse } from "../../../../src/servers/sidecar/grpc/check-response-wire.ts";
import {
  type CheckResponse,
  loadProtos,
  type OkHttpResponse,
} from "../../../../src/servers/sidecar/grpc/proto.ts";

/**
 * Attacks on the hand-written CheckResponse encoder at the places a hand encoder goes wrong:
 * varint lengths at their width boundaries (one byte to 127, two to 16,383, three to
 * 2,097,151) in strings and in the nested messages closed up around them, multi-byte UTF-8
 * whose byte length is not its UTF-16 length, the module buffer growing mid-message, and
 * the buffer reused after a large or a refused encode. Every case must be the bytes
 * protobufjs writes, and decode to the same message Envoy would read.
 */
const check = loadProtos().authorization.Check as MethodDefinition<object, CheckResponse>;

function assertSameBytes(response: CheckResponse, label: string): void {
  const ours = encodeCheckResponse(response);
  const reference = check.responseSerialize(response);
  assert.ok(ours.equals(reference), label);
  assert.deepEqual(check.responseDeserialize(ours), check.responseDeserialize(reference), label);
}

function allow(ok: Partial<OkHttpResponse>): CheckResponse {
  return { status: { code: 0 }, ok_response: { headers: [], headers_to_remove: [], ...ok } };
}

const BOUNDARIES = [0, 1, 126, 127, 128, 129, 16_382, 16_383, 16_384, 16_385, 2_097_151, 2_097_152];
/** Text of about `bytes` UTF-8 bytes in units of the given width (1 to 4 bytes each). */
const WIDTH_UNITS = ["a", "é", "€", "😀"];

test("string and nested lengths at every varint width boundary, in 1- to 4-byte UTF-8", () => {
  for (const target of BOUNDARIES) {
    for (const unitText of WIDTH_UNITS) {
      const width = Buffer.byteLength(unitText);
      const body = unitText.repeat(Math.floor(target / width)) + "a".repeat(target % width);
      assert.equal(Buffer.byteLength(body), target);
      // The header value itself, the header message around it (key + value), and the
      // HeaderValueOption around that each cross a boundary at a slightly different size.
      for (const trim of [0, 1, 2, 3, 4, 5, 6]) {
        let value = body.slice(0, Math.max(0, body.length - trim));
        // Never cut a surrogate pair in half: that text has no UTF-8 form (another test).
        if (!value.isWellFormed()) value = value.slice(0, -1);
        assertSameBytes(
          allow({
            headers: [
              { header: { key: "x-authority-subject", value }, append_action: "OVERWRITE_IF_EXISTS_OR_ADD" },
            ],
            headers_to_remove: [value, ""],
          }),
          `value of ${Buffer.byteLength(value)} bytes in ${width}-byte units`,
        );
      }
      assertSameBytes(
        { status: { code: 7, message: body }, denied_response: { status: { code: 403 }, headers: [], body } },
        `deny body of ${target} bytes in ${width}-byte units`,
      );
    }
  }
});

test("many headers grow the module buffer mid-message; a small response after it is exact", () => {
  const headers = Array.from({ length: 5000 }, (_, i) => ({
    header: { key: `x-h-${i}`, value: "漢".repeat(i % 50) },
    append_action: "OVERWRITE_IF_EXISTS_OR_ADD" as const,
  }));
  const remove = Array.from({ length: 5000 }, (_, i) => `x-r-${i}-${"é".repeat(i % 40)}`);
  assertSameBytes(allow({ headers, headers_to_remove: remove }), "5000 headers");
  assertSameBytes(
    {
      status: { code: 0 },
      ok_response: { headers: [], headers_to_remove: ["cookie"] },
      dynamic_metadata: { fields: { reason: { stringValue: "ok" } } },
    },
    "small after large",
  );
  // A small response's bytes carry nothing of the large one before it.
  const small = encodeCheckResponse(allow({ headers_to_remove: ["a"] }));
  assert.deepEqual([...small], [10, 2, 8, 0, 26, 3, 42, 1, 97]);
});

test("a refused encode (lone surrogate deep in a message) leaves the next encode exact", () => {
  assert.throws(() =>
    encodeCheckResponse(
      allow({
        headers: [{ header: { key: "k", value: "v".repeat(20_000) } }],
        headers_to_remove: ["a".repeat(200), "b\uD800"],
      }),
    ),
  );
  assertSameBytes(allow({ headers_to_remove: ["authorization"] }), "after a refused encode");
});

test("a header value is never merged into the next or cut: each decodes back as written", () => {
  const values = ["", "a", "a\u0000b", "x".repeat(128), "€".repeat(5462), "😀".repeat(4096), "\r\n"];
  const response = allow({
    headers: values.map((value, i) => ({ header: { key: `h${i}`, value } })),
    headers_to_remove: values,
  });
  const decoded = check.responseDeserialize(encodeCheckResponse(response)) as unknown as {
    ok_response: { headers: Array<{ header: { key: string; value: string } }>; headers_to_remove: string[] };
  };
  assert.deepEqual(
    decoded.ok_response.headers.map((h) => [h.header.key, h.header.value]),
    values.map((value, i) => [`h${i}`, value]),
  );
  assert.deepEqual(decoded.ok_response.headers_to_remove, values);
});
