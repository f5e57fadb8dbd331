import assert from "node:assert/strict";
import { test } from "node:test";
import { parseCheckRequest } from "../../../../src/servers/sidecar/grpc/check-input.ts";

test("anything that is not a CheckRequest parses to empty values, incomplete", () => {
  for (const message of [
    undefined,
    null,
    42,
    "x",
    [],
    {},
    { attributes: "x" },
    { attributes: { request: [] } },
  ]) {
    const parsed = parseCheckRequest(message);
    assert.equal(parsed.complete, false);
    assert.deepEqual(parsed.input, {
      method: "",
      path: "",
      host: "",
      scheme: "",
      headers: {},
      contextExtensions: {},
    });
  }
});

test("pseudo headers fill in attributes Envoy left empty", () => {
  const parsed = parseCheckRequest({
    attributes: {
      request: {
        http: {
          method: "",
          headers: { ":method": "PUT", ":path": "/a?b=1", ":authority": "h.test", ":scheme": "https" },
        },
      },
    },
  });
  assert.equal(parsed.complete, true);
  assert.equal(parsed.input.method, "PUT");
  assert.equal(parsed.input.path, "/a?b=1");
  assert.equal(parsed.input.host, "h.test");
  assert.equal(parsed.input.scheme, "https");
});

test("header names are lower-cased and mistyped values dropped; __proto__ stays a plain key", () => {
  const headers = JSON.parse('{"X-A":"1","x-a":"2","n":5,"__proto__":"p"}') as Record<string, unknown>;
  const parsed = parseCheckRequest({
    attributes: {
      request: { http: { method: "GET", path: "/", headers } },
      context_extensions: { ok: "yes", bad: 1 },
    },
  });
  assert.equal(parsed.input.headers["x-a"], "1, 2");
  assert.equal(parsed.input.headers.n, undefined);
  assert.equal(Object.getOwnPropertyDescriptor(parsed.input.headers, "__proto__")?.value, "p");
  assert.equal(Object.getPrototypeOf(parsed.input.headers), Object.prototype);
  assert.deepEqual(parsed.input.contextExtensions, { ok: "yes" });
});

test("the caller's x-request-id names the request, before Envoy's stream id; empty principal is left out", () => {
  const http = { method: "GET", path: "/", headers: { "x-request-id": "hdr-id-0001" } };
  const parsed = parseCheckRequest({ attributes: { source: { principal: "" }, request: { http } } });
  assert.equal(parsed.input.requestId, "hdr-id-0001");
  assert.equal("sourcePrincipal" in parsed.input, false);
  const withStreamId = parseCheckRequest({
    attributes: { request: { http: { ...http, id: "7295830119" } } },
  });
  assert.equal(withStreamId.input.requestId, "hdr-id-0001", "Envoy's stream id does not win");
  const streamOnly = parseCheckRequest({
    attributes: { request: { http: { method: "GET", path: "/", id: "7295830119" } } },
  });
  assert.equal(streamOnly.input.requestId, "7295830119");
});

test("a request id that is short, too long or not plain is dropped (the server mints one)", () => {
  const bad = [
    "x".repeat(129),
    "a b",
    "id\u0000",
    "short",
    'q"uote-0001',
    "<script>1</script>",
    "a,b-0000001",
  ];
  for (const id of bad) {
    const http = { method: "GET", path: "/", id, headers: { "x-request-id": id } };
    const parsed = parseCheckRequest({ attributes: { request: { http } } });
    assert.equal(parsed.input.requestId, undefined, id);
  }
});

test("the body Envoy sends (with_request_body): raw_body bytes first, else body text; none when empty", () => {
  const parse = (http: Record<string, unknown>) =>
    parseCheckRequest({ attributes: { request: { http: { method: "POST", path: "/", ...http } } } }).input;
  const raw = new Uint8Array([0x7b, 0x7d]);
  assert.deepEqual(parse({ raw_body: raw, body: "ignored" }).body, raw);
  assert.equal(parse({ body: '{"a":1}' }).body, '{"a":1}');
  assert.equal(parse({ body: "", raw_body: new Uint8Array() }).body, undefined);
  assert.equal(Object.hasOwn(parse({}), "body"), false);
});
