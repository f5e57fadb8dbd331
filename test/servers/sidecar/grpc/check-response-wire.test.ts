import assert from "node:assert/strict";
import { test } from "node:test";
import type { MethodDefinition } from "@grpc/proto-loader";
import fc from "fast-check";
import { allowResponse, denyResponse } from "../../../../src/servers/sidecar/grpc/check-response.ts";
import { encodeCheckResponse } from "../../../../src/servers/sidecar/grpc/check-response-wire.ts";
import { type CheckResponse, loadProtos } from "../../../../src/servers/sidecar/grpc/proto.ts";
import type { DenyHttpStatus } from "../../../../src/servers/sidecar/grpc/types.ts";

/**
 * The hand encoder against protobufjs, the reference it replaces on the Check path: the very
 * same bytes for every response the server can send, and the same message once decoded.
 */
const check = loadProtos().authorization.Check as MethodDefinition<object, CheckResponse>;
const reference = (response: CheckResponse): Buffer => check.responseSerialize(response);

function assertSameBytes(response: CheckResponse): void {
  const ours = encodeCheckResponse(response);
  assert.deepEqual(ours, reference(response));
  assert.deepEqual(check.responseDeserialize(ours), check.responseDeserialize(reference(response)));
}

// Well-formed text of every width: ASCII, two- and three-byte UTF-8, astral (surrogate pairs).
const text = fc.string({ unit: fc.constantFrom("a", "Z", "-", " ", "é", "€", "漢", "😀", "\u0000") });
const token = fc.stringMatching(/^[a-z0-9-]{1,20}$/);
const fact = fc.oneof(text, fc.boolean(), fc.double({ noNaN: true }), fc.integer());

test("allow responses: the same bytes as protobufjs", () => {
  fc.assert(
    fc.property(
      fc.dictionary(token, text, { maxKeys: 6 }),
      fc.array(token, { maxLength: 12 }),
      fc.dictionary(token, fact, { maxKeys: 8 }),
      fc.option(fc.dictionary(text, text, { minKeys: 1, maxKeys: 3 }), { nil: undefined }),
      (headersToSet, headersToRemove, dynamicMetadata, queryParametersToSet) =>
        assertSameBytes(
          allowResponse({
            allow: true,
            headersToSet,
            headersToRemove,
            dynamicMetadata,
            ...(queryParametersToSet === undefined ? {} : { queryParametersToSet }),
          }),
        ),
    ),
    { numRuns: 500 },
  );
});

test("deny responses: the same bytes as protobufjs", () => {
  fc.assert(
    fc.property(
      fc.constantFrom<DenyHttpStatus>(400, 401, 403, 404, 429, 500, 503),
      token,
      text,
      fc.dictionary(token, text, { maxKeys: 4 }),
      (httpStatus, reason, requestId, headers) =>
        assertSameBytes(denyResponse({ allow: false, httpStatus, reason, requestId, headers })),
    ),
    { numRuns: 500 },
  );
});

test("every field the message type allows: the same bytes, large messages included", () => {
  assertSameBytes({
    status: { code: -1, message: "" },
    ok_response: {
      headers: [
        { header: { key: "k", value: "", raw_value: new Uint8Array([0, 255, 7]) }, append: { value: true } },
        { header: null, append_action: "ADD_IF_ABSENT", keep_empty_value: true },
        { append: { value: false }, append_action: "APPEND_IF_EXISTS_OR_ADD", keep_empty_value: false },
      ],
      headers_to_remove: ["a", "x".repeat(70_000)],
      response_headers_to_add: [{ header: { key: "r", value: "v" }, append_action: "OVERWRITE_IF_EXISTS" }],
      query_parameters_to_set: [{ key: "q", value: "1" }, {}],
      query_parameters_to_remove: ["z", ""],
    },
    dynamic_metadata: {
      fields: {
        n: { nullValue: "NULL_VALUE" },
        s: {
          structValue: { fields: { inner: { numberValue: -0.5 }, empty: { structValue: { fields: {} } } } },
        },
        l: {
          listValue: { values: [{ stringValue: "x" }, { boolValue: false }, { listValue: { values: [] } }] },
        },
      },
    },
  });
  assertSameBytes({ status: { code: 2147483647 }, ok_response: { headers: [], headers_to_remove: [] } });
  assertSameBytes({
    status: { code: -2147483648, message: "m" },
    denied_response: { status: { code: 503 }, headers: [], body: "" },
  });
});

test("a string with no UTF-8 form (a lone surrogate) is refused, never replaced", () => {
  const allow = allowResponse({
    allow: true,
    headersToSet: {},
    headersToRemove: [],
    dynamicMetadata: { subject_id: "agent\uD800" },
  });
  assert.throws(() => encodeCheckResponse(allow), TypeError);
  // The next response is whole: nothing of the refused one is left in the shared buffer.
  assertSameBytes(denyResponse({ allow: false, httpStatus: 500, reason: "internal", requestId: "r" }));
});
