import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import protobuf from "protobufjs";
import type { CheckDecision, CheckInput } from "../../../../src/servers/sidecar/grpc/types.ts";
import { checkMethod, type Harness, startHarness, unaryRaw } from "./helpers.ts";

/**
 * Wire compatibility with Envoy, independent of our .proto files: requests are hand-encoded
 * with protobufjs' Writer using the field numbers of Envoy's own API
 * (envoy/service/auth/v3/{external_auth,attribute_context}.proto, envoy/config/core/v3/base.proto,
 * envoy/type/v3/http_status.proto, google/rpc/status.proto, google/protobuf/struct.proto), and
 * responses are read back field number by field number.
 */

type Writer = protobuf.Writer;
const LEN = 2;
const VARINT = 0;

function message(w: Writer, field: number, build: (inner: Writer) => void): void {
  w.uint32((field << 3) | LEN).fork();
  build(w);
  w.ldelim();
}
function text(w: Writer, field: number, value: string): void {
  w.uint32((field << 3) | LEN).string(value);
}
function mapEntry(w: Writer, field: number, key: string, value: string): void {
  message(w, field, (entry) => {
    text(entry, 1, key);
    text(entry, 2, value);
  });
}

// Envoy field numbers, checked against envoyproxy/envoy api/.
const CheckRequest = { attributes: 1 };
const AttributeContext = { source: 1, destination: 2, request: 4, context_extensions: 10 };
const Peer = { principal: 4 };
const Request = { time: 1, http: 2 };
const HttpRequest = {
  id: 1,
  method: 2,
  headers: 3,
  path: 4,
  host: 5,
  scheme: 6,
  size: 9,
  protocol: 10,
  header_map: 13,
};
const HeaderMap = { headers: 1 };
const HeaderValue = { key: 1, value: 2, raw_value: 3 };
const CheckResponse = { status: 1, denied_response: 2, ok_response: 3, dynamic_metadata: 4 };
const RpcStatus = { code: 1, message: 2 };
const DeniedHttpResponse = { status: 1, headers: 2, body: 3 };
const OkHttpResponse = { headers: 2, headers_to_remove: 5 };
const HttpStatus = { code: 1 };
const HeaderValueOption = { header: 1, append: 2, append_action: 3 };
const Struct = { fields: 1 };
const Value = { number_value: 2, string_value: 3, bool_value: 4 };
const OVERWRITE_IF_EXISTS_OR_ADD = 2;

type Field = number | Uint8Array;

/** Reads one message level: field number → values in order. */
function fields(bytes: Uint8Array): Map<number, Field[]> {
  const reader = protobuf.Reader.create(bytes);
  const out = new Map<number, Field[]>();
  while (reader.pos < reader.len) {
    const tag = reader.uint32();
    const field = tag >>> 3;
    const wire = tag & 7;
    let value: Field;
    if (wire === 0) value = reader.uint32();
    else if (wire === 1) value = reader.double();
    else if (wire === 2) value = reader.bytes();
    else throw new Error(`unexpected wire type ${wire} for field ${field}`);
    out.set(field, [...(out.get(field) ?? []), value]);
  }
  return out;
}

function only(map: Map<number, Field[]>, field: number): Field {
  const values = map.get(field);
  assert.equal(values?.length, 1, `field ${field} once`);
  const [value] = values ?? [];
  assert.notEqual(value, undefined);
  return value as Field;
}
function sub(map: Map<number, Field[]>, field: number): Map<number, Field[]> {
  const value = only(map, field);
  assert.ok(value instanceof Uint8Array, `field ${field} is a message`);
  return fields(value);
}
function all(map: Map<number, Field[]>, field: number): Map<number, Field[]>[] {
  return (map.get(field) ?? []).map((value) => {
    assert.ok(value instanceof Uint8Array);
    return fields(value);
  });
}
function str(map: Map<number, Field[]>, field: number): string {
  const value = only(map, field);
  assert.ok(value instanceof Uint8Array);
  return Buffer.from(value).toString("utf8");
}
function num(map: Map<number, Field[]>, field: number): number {
  const value = only(map, field);
  assert.equal(typeof value, "number");
  return value as number;
}

function envoyRequest(build: (http: Writer) => void): Uint8Array {
  const w = protobuf.Writer.create();
  message(w, CheckRequest.attributes, (attributes) => {
    message(attributes, AttributeContext.source, (peer) =>
      text(peer, Peer.principal, "spiffe://td/ns/a/sa/b"),
    );
    message(attributes, AttributeContext.request, (request) => {
      message(request, Request.time, (time) => time.uint32((1 << 3) | VARINT).int64(1_767_225_600));
      message(request, Request.http, build);
    });
    mapEntry(attributes, AttributeContext.context_extensions, "capability_id", "cap-items");
    // A field this subset does not know (newer Envoy): skipped, not an error.
    text(attributes, 99, "from-the-future");
  });
  return w.finish();
}

