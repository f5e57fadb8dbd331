import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { parseCheckRequest } from "../../../../src/servers/sidecar/grpc/check-input.ts";
import {
  allowResponse,
  denyResponse,
  rpcCodeFor,
  validateDecision,
} from "../../../../src/servers/sidecar/grpc/check-response.ts";
import {
  decodeCheckRequest,
  encodeAllowDecision,
  encodeCheckResponse,
  MalformedMessage,
} from "../../../../src/servers/sidecar/grpc/codec.ts";
import type { CheckResponse } from "../../../../src/servers/sidecar/grpc/proto.ts";
import { checkMethod, envoyCheckRequest } from "./helpers.ts";

/**
 * The hand-written hot-path codec against proto-loader (the reference, built from proto/ by
 * the test's own load): the same CheckInput from the same bytes, the same bytes from the same
 * CheckResponse.
 */

const reference = {
  decode: (bytes: Uint8Array) => parseCheckRequest(checkMethod.requestDeserialize(Buffer.from(bytes))),
  encodeRequest: (message: object) => checkMethod.requestSerialize(message),
  encodeResponse: (response: CheckResponse) => checkMethod.responseSerialize(response as object),
};

const text = fc.oneof(
  fc.constantFrom("", "GET", "/v1/items?a=1", "x-request-id", "Cookie", "cookie", "COOKIE", "__proto__"),
  fc.string({ maxLength: 12 }),
  fc.string({ unit: "grapheme", maxLength: 6 }),
);
const stringMap = fc.dictionary(text, text, { maxKeys: 6 });

const httpRequest = fc.record(
  {
    id: text,
    method: text,
    path: text,
    host: text,
    scheme: text,
    query: text,
    size: fc.constantFrom("-1", "0", "1234"),
    protocol: text,
    body: text,
    raw_body: fc.uint8Array({ maxLength: 8 }),
    headers: stringMap,
    header_map: fc.record({
      headers: fc.array(
        fc.record(
          { key: text, value: text, raw_value: fc.uint8Array({ maxLength: 6 }) },
          { requiredKeys: [] },
        ),
        { maxLength: 5 },
      ),
    }),
  },
  { requiredKeys: [] },
);

const checkRequest = fc.record(
  {
    attributes: fc.record(
      {
        source: fc.record({ principal: text, service: text, labels: stringMap }, { requiredKeys: [] }),
        destination: fc.record({ principal: text }, { requiredKeys: [] }),
        request: fc.record(
          { time: fc.record({ seconds: fc.constant("1767225600"), nanos: fc.nat(999) }), http: httpRequest },
          { requiredKeys: [] },
        ),
        context_extensions: stringMap,
        tls_session: fc.record({ sni: text }),
      },
      { requiredKeys: [] },
    ),
  },
  { requiredKeys: [] },
);

test("CheckRequest bytes decode to the same CheckInput as proto-loader's decoding", () => {
  fc.assert(
    fc.property(checkRequest, (message) => {
      const bytes = reference.encodeRequest(message);
      assert.deepEqual(decodeCheckRequest(bytes), reference.decode(bytes));
    }),
    { numRuns: 2000 },
  );
  const envoy = reference.encodeRequest(envoyCheckRequest({ headers: { authorization: "Bearer x" } }));
  assert.deepEqual(decodeCheckRequest(envoy), reference.decode(envoy));
});

test("repeated message fields: the last occurrence counts, as with proto-loader", () => {
  const first = reference.encodeRequest(envoyCheckRequest({ path: "/first", id: "one" }));
  const second = reference.encodeRequest(envoyCheckRequest({ path: "/second", id: "two" }));
  const both = Buffer.concat([first, second]);
  assert.deepEqual(decodeCheckRequest(both), reference.decode(both));
  assert.equal(decodeCheckRequest(both).input.path, "/second");
});

test("bytes that are not a CheckRequest throw MalformedMessage and nothing else", () => {
  for (const bytes of [
    [0x0a],
    [0x0a, 0x05, 0x00],
    [0x0f],
    [0x0e, 0x00],
    [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
    // attributes.request.http.method (field 2) sent as a varint.
    [0x0a, 0x06, 0x22, 0x04, 0x12, 0x02, 0x10, 0x01],
  ]) {
    assert.throws(() => decodeCheckRequest(Uint8Array.from(bytes)), MalformedMessage);
  }
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
      let ours: ReturnType<typeof decodeCheckRequest> | undefined;
      try {
        ours = decodeCheckRequest(bytes);
      } catch (error) {
        assert.ok(error instanceof MalformedMessage);
        return;
      }
      // What we accept, proto-loader reads the same way.
      let theirs: ReturnType<typeof reference.decode> | undefined;
      try {
        theirs = reference.decode(bytes);
      } catch {
        return;
      }
      assert.deepEqual(ours, theirs);
    }),
    { numRuns: 5000 },
  );
});

