import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";
import { brotliCompressSync, deflateRawSync, deflateSync, gzipSync } from "node:zlib";
import { hashCanonical } from "../../src/core/canonical-json.ts";
import type { AuthProfile } from "../../src/execute/auth-profiles.ts";
import { ExecutionError } from "../../src/execute/errors.ts";
import { createExecutor, type ExecutorOptions } from "../../src/execute/executor.ts";
import { egressAllowing } from "../helpers/egress.ts";
import { type ExecuteRequest, executeOnce, testExecutor } from "../helpers/execute-once.ts";
import {
  itemSnapshot,
  openTokenStore,
  orderSnapshot,
  type Recorded,
  secretTable,
  sendJson,
  startServer,
  type TestServer,
  type TokenStoreFixture,
} from "./helpers.ts";

const API_KEY = "key-0123456789abcdef";
const BEARER = "bearer-fedcba9876543210";
const apiKeyHeader: AuthProfile = {
  type: "static",
  id: "profile-1",
  kind: "api_key",
  in: "header",
  name: "X-Api-Key",
  secretRef: "ref:api-key",
};
const apiKeyQuery: AuthProfile = { ...apiKeyHeader, in: "query", name: "api_key" };
const bearer: AuthProfile = { type: "static", id: "profile-2", kind: "bearer", secretRef: "ref:bearer" };

let upstream: TestServer;
let tokens: TokenStoreFixture;
let secrets: ReturnType<typeof secretTable>;

before(async () => {
  upstream = await startServer();
  tokens = await openTokenStore();
});
after(async () => {
  await upstream.close();
  await tokens.close();
});
beforeEach(() => {
  upstream.requests.length = 0;
  upstream.setHandler((req, res) => sendJson(res, 200, { ok: true, method: req.method }));
  secrets = secretTable({ "ref:api-key": API_KEY, "ref:bearer": BEARER });
});

function executor(overrides: Partial<ExecutorOptions> = {}) {
  return testExecutor({
    secretResolver: secrets.resolve,
    tokenSetStore: tokens.tokenSetStore,
    constraintsRollout: { enabled: true, isPartnerAllowlisted: (id) => id === "partner-allowed" },
    egress: egressAllowing([upstream.origin]),
    ...overrides,
  });
}

function request(overrides: Partial<ExecuteRequest> = {}): ExecuteRequest {
  return {
    snapshot: itemSnapshot(upstream.origin),
    args: { path: { id: "item-1" } },
    authProfile: apiKeyHeader,
    partnerId: "partner-allowed",
    ...overrides,
  };
}

async function rejection(promise: Promise<unknown>): Promise<ExecutionError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof ExecutionError, String(error));
    return error;
  }
  assert.fail("expected an ExecutionError");
}

function only(requests: Recorded[]): Recorded {
  assert.equal(requests.length, 1);
  const [first] = requests;
  assert.ok(first !== undefined);
  return first;
}