describe("ext_authz wire format (Envoy field numbers)", () => {
  let harness: Harness;
  const inputs: CheckInput[] = [];
  let decision: CheckDecision;

  before(async () => {
    harness = await startHarness({
      check: async (input) => {
        inputs.push(input);
        return decision;
      },
    });
  });
  after(() => harness.close());

  test("a hand-encoded CheckRequest decodes into the expected CheckInput", async () => {
    inputs.length = 0;
    decision = { allow: false, httpStatus: 401, reason: "invalid_token", requestId: "" };
    const bytes = envoyRequest((http) => {
      text(http, HttpRequest.id, "rid-wire");
      text(http, HttpRequest.method, "DELETE");
      mapEntry(http, HttpRequest.headers, ":path", "/v1/items/9?force=true");
      mapEntry(http, HttpRequest.headers, "authorization", "Bearer t0k");
      mapEntry(http, HttpRequest.headers, "x-request-id", "rid-wire");
      text(http, HttpRequest.path, "/v1/items/9?force=true");
      text(http, HttpRequest.host, "items.internal");
      text(http, HttpRequest.scheme, "http");
      http.uint32((HttpRequest.size << 3) | VARINT).int64(-1);
      text(http, HttpRequest.protocol, "HTTP/2");
    });

    const response = fields(await unaryRaw(harness.client, checkMethod.path, bytes));

    assert.deepEqual(inputs, [
      {
        method: "DELETE",
        path: "/v1/items/9?force=true",
        host: "items.internal",
        scheme: "http",
        headers: {
          ":path": "/v1/items/9?force=true",
          authorization: "Bearer t0k",
          "x-request-id": "rid-wire",
        },
        contextExtensions: { capability_id: "cap-items" },
        requestId: "rid-wire",
        sourcePrincipal: "spiffe://td/ns/a/sa/b",
      },
    ]);

    // CheckResponse: status = 1, denied_response = 2, dynamic_metadata = 4 (the request id, for
    // Envoy's access log); no ok_response = 3.
    assert.deepEqual([...response.keys()].sort(), [
      CheckResponse.status,
      CheckResponse.denied_response,
      CheckResponse.dynamic_metadata,
    ]);
    const status = sub(response, CheckResponse.status);
    assert.equal(num(status, RpcStatus.code), 16);
    assert.equal(str(status, RpcStatus.message), "invalid_token");

    const denied = sub(response, CheckResponse.denied_response);
    assert.equal(num(sub(denied, DeniedHttpResponse.status), HttpStatus.code), 401);
    const [contentType] = all(denied, DeniedHttpResponse.headers);
    assert.ok(contentType);
    const header = sub(contentType, HeaderValueOption.header);
    assert.equal(str(header, HeaderValue.key), "content-type");
    assert.equal(str(header, HeaderValue.value), "application/json");
    assert.equal(num(contentType, HeaderValueOption.append_action), OVERWRITE_IF_EXISTS_OR_ADD);
    assert.equal(contentType.has(HeaderValueOption.append), false);
    assert.deepEqual(JSON.parse(str(denied, DeniedHttpResponse.body)), {
      status: "denied",
      reason: "invalid_token",
      requestId: "rid-wire",
      rule: "auth/token",
    });
  });

  test("raw header_map (encode_raw_headers) is read when the headers map is absent", async () => {
    inputs.length = 0;
    decision = { allow: true, headersToSet: {}, headersToRemove: [], dynamicMetadata: {} };
    const bytes = envoyRequest((http) => {
      text(http, HttpRequest.method, "GET");
      text(http, HttpRequest.path, "/v1/items");
      text(http, HttpRequest.host, "items.internal");
      message(http, HttpRequest.header_map, (map) => {
        for (const [key, value] of [
          ["x-trace", "a"],
          ["X-Trace", "b"],
          ["cookie", "s=1"],
          ["cookie", "t=2"],
        ] as const) {
          message(map, HeaderMap.headers, (entry) => {
            text(entry, HeaderValue.key, key);
            entry.uint32((HeaderValue.raw_value << 3) | LEN).bytes(Buffer.from(value));
          });
        }
      });
    });
    await unaryRaw(harness.client, checkMethod.path, bytes);
    assert.deepEqual(inputs[0]?.headers, { "x-trace": "a, b", cookie: "s=1; t=2" });
  });

  test("an allow's CheckResponse carries ok_response = 3 and dynamic_metadata = 4 as Envoy numbers them", async () => {
    decision = {
      allow: true,
      headersToSet: { "x-authority-subject": "agent-1" },
      headersToRemove: ["authorization"],
      dynamicMetadata: { subject: "agent-1", version: 2.5, cached: true },
    };
    const bytes = envoyRequest((http) => {
      text(http, HttpRequest.method, "GET");
      text(http, HttpRequest.path, "/v1/items");
    });
    const response = fields(await unaryRaw(harness.client, checkMethod.path, bytes));

    assert.deepEqual([...response.keys()].sort(), [
      CheckResponse.status,
      CheckResponse.ok_response,
      CheckResponse.dynamic_metadata,
    ]);
    // google.rpc.Status{code: 0}: proto3 leaves the zero code off the wire.
    assert.equal(sub(response, CheckResponse.status).get(RpcStatus.code)?.[0] ?? 0, 0);

    const ok = sub(response, CheckResponse.ok_response);
    const [option] = all(ok, OkHttpResponse.headers);
    assert.ok(option);
    assert.equal(str(sub(option, HeaderValueOption.header), HeaderValue.key), "x-authority-subject");
    assert.equal(str(sub(option, HeaderValueOption.header), HeaderValue.value), "agent-1");
    assert.equal(num(option, HeaderValueOption.append_action), OVERWRITE_IF_EXISTS_OR_ADD);
    assert.equal(str(ok, OkHttpResponse.headers_to_remove), "authorization");

    const metadata = new Map<string, Map<number, Field[]>>();
    for (const entry of all(sub(response, CheckResponse.dynamic_metadata), Struct.fields)) {
      metadata.set(str(entry, 1), sub(entry, 2));
    }
    assert.deepEqual([...metadata.keys()].sort(), ["cached", "subject", "version"]);
    assert.equal(str(metadata.get("subject") ?? new Map(), Value.string_value), "agent-1");
    assert.equal(num(metadata.get("version") ?? new Map(), Value.number_value), 2.5);
    assert.equal(num(metadata.get("cached") ?? new Map(), Value.bool_value), 1);
  });
});
