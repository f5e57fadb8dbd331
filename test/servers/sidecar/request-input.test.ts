import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { AuthorityError } from "../../../src/errors.ts";
import { enforceOperationInput } from "../../../src/execute/input.ts";
import { ROUTING_OVERRIDE_HEADERS } from "../../../src/execute/routing-overrides.ts";
import {
  bodyArgument,
  hasDuplicateKey,
  operationArguments,
  queryArguments,
} from "../../../src/pipeline/request-arguments.ts";
import {
  FORWARDED_HEADERS,
  headersToRemove,
  isForwarded,
  isNeverForwarded,
} from "../../../src/servers/sidecar/request-input.ts";
import { snapshot } from "../../core/fixtures.ts";

const declared = new Set(["x-tenant"]);
const hostile = fc.constantFrom(
  "authorization",
  "Proxy-Authorization",
  "cookie",
  "x-authority-subject",
  "X-Authority-Permission-Id",
  ...ROUTING_OVERRIDE_HEADERS,
  "X-HTTP-Method-Override",
);
const ordinary = fc.constantFrom(
  "x-tenant",
  "accept",
  "traceparent",
  "x-custom",
  "x-forwarded-host",
  "host",
  ":path",
);
const headerBag = fc.dictionary(
  fc.oneof(hostile, ordinary, fc.string({ maxLength: 12 })),
  fc.string({ maxLength: 8 }),
  {
    maxKeys: 12,
  },
);

test("headers_to_remove: every credential, x-authority-* and override goes; pseudo, declared and forwarded stay", () => {
  fc.assert(
    fc.property(headerBag, (headers) => {
      const removed = new Set(headersToRemove(headers, declared, { "x-authority-request-id": "" }));
      for (const raw of Object.keys(headers)) {
        const name = raw.toLowerCase();
        if (name.startsWith(":") || name === "x-authority-request-id") assert.ok(!removed.has(name), name);
        else if (isNeverForwarded(name)) assert.ok(removed.has(name), name);
        else if (declared.has(name) || FORWARDED_HEADERS.has(name)) assert.ok(!removed.has(name), name);
      }
    }),
  );
});

test("the proxy forwards no credential, x-authority-* or routing override, even when declared", () => {
  const everything = new Set(["authorization", "cookie", "x-authority-subject", ...ROUTING_OVERRIDE_HEADERS]);
  for (const name of everything) assert.equal(isForwarded(name, everything), false, name);
  assert.equal(isForwarded("x-tenant", declared), true);
  assert.equal(isForwarded("x-custom", declared), false);
});

test("a routing override is an argument (refused by the enforcement step) even when the operation declares no header", () => {
  const operation = snapshot("GET", "/export");
  for (const name of ROUTING_OVERRIDE_HEADERS) {
    const args = operationArguments(
      operation,
      {},
      "/export",
      { [name]: "DELETE", "x-custom": "1" },
      undefined,
    );
    assert.deepEqual(Object.keys(args.headers), [name], name);
    assert.throws(
      () => enforceOperationInput(operation, args, { enabled: true, partnerAllowlisted: true }),
      (error: unknown) => error instanceof AuthorityError && error.code === "invalid_input",
      name,
    );
  }
  // An operation without declared headers still gets no ordinary header as an argument.
  assert.deepEqual(
    Object.keys(operationArguments(operation, {}, "/export", { "x-custom": "1" }, undefined).headers),
    [],
  );
});

test("query parameters: every value kept in order, repeated names as arrays, __proto__ a plain key", () => {
  fc.assert(
    fc.property(fc.array(fc.tuple(fc.string(), fc.string()), { maxLength: 8 }), (pairs) => {
      const search = new URLSearchParams(pairs).toString();
      const parsed = queryArguments(`/p?${search}`);
      const expected = new Map<string, string[]>();
      for (const [name, value] of pairs) expected.set(name, [...(expected.get(name) ?? []), value]);
      assert.equal(Object.keys(parsed).length, expected.size);
      for (const [name, values] of expected) {
        const got = Object.getOwnPropertyDescriptor(parsed, name)?.value;
        assert.deepEqual(Array.isArray(got) ? got : [got], values);
      }
    }),
  );
  assert.deepEqual({ ...queryArguments("/p") }, {});
  assert.deepEqual({ ...queryArguments("/p?a=1#frag=2") }, { a: "1" });
});

/** The query's parameters as queryArguments groups them, from URLSearchParams' pairs. */
function grouped(pairs: Iterable<[string, string]>): Array<[string, string | string[]]> {
  const byName = new Map<string, string[]>();
  for (const [name, value] of pairs) byName.set(name, [...(byName.get(name) ?? []), value]);
  return [...byName].map(([name, values]) => [name, values.length === 1 ? (values[0] as string) : values]);
}

