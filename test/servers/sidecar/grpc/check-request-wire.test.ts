import assert from "node:assert/strict";
import { test } from "node:test";
import type { MethodDefinition } from "@grpc/proto-loader";
import fc from "fast-check";
import { buildCheckInput, parseCheckRequest } from "../../../../src/servers/sidecar/grpc/check-input.ts";
import { decodeCheckRequest } from "../../../../src/servers/sidecar/grpc/check-request-wire.ts";
import { type CheckRequest, loadProtos } from "../../../../src/servers/sidecar/grpc/proto.ts";

/**
 * The hand decoder against the loader's, the reference it replaces on the Check path: for any
 * CheckRequest the loader encodes, the same CheckInput; malformed bytes are refused.
 */
const check = loadProtos().authorization.Check as MethodDefinition<CheckRequest, object>;
const encode = (request: CheckRequest): Buffer => check.requestSerialize(request);
const reference = (bytes: Buffer) => parseCheckRequest(check.requestDeserialize(bytes));
const ours = (bytes: Buffer) => buildCheckInput(decodeCheckRequest(bytes));

const text = fc.string({
  unit: fc.constantFrom("a", "Z", "-", ":", " ", "é", "漢", "😀", "\u0000", "/", "?"),
});
const name = fc.oneof(
  fc.constantFrom(
    ":path",
    "authorization",
    "x-request-id",
    "Cookie",
    "cookie",
    "",
    "__proto__",
    "constructor",
    "1",
  ),
  text,
);
const strings = fc.dictionary(name, text, { maxKeys: 6 });
const headerValue = fc.record(
  { key: name, value: text, raw_value: fc.uint8Array({ maxLength: 8 }) },
  { requiredKeys: [] },
);
const peer = fc.record(
  {
    principal: text,
    service: text,
    labels: strings,
    address: fc.constant({ socket_address: { address: "127.0.0.1", port_value: 5 } }),
  },
  { requiredKeys: [] },
);
const http = fc.record(
  {
    id: text,
    method: fc.oneof(fc.constantFrom("GET", "POST", ""), text),
    headers: strings,
    path: text,
    host: text,
    scheme: text,
    query: text,
    fragment: text,
    size: fc.constantFrom("0", "-1", "9007199254740993"),
    protocol: text,
    body: text,
    raw_body: fc.uint8Array({ maxLength: 16 }),
    header_map: fc.record({ headers: fc.array(headerValue, { maxLength: 4 }) }),
  },
  { requiredKeys: [] },
);
const request: fc.Arbitrary<CheckRequest> = fc.record(
  {
    attributes: fc.record(
      {
        source: peer,
        destination: peer,
        request: fc.record(
          { time: fc.constant({ seconds: "1700000000", nanos: 5 }), http },
          { requiredKeys: [] },
        ),
        context_extensions: strings,
        tls_session: fc.record({ sni: text }),
        metadata_context: fc.constant({
          filter_metadata: { f: { fields: { k: { stringValue: "v" } } } },
        }),
      },
      { requiredKeys: [] },
    ),
  },
  { requiredKeys: [] },
);

test("any CheckRequest the loader encodes: the same CheckInput as the loader's decoder gives", () => {
  fc.assert(
    fc.property(request, (message) => {
      const bytes = encode(message);
      assert.deepEqual(ours(bytes), reference(bytes));
    }),
    { numRuns: 1000 },
  );
});

test("fields repeated on the wire: the last occurrence wins, as in protobufjs", () => {
  const first = encode({ attributes: { request: { http: { method: "GET", path: "/a", id: "one" } } } });
  const second = encode({
    attributes: { request: { http: { path: "/b" } }, context_extensions: { k: "v" } },
  });
  // Two `attributes` fields: the second replaces the first (protobufjs does not merge them).
  const twice = Buffer.concat([first, second]);
  assert.deepEqual(ours(twice), reference(twice));
  assert.equal(ours(twice).input.path, "/b");
  assert.equal(ours(twice).complete, false);
});

/** A length-delimited field, hand-encoded. */
function field(number: number, ...parts: Buffer[]): Buffer {
  const body = Buffer.concat(parts);
  const length: number[] = [];
  for (let rest = body.length; ; rest >>>= 7) {
    if (rest < 0x80) {
      length.push(rest);
      break;
    }
    length.push((rest & 0x7f) | 0x80);
  }
  return Buffer.concat([Buffer.from([(number << 3) | 2, ...length]), body]);
}
const entry = (key: string, value: string) =>
  field(3, field(1, Buffer.from(key)), field(2, Buffer.from(value)));

test("a map key repeated on the wire keeps its place and takes the last value, with many keys too", () => {
  for (const count of [3, 40, 300]) {
    const keys = Array.from({ length: count }, (_, i) => (i % 7 === 3 ? String(i) : `h${i}`));
    const entries = [
      ...keys.map((key) => entry(key, "first")),
      entry("h1", "second"),
      entry(keys.at(-1) ?? "", "last"),
      entry("__proto__", "p"),
    ];
    const bytes = field(
      1,
      field(4, field(2, field(2, Buffer.from("GET")), field(4, Buffer.from("/")), ...entries)),
    );
    assert.deepEqual(ours(bytes), reference(bytes));
    assert.equal(ours(bytes).input.headers.h1, "second");
  }
});

test("malformed bytes are refused: truncated, wrong wire type, groups, field 0, oversized varints", () => {
  const whole = encode({
    attributes: { request: { http: { method: "GET", path: "/orders/42", headers: { a: "b" } } } },
  });
  for (let cut = 1; cut < whole.length; cut++)
    assert.throws(() => decodeCheckRequest(whole.subarray(0, cut)), `cut at ${cut}`);
  for (const bytes of [
    [0x08, 0x01], // attributes as a varint
    [0x0b, 0x0c], // a group
    [0x00, 0x00], // field number 0
    [0x0e], // wire type 6
    [0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], // a length past 32 bits
    [0x0a, 0x05, 0x01], // a length past the end
  ])
    assert.throws(() => decodeCheckRequest(Buffer.from(bytes)), JSON.stringify(bytes));
  // Unknown fields of every wire type are skipped.
  const unknown = Buffer.from([0x78, 0x01, 0x79, 1, 2, 3, 4, 5, 6, 7, 8, 0x7d, 1, 2, 3, 4, 0x7a, 0x01, 0x00]);
  assert.deepEqual(ours(Buffer.concat([unknown, whole])), reference(Buffer.concat([unknown, whole])));
  assert.deepEqual(ours(Buffer.alloc(0)), reference(Buffer.alloc(0)));
});