describe("executor: auth injection", () => {
  it("injects a static API key header and never forwards the caller's credentials", async () => {
    const result = await executeOnce(
      executor(),
      request({
        args: {
          path: { id: "item-1" },
          query: { limit: "5" },
          headers: {
            Authorization: "Bearer caller-token",
            Cookie: "session=caller",
            "x-trace-id": "trace-1",
          },
        },
        extraHeaders: { "x-request-id": "req-1", authorization: "Bearer server-should-not-win" },
      }),
    );
    assert.equal(result.status, 200);
    assert.deepEqual(result.body, { ok: true, method: "GET" });
    assert.equal(result.upstreamError, undefined);
    const seen = only(upstream.requests);
    assert.equal(seen.target, "/v1/items/item-1?limit=5");
    assert.equal(seen.headers["x-api-key"], API_KEY);
    assert.equal(seen.headers.authorization, undefined);
    assert.equal(seen.headers.cookie, undefined);
    assert.equal(seen.headers["x-trace-id"], "trace-1");
    assert.equal(seen.headers["x-request-id"], "req-1");
    assert.equal(seen.headers.accept, "application/json");
    assert.deepEqual(secrets.calls, ["ref:api-key"]);
    assert.ok(!JSON.stringify(result).includes(API_KEY));
  });

  it("injects a static API key as a query parameter", async () => {
    const result = await executeOnce(
      executor(),
      request({ authProfile: apiKeyQuery, args: { path: { id: "a" }, query: { tags: ["x", "y"] } } }),
    );
    assert.equal(result.status, 200);
    const seen = only(upstream.requests);
    const url = new URL(seen.target, upstream.origin);
    assert.equal(url.pathname, "/v1/items/a");
    assert.deepEqual(url.searchParams.getAll("tags"), ["x", "y"]);
    assert.equal(url.searchParams.get("api_key"), API_KEY);
    assert.equal(seen.headers["x-api-key"], undefined);
  });

  it("a caller cannot override the injected query key", async () => {
    const snapshot = itemSnapshot(upstream.origin);
    const open = {
      ...snapshot,
      input_schema: {
        ...snapshot.input_schema,
        query: { type: "object", additionalProperties: { type: "string" } },
      },
    };
    await executeOnce(
      executor(),
      request({
        snapshot: open,
        authProfile: apiKeyQuery,
        args: { path: { id: "a" }, query: { api_key: "mine" } },
      }),
    );
    const url = new URL(only(upstream.requests).target, upstream.origin);
    assert.deepEqual(url.searchParams.getAll("api_key"), [API_KEY]);
  });

  it("injects a static bearer token in place of the caller's Authorization", async () => {
    await executeOnce(
      executor(),
      request({
        authProfile: bearer,
        args: { path: { id: "a" }, headers: { authorization: "Bearer caller" } },
      }),
    );
    assert.equal(only(upstream.requests).headers.authorization, `Bearer ${BEARER}`);
  });

  it("an unresolvable secret is auth_profile_unavailable and nothing is sent", async () => {
    const missing: AuthProfile = { ...bearer, secretRef: "ref:missing" };
    const error = await rejection(executeOnce(executor(), request({ authProfile: missing })));
    assert.equal(error.reason, "auth_profile_unavailable");
    assert.equal(error.code, "upstream_unavailable");
    assert.ok(!error.message.includes("ref:missing"));
    assert.equal(upstream.requests.length, 0);
  });

  it("a malformed profile is auth_profile_unavailable before any secret or request", async () => {
    for (const authProfile of [
      { type: "static", id: "x", kind: "api_key", in: "header", name: "Host", secretRef: "ref:api-key" },
      { type: "kerberos", id: "x" },
      { ...bearer, secretRef: "" },
    ]) {
      const error = await rejection(
        executeOnce(executor(), request({ authProfile: authProfile as AuthProfile })),
      );
      assert.equal(error.reason, "auth_profile_unavailable");
      assert.equal(error.details?.issue, "auth_profile_invalid");
    }
    assert.equal(upstream.requests.length, 0);
    assert.deepEqual(secrets.calls, []);
  });

  it("a secret that could split headers is refused", async () => {
    secrets = secretTable({ "ref:bearer": "abc\r\nX-Injected: 1" });
    const error = await rejection(executeOnce(executor(), request({ authProfile: bearer })));
    assert.equal(error.reason, "auth_profile_unavailable");
    assert.equal(upstream.requests.length, 0);
  });
});