test("query parameters: exactly URLSearchParams' pairs for any raw query, the split fast path included", () => {
  // Separators, escapes, a leading "?", lone surrogates, non-ASCII: what a caller may send raw.
  const char = fc.constantFrom(
    "a",
    "B",
    "=",
    "&",
    "?",
    "%",
    "%2",
    "%41",
    "+",
    " ",
    "é",
    "\uD800",
    "\uDC00",
    "😀",
    ";",
    "#",
  );
  fc.assert(
    fc.property(fc.array(char, { maxLength: 24 }), (chars) => {
      const query = chars.join("");
      assert.deepEqual(
        Object.entries(queryArguments(`/p?${query}`)),
        // The query as a URL parser reads it (the constructor would strip a leading "?"), up to
        // the fragment.
        grouped(new URLSearchParams(`?${query.split("#")[0]}`)),
      );
    }),
    { numRuns: 2000 },
  );
  assert.deepEqual(Object.entries(queryArguments("/p?expand=items&limit=5&&flag&=x&a==b")), [
    ["expand", "items"],
    ["limit", "5"],
    ["flag", ""],
    ["", "x"],
    ["a", "=b"],
  ]);
});

const post = snapshot("POST", "/payments");
const get = snapshot("GET", "/payments");
const bodyConstrainedGet = snapshot("GET", "/payments", {
  parameter_constraints: [{ in: "body", name: "/amount", maximum: 5 }],
});

function reason(thunk: () => unknown): string | undefined {
  try {
    thunk();
    return undefined;
  } catch (error) {
    return error instanceof AuthorityError ? error.code : "not an AuthorityError";
  }
}

test("a needed body that was not seen whole is request_body_required, never an absent body", () => {
  for (const operation of [post, bodyConstrainedGet]) {
    assert.equal(
      reason(() => bodyArgument(operation, { "content-length": "12" }, undefined)),
      "request_body_required",
    );
    assert.equal(
      reason(() => bodyArgument(operation, { "transfer-encoding": "chunked" }, undefined)),
      "request_body_required",
    );
    assert.equal(
      reason(() => bodyArgument(operation, {}, { state: "partial" })),
      "request_body_required",
    );
    // HTTP/2 frames a body without either header: their absence proves nothing.
    assert.equal(
      reason(() => bodyArgument(operation, {}, undefined)),
      "request_body_required",
    );
    // Nor does a zero length: it is the caller's word, and may sit beside a chunked body.
    for (const framing of [
      { "content-length": "0" },
      { "content-length": " 0 " },
      { "content-length": "0", "transfer-encoding": "chunked" },
    ])
      assert.equal(
        reason(() => bodyArgument(operation, framing, undefined)),
        "request_body_required",
      );
  }
  // A body the transport saw, even an empty one, is what counts.
  assert.equal(bodyArgument(post, { "content-length": "0" }, { state: "complete", bytes: "" }), undefined);
  assert.deepEqual(
    bodyArgument(post, { "content-type": "application/json" }, { state: "complete", bytes: '{"a":1}' }),
    {
      a: 1,
    },
  );
});

test("a body an operation does not take is invalid_input, seen or not", () => {
  const rollout = { enabled: true, partnerAllowlisted: true };
  for (const body of [undefined, { state: "partial" } as const, { state: "complete", bytes: "x" } as const]) {
    const args = operationArguments(get, {}, "/payments", { "content-length": "1" }, body);
    assert.equal(
      reason(() => enforceOperationInput(get, args, rollout)),
      "invalid_input",
    );
  }
});

test("a body that is not JSON: 415 for another media type or a coding, 400 for bad JSON or bad UTF-8", () => {
  const complete = (bytes: string | Uint8Array) => ({ state: "complete", bytes }) as const;
  assert.equal(
    reason(() => bodyArgument(post, { "content-type": "text/plain" }, complete("{}"))),
    "unsupported_media_type",
  );
  assert.equal(
    reason(() =>
      bodyArgument(post, { "content-type": "application/json", "content-encoding": "gzip" }, complete("{}")),
    ),
    "unsupported_media_type",
  );
  assert.equal(
    reason(() => bodyArgument(post, { "content-type": "application/json" }, complete("{"))),
    "invalid_input",
  );
  assert.equal(
    reason(() =>
      bodyArgument(
        post,
        { "content-type": "application/json" },
        complete(new Uint8Array([0x22, 0xff, 0x22])),
      ),
    ),
    "invalid_input",
  );
});

test("duplicate JSON keys are found at any depth, spelled with escapes or not; JSON.stringify output has none", () => {
  fc.assert(
    fc.property(fc.jsonValue(), (value) => {
      assert.equal(hasDuplicateKey(JSON.stringify(value)), false);
      assert.equal(hasDuplicateKey(JSON.stringify(value, null, 2)), false);
    }),
  );
  fc.assert(
    fc.property(fc.jsonValue(), fc.string(), (value, key) => {
      const member = JSON.stringify(key);
      const escaped = `"${[...key].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`).join("")}"`;
      const text = `[{"a":{"x":${JSON.stringify(value)},${member}:1,${escaped}:2}}]`;
      // The key twice, once plainly and once escaped: a duplicate whatever the key is.
      assert.equal(hasDuplicateKey(text), true);
    }),
  );
  assert.equal(hasDuplicateKey('{"a":[{"b":1},{"b":2}],"c":"\\"a\\""}'), false);
  assert.equal(hasDuplicateKey('{"a":1,"b":{"a":2}}'), false);
});