const headerName = fc.stringMatching(/^[a-z0-9-]{1,12}$/);
const headerText = fc.string({ maxLength: 40 }).filter((value) => !/[\r\n\0]/.test(value));
const longText = fc.oneof(headerText, fc.string({ minLength: 100, maxLength: 400 }));

const allowDecision = fc.record({
  allow: fc.constant(true as const),
  headersToSet: fc.dictionary(headerName, longText, { maxKeys: 5 }),
  headersToRemove: fc.array(headerName, { maxLength: 3 }),
  dynamicMetadata: fc.dictionary(
    fc.string({ maxLength: 10 }),
    fc.oneof(longText, fc.double({ noNaN: true, noDefaultInfinity: true }), fc.boolean(), fc.integer()),
    { maxKeys: 8 },
  ),
  queryParametersToSet: fc.option(fc.dictionary(headerName, headerText, { maxKeys: 3 }), { nil: undefined }),
});

const denyDecision = fc.record({
  allow: fc.constant(false as const),
  httpStatus: fc.constantFrom(400, 401, 403, 404, 429, 500, 503, 504),
  reason: fc.constantFrom("invalid_token", "policy_revoked", "internal", "upstream_unavailable", "x"),
  requestId: fc.string({ maxLength: 64 }),
  headers: fc.dictionary(headerName, headerText, { maxKeys: 3 }),
});

test("CheckResponse bytes equal proto-loader's encoding, for allows and denies", () => {
  fc.assert(
    fc.property(fc.oneof(allowDecision, denyDecision), (candidate) => {
      const decision = validateDecision(candidate);
      assert.ok(decision !== null);
      const response = decision.allow ? allowResponse(decision) : denyResponse(decision);
      assert.deepEqual(encodeCheckResponse(response), reference.encodeResponse(response));
    }),
    { numRuns: 2000 },
  );
  // A deny's google.rpc code is never 0 (OK), whatever the status.
  assert.notEqual(rpcCodeFor(418, "x"), 0);
});

test("an allow written in one pass equals validate + allowResponse + encode; anything else is left to that path", () => {
  const oddDecision = fc.oneof(
    allowDecision,
    denyDecision,
    fc.record({
      allow: fc.constantFrom(true, "true", 1),
      headersToSet: fc.oneof(
        fc.dictionary(
          fc.oneof(headerName, fc.constantFrom("X-Upper", "bad name", "123", "")),
          fc.oneof(headerText, fc.constant("a\nb"), fc.integer()),
          { maxKeys: 4 },
        ),
        fc.constant(null),
        fc.constant([]),
      ),
      headersToRemove: fc.oneof(
        fc.array(fc.oneof(headerName, fc.constant("Bad Name"), fc.integer()), { maxLength: 3 }),
        fc.constant("authorization"),
      ),
      dynamicMetadata: fc.oneof(
        fc.dictionary(
          fc.string({ maxLength: 4 }),
          fc.oneof(
            fc.string({ maxLength: 4 }),
            fc.double(),
            fc.boolean(),
            fc.constant(null),
            fc.constant({}),
          ),
          { maxKeys: 3 },
        ),
        fc.constant(undefined),
      ),
      queryParametersToSet: fc.oneof(
        fc.constant(undefined),
        fc.constant(null),
        fc.dictionary(
          fc.oneof(headerName, fc.constantFrom("", "a\rb")),
          fc.oneof(headerText, fc.constant(1)),
          { maxKeys: 3 },
        ),
      ),
    }),
  );
  fc.assert(
    fc.property(oddDecision, (candidate) => {
      const fast = encodeAllowDecision(candidate);
      const decision = validateDecision(candidate);
      if (decision === null || !decision.allow) {
        assert.equal(fast, undefined);
        return;
      }
      const general = encodeCheckResponse(allowResponse(decision));
      // The fast path may decline (then the general path answers), never differ.
      if (fast !== undefined) assert.deepEqual(fast, general);
    }),
    { numRuns: 3000 },
  );
  const plain = {
    allow: true,
    headersToSet: { "X-A": "1", "x-a": "2" },
    headersToRemove: ["Authorization"],
    dynamicMetadata: { a: 1 },
  };
  assert.ok(encodeAllowDecision(plain) !== undefined);
});