describe("executor: the path cannot be changed by arguments", () => {
  for (const value of ["../admin", "a/b", "%2F", "?x=1", "#frag", "..%2Fadmin", "a%2F..%2F..%2Fadmin"]) {
    it(`sends ${JSON.stringify(value)} as one encoded segment`, async () => {
      await executeOnce(executor(), request({ args: { path: { id: value } } }));
      const seen = only(upstream.requests);
      assert.ok(seen.target.startsWith("/v1/items/"), seen.target);
      const rest = seen.target.slice("/v1/items/".length);
      assert.ok(!/[/?#]/.test(rest), seen.target);
      assert.equal(decodeURIComponent(rest), value);
    });
  }

  for (const value of ["..", "."]) {
    it(`refuses ${JSON.stringify(value)} before loading a secret`, async () => {
      const error = await rejection(executeOnce(executor(), request({ args: { path: { id: value } } })));
      assert.equal(error.reason, "ambiguous_path");
      assert.equal(upstream.requests.length, 0);
      assert.deepEqual(secrets.calls, []);
    });
  }
});

describe("executor: fail closed before secrets and network", () => {
  it("invalid input: no upstream request, secret resolver never called", async () => {
    for (const args of [
      { path: { id: "a" }, query: { limit: 500 } },
      { path: {} },
      { path: { id: "a" }, body: { x: 1 } },
      { path: { id: "a" }, unexpected: true },
      "not an object",
    ]) {
      const error = await rejection(executeOnce(executor(), request({ args })));
      assert.equal(error.reason, "invalid_input");
    }
    const post = await rejection(
      executeOnce(
        executor(),
        request({ snapshot: orderSnapshot(upstream.origin), args: { body: { sku: "lower" } } }),
      ),
    );
    assert.equal(post.reason, "invalid_input");
    assert.equal(upstream.requests.length, 0);
    assert.deepEqual(secrets.calls, []);
  });

  const constrained = () =>
    itemSnapshot(upstream.origin, {
      parameter_constraints: [{ in: "query", name: "region", required: true, allowed_values: ["eu"] }],
    });

  it("constraint violation: no upstream request, secret resolver never called", async () => {
    for (const query of [{ region: "us" }, {}]) {
      const error = await rejection(
        executeOnce(executor(), request({ snapshot: constrained(), args: { path: { id: "a" }, query } })),
      );
      assert.equal(error.reason, "constraint_violation");
      assert.equal(error.code, "constraint_violation");
      assert.ok(!error.message.includes('us"'));
    }
    assert.equal(upstream.requests.length, 0);
    assert.deepEqual(secrets.calls, []);
    const ok = await executeOnce(
      executor(),
      request({ snapshot: constrained(), args: { path: { id: "a" }, query: { region: "eu" } } }),
    );
    assert.equal(ok.status, 200);
    assert.equal(upstream.requests.length, 1);
  });

  it("a constrained operation outside the rollout fails closed", async () => {
    const args = { path: { id: "a" }, query: { region: "eu" } };
    const notAllowlisted = await rejection(
      executeOnce(executor(), request({ snapshot: constrained(), args, partnerId: "partner-other" })),
    );
    assert.equal(notAllowlisted.reason, "constraint_rollout_disabled");
    const disabled = executor({ constraintsRollout: { enabled: false, isPartnerAllowlisted: () => true } });
    assert.equal(
      (await rejection(executeOnce(disabled, request({ snapshot: constrained(), args })))).reason,
      "constraint_rollout_disabled",
    );
    const throwing = executor({
      constraintsRollout: {
        enabled: true,
        isPartnerAllowlisted: () => {
          throw new Error("allowlist unavailable");
        },
      },
    });
    assert.equal(
      (await rejection(executeOnce(throwing, request({ snapshot: constrained(), args })))).reason,
      "constraint_rollout_disabled",
    );
    // Unconstrained operations do not depend on the rollout.
    assert.equal((await executeOnce(disabled, request())).status, 200);
    assert.equal(upstream.requests.length, 1);
    assert.deepEqual(secrets.calls, ["ref:api-key"]);
  });

  it("invalid constraint metadata fails closed", async () => {
    const snapshot = itemSnapshot(upstream.origin, {
      // A backreference: linear-time matching cannot run it (docs/decisions/2502).
      parameter_constraints: [{ in: "query", name: "region", pattern: "(a)\\1" }],
    });
    const error = await rejection(
      executeOnce(executor(), request({ snapshot, args: { path: { id: "a" }, query: { region: "aaa" } } })),
    );
    assert.equal(error.reason, "constraint_metadata_invalid");
    assert.equal(upstream.requests.length, 0);
    assert.deepEqual(secrets.calls, []);
  });
});

describe("executor: upstream outcomes", () => {
  it("sends a JSON body with JSON headers", async () => {
    upstream.setHandler((req, res) => sendJson(res, 201, { received: JSON.parse(req.body) }));
    const result = await executeOnce(
      executor(),
      request({ snapshot: orderSnapshot(upstream.origin), args: { body: { sku: "A-1", quantity: 2 } } }),
    );
    assert.equal(result.status, 201);
    assert.deepEqual(result.body, { received: { sku: "A-1", quantity: 2 } });
    const seen = only(upstream.requests);
    assert.equal(seen.method, "POST");
    assert.equal(seen.headers["content-type"], "application/json");
    assert.equal(seen.body, '{"sku":"A-1","quantity":2}');
  });

  it("an upstream 500 is a structured result, not an exception", async () => {
    upstream.setHandler((_req, res) => sendJson(res, 500, { error: "database exploded", detail: "stack…" }));
    const result = await executeOnce(executor(), request());
    assert.equal(result.status, 500);
    assert.deepEqual(result.upstreamError, { kind: "http_error", status: 500 });
    assert.deepEqual(result.body, { error: "database exploded", detail: "stack…" });
  });

  it("a non-JSON answer comes back as text", async () => {
    upstream.setHandler((_req, res) => {
      res.writeHead(404, { "content-type": "text/plain" });
      res.end("not here");
    });
    const result = await executeOnce(executor(), request());
    assert.equal(result.body, "not here");
    assert.deepEqual(result.upstreamError, { kind: "http_error", status: 404 });
  });

  it("an upstream that hangs fails with upstream_timeout within the bound", async () => {
    upstream.setHandler(() => undefined);
    const error = await rejection(executeOnce(executor({ timeoutMs: 200 }), request()));
    assert.equal(error.reason, "upstream_timeout");
    assert.equal(error.code, "upstream_timeout");
    assert.equal(error.status, 504);
    assert.deepEqual(error.upstreamError, { kind: "timeout" });
    assert.match(error.requestHash ?? "", /^sha256:[0-9a-f]{64}$/);
  });

  it("an upstream that stalls mid-body also times out", async () => {
    upstream.setHandler((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.write('{"partial":');
    });
    const error = await rejection(executeOnce(executor({ timeoutMs: 200 }), request()));
    assert.equal(error.reason, "upstream_timeout");
  });

  it("an unreachable upstream fails with upstream_unreachable and no transport detail", async () => {
    const gone = await startServer();
    const origin = gone.origin;
    await gone.close();
    const ex = executor({ egress: egressAllowing([origin]) });
    const error = await rejection(executeOnce(ex, request({ snapshot: itemSnapshot(origin) })));
    assert.equal(error.reason, "upstream_unreachable");
    assert.deepEqual(error.upstreamError, { kind: "unreachable" });
    const text = `${error.message} ${JSON.stringify(error.toJSON())}`;
    assert.ok(!/ECONNREFUSED|127\.0\.0\.1|fetch failed/.test(text), text);
    assert.equal(error.cause, undefined);
  });

  const FIVE_MB = 5 * 1024 * 1024;
  const bodies: [string, (res: import("node:http").ServerResponse) => void][] = [
    [
      "declared length",
      (res) => {
        res.writeHead(200, { "content-type": "application/json", "content-length": String(FIVE_MB) });
        res.end(Buffer.alloc(FIVE_MB, 0x20));
      },
    ],
    [
      "chunked stream",
      (res) => {
        res.writeHead(200, { "content-type": "application/json" });
        const chunk = Buffer.alloc(64 * 1024, 0x20);
        let sent = 0;
        const pump = () => {
          while (sent < FIVE_MB) {
            sent += chunk.length;
            if (!res.write(chunk)) return void res.once("drain", pump);
          }
          res.end();
        };
        pump();
      },
    ],
    [
      "gzip bomb",
      (res) => {
        const packed = gzipSync(Buffer.alloc(FIVE_MB, 0x20));
        res.writeHead(200, {
          "content-type": "application/json",
          "content-encoding": "gzip",
          "content-length": String(packed.length),
        });
        res.end(packed);
      },
    ],
    // The gate's request decodes what fetch decoded (decision 2841): a bomb in any coding is bounded.
    ...(
      [
        ["br", (b: Buffer) => brotliCompressSync(b)],
        ["deflate", (b: Buffer) => deflateSync(b)],
        ["deflate", (b: Buffer) => deflateRawSync(b)],
        ["gzip, gzip", (b: Buffer) => gzipSync(gzipSync(b))],
      ] as const
    ).map(([coding, pack], i): [string, (res: import("node:http").ServerResponse) => void] => [
      `${coding} bomb #${i}`,
      (res) => {
        res.writeHead(200, { "content-type": "application/json", "content-encoding": coding });
        res.end(pack(Buffer.alloc(FIVE_MB, 0x20)));
      },
    ]),
  ];
  for (const [name, send] of bodies) {
    it(`a 5 MB answer (${name}) fails closed with upstream_response_too_large`, async () => {
      upstream.setHandler((_req, res) => {
        res.on("error", () => undefined);
        send(res);
      });
      const error = await rejection(executeOnce(executor(), request()));
      assert.equal(error.reason, "upstream_response_too_large");
      assert.deepEqual(error.upstreamError, { kind: "too_large" });
    });
  }

  it("a HEAD answer declaring a length past the bound is no body: answered, not too_large", async () => {
    upstream.setHandler((_req, res) => {
      res.writeHead(200, { "content-type": "application/json", "content-length": String(FIVE_MB) });
      res.end();
    });
    const result = await executeOnce(
      executor(),
      request({ snapshot: itemSnapshot(upstream.origin, { method: "HEAD" }) }),
    );
    assert.equal(result.status, 200);
  });

  it("does not follow redirects (credentials never travel to another origin)", async () => {
    const elsewhere = await startServer();
    try {
      upstream.setHandler((_req, res) => {
        res.writeHead(302, { location: `${elsewhere.origin}/steal` });
        res.end();
      });
      const result = await executeOnce(executor(), request());
      assert.equal(result.status, 302);
      assert.equal(elsewhere.requests.length, 0);
    } finally {
      await elsewhere.close();
    }
  });

  it("a response nested deeper than the canonical form allows fails closed", async () => {
    upstream.setHandler((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(`${"[".repeat(1100)}${"]".repeat(1100)}`);
    });
    const error = await rejection(executeOnce(executor(), request()));
    assert.equal(error.reason, "upstream_response_too_large");
  });

  it("a body that is not plain JSON (in-process callers) is invalid input, before any secret", async () => {
    const error = await rejection(
      executeOnce(
        executor(),
        request({
          snapshot: orderSnapshot(upstream.origin),
          args: { body: { sku: "A", quantity: 1, email: undefined } },
        }),
      ),
    );
    assert.equal(error.reason, "invalid_input");
    assert.equal(upstream.requests.length, 0);
    assert.deepEqual(secrets.calls, []);
  });

  it("a caller's abort signal stops the call", async () => {
    upstream.setHandler(() => undefined);
    const controller = new AbortController();
    const pending = executeOnce(executor(), request({ signal: controller.signal }));
    setTimeout(() => controller.abort(new Error("client went away")), 50);
    await assert.rejects(pending, /client went away/);
  });
});

describe("executor: redaction and hashes", () => {
  it("removes sensitive response headers and reports it", async () => {
    upstream.setHandler((_req, res) => {
      res.setHeader("set-cookie", ["a=1", "b=2"]);
      res.setHeader("server", "nginx/1.2.3");
      res.setHeader("x-powered-by", "Express");
      res.setHeader("www-authenticate", 'Bearer realm="x"');
      res.setHeader("x-request-id", "up-1");
      sendJson(res, 200, { ok: true });
    });
    const result = await executeOnce(executor(), request());
    for (const name of [
      "set-cookie",
      "server",
      "x-powered-by",
      "www-authenticate",
      "connection",
      "content-length",
    ]) {
      assert.equal(result.headers[name], undefined, name);
    }
    assert.equal(result.headers["x-request-id"], "up-1");
    assert.equal(result.headers["content-type"], "application/json");
    const removed = result.redactionEvents.filter((e) => e.source === "header").map((e) => e.path);
    assert.deepEqual(removed.sort(), ["server", "set-cookie", "www-authenticate", "x-powered-by"]);
  });

  it("applies operation rules, then policy rules, then default sensitive-field redaction", async () => {
    upstream.setHandler((_req, res) =>
      sendJson(res, 200, {
        card: "4111111111111111",
        notes: "internal",
        nested: { password: "hunter2", apiToken: "tok_123", visible: "yes" },
        recovery_secret: "abcdef",
      }),
    );
    const snapshot = itemSnapshot(upstream.origin, {
      response_rules: [
        { path: "/card", mode: "mask", keep_last: 4 },
        { path: "/recovery_secret", mode: "mask", keep_last: 2 },
      ],
    });
    const result = await executeOnce(
      executor(),
      request({
        snapshot,
        redactions: [
          { path: "/notes", mode: "remove" },
          { path: "/recovery_secret", mode: "remove" },
        ],
      }),
    );
    assert.deepEqual(result.body, {
      card: "************1111",
      nested: { password: "*******", apiToken: "*******", visible: "yes" },
    });
    const bodyEvents = result.redactionEvents.filter((e) => e.source !== "header");
    assert.deepEqual(bodyEvents, [
      { path: "/card", mode: "mask", source: "operation" },
      { path: "/recovery_secret", mode: "mask", source: "operation" },
      { path: "/notes", mode: "remove", source: "operation" },
      { path: "/recovery_secret", mode: "remove", source: "operation" },
      { path: "/nested/password", mode: "mask", source: "default" },
      { path: "/nested/apiToken", mode: "mask", source: "default" },
    ]);
    assert.ok(!JSON.stringify(result).includes("hunter2"));
  });

  it("a malformed redaction rule fails closed before anything is sent", async () => {
    for (const rule of [
      { path: "/x", mode: "shred" as "remove" },
      { path: "x~2", mode: "remove" as const },
      { path: "/x", mode: "mask" as const, keep_last: -1 },
    ]) {
      const error = await rejection(executeOnce(executor(), request({ redactions: [rule] })));
      assert.equal(error.reason, "invalid_operation_snapshot");
    }
    assert.equal(upstream.requests.length, 0);
    assert.deepEqual(secrets.calls, []);
  });

  it("a JSON document sent under another content type is still redacted", async () => {
    upstream.setHandler((_req, res) => {
      res.writeHead(200, { "content-type": "text/plain" });
      res.end('{"password":"hunter2","ok":true}');
    });
    const result = await executeOnce(executor(), request());
    assert.deepEqual(result.body, { password: "*******", ok: true });
  });

  it("hashes the canonical request (without credentials) and the returned response", async () => {
    const args = { path: { id: "a" }, query: { limit: 3 }, headers: { "x-trace-id": "t" } };
    const first = await executeOnce(executor(), request({ args }));
    secrets = secretTable({ "ref:api-key": "another-key-value", "ref:bearer": BEARER });
    const second = await executeOnce(executor(), request({ args, extraHeaders: { "x-request-id": "r2" } }));
    assert.match(first.requestHash, /^sha256:[0-9a-f]{64}$/);
    assert.equal(first.requestHash, second.requestHash);
    assert.equal(
      first.requestHash,
      hashCanonical({
        method: "GET",
        url: `${upstream.origin}/v1/items/a?limit=3`,
        headers: { "x-trace-id": "t" },
        body: null,
      }),
    );
    assert.equal(
      first.responseHash,
      hashCanonical({ status: first.status, headers: first.headers, body: first.body }),
    );
    const other = await executeOnce(executor(), request({ args: { path: { id: "b" } } }));
    assert.notEqual(other.requestHash, first.requestHash);
    assert.ok(first.timings.totalMs >= first.timings.upstreamMs);
  });
});

describe("createExecutor options", () => {
  it("are validated at construction; the token caches are the composition root's, never built inside", () => {
    const egress = egressAllowing([upstream.origin]);
    const wired = testExecutor({
      secretResolver: secrets.resolve,
      tokenSetStore: tokens.tokenSetStore,
      constraintsRollout: { enabled: false, isPartnerAllowlisted: () => false },
      egress,
    });
    const base = {
      secretResolver: secrets.resolve,
      constraintsRollout: { enabled: false, isPartnerAllowlisted: () => false },
      egress,
      clientCredentials: wired.clientCredentials,
      oauthUser: wired.oauthUser,
      tokenExchange: wired.tokenExchange,
    };
    // The executor hands on the caches it was given: one token per grant for the whole process.
    assert.equal(createExecutor(base).clientCredentials, wired.clientCredentials);
    assert.throws(() => createExecutor({ ...base, timeoutMs: 0 }), TypeError);
    assert.throws(() => createExecutor({ ...base, maxResponseBytes: -1 }), TypeError);
    assert.throws(() => createExecutor({ ...base, secretResolver: undefined as never }), TypeError);
    assert.throws(() => createExecutor({ ...base, egress: undefined as never }), /egress is required/);
    assert.throws(
      () => createExecutor({ ...base, constraintsRollout: { enabled: "yes" } as never }),
      TypeError,
    );
    for (const cache of ["clientCredentials", "oauthUser", "tokenExchange"] as const)
      assert.throws(
        () => createExecutor({ ...base, [cache]: undefined as never }),
        new RegExp(`${cache} is required`),
      );
  });
});
